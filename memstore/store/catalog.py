"""The parsed-records projection of one store: every memory and event, refreshed incrementally.

A cheap stat walk finds what changed since the last call; only those files are parsed again.
The result is cached in ``.index/catalog.json`` so a fresh process does not re-parse the store.
Invalid files are kept aside with their reason and never stop the others from loading; so are
files over the store's cap, and every file of an id that two files claim (SECURITY: a file that
reuses a trusted memory's id must not replace it, and neither side wins silently).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import AmbiguousId, Conflict, InvalidFile, InvalidRequest, NotFound
from . import ids
from .changelog import ChangeLog
from .disk import SHARED_PREFIX, Store
from .files import NotOurs, atomic_write, clear_way, read_projection, set_aside
from .model import DIR_KINDS, Event, Memory
from .userkey import looks_sealed, projection_key, sealing, unseal

CATALOG_VERSION = 4  # 3: files read by lstat, never through links; error codes; id conflicts; 4: typed links
# Ids remembered in the change log across generations. A reader further behind than this (or
# behind a full rebuild of the views) rebuilds its own views instead of applying the changes.
LOG_LIMIT = 4096


@dataclass
class Delta:
    added: set[str] = field(default_factory=set)
    changed: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)
    events_changed: bool = False
    events: set[str] = field(default_factory=set)  # ids of the events added, changed or removed

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed or self.events_changed)


@dataclass(slots=True)
class _Entry:
    mtime_ns: int
    size: int
    memory: Memory | None = None
    event: Event | None = None
    error: str | None = None
    code: str | None = None  # the InvalidFile code of ``error``, for `check`


MAX_FILES = 200_000  # default of limits.max_files: memory and event files parsed per store
# catalog.json holds each file's parsed record: its text JSON-escaped (at most 3x its UTF-8 bytes:
# an emoji is 4 bytes, a surrogate pair of \u escapes 12), the other fields, or an error message.
# A cache larger than this for the files the walk found was not written by memstore for them (a
# clone can commit a 512 MiB one that packs to 2.5 MB): it is set aside unread.
CACHE_PER_BYTE = 4
CACHE_PER_FILE = 4096
CACHE_BASE = 64 * 1024


def cache_cap(sizes: Iterable[int]) -> int:
    """The most bytes catalog.json may hold for files of these sizes."""
    n = total = 0
    for size in sizes:
        n += 1
        total += size
    return CACHE_BASE + CACHE_PER_FILE * n + CACHE_PER_BYTE * total


class Catalog:
    def __init__(self, store: Store, key: bytes = b"") -> None:
        self.store = store
        # The user's key (memstore.store.userkey): catalog.json carries its seal, so a cache that
        # arrives from elsewhere (a tarball keeps mtimes) never stands in for the files.
        self._key = key or projection_key()
        self._entries: dict[str, _Entry] = {}
        self.memories: dict[str, Memory] = {}
        self.events: dict[str, Event] = {}
        self.invalid: dict[str, str] = {}
        self.codes: dict[str, str] = {}  # path -> the code of its entry in ``invalid``
        self.conflicts: dict[str, list[str]] = {}  # id -> the paths claiming it (none is served)
        self.over_cap = 0  # files of the store left unread past limits.max_files
        self.generation = 0
        # The memory and event ids each change of the views touched: what a derived view built
        # at an older generation needs to catch up.
        self._log = ChangeLog(LOG_LIMIT, groups=2)
        self._loaded = False
        self._saved: tuple[int, int, int] | None = None  # the cache file as last saved or loaded
        self._ignore_cache = False
        self._defer_save: bool | None = None  # None: save on every refresh; bool: unsaved changes pending

    @contextlib.contextmanager
    def deferred_save(self) -> Iterator[None]:
        """Save the cache once at the end of the block rather than after every refresh: a bulk
        import refreshes after each write, and re-serialising n records n times is quadratic."""
        if self._defer_save is not None:
            yield
            return
        self._defer_save = False
        try:
            yield
        finally:
            pending, self._defer_save = self._defer_save, None
            if pending:
                self._save_cache()

    # -- persistence ---------------------------------------------------------------------------
    @property
    def _cache_path(self) -> os.PathLike[str]:
        return self.store.index_dir / "catalog.json"

    def _load_cache(self, cap: int) -> None:
        """The records catalog.json holds, if this user sealed it and it is no larger than
        ``cap`` (checked on the open file before it is read); anything else is set aside."""
        self._loaded = True
        if self._ignore_cache:
            self._ignore_cache = False
            return
        path = self.store.index_dir / "catalog.json"
        try:
            data = read_projection(path, cap, tail=looks_sealed)
            self._saved = _stat(path)
            body = unseal(data, self._key)
            del data  # at 100k memories each copy of the file is ~70 MB: hold one at a time
            if body is None:
                # Not sealed by this user (a clone brought it): parse the files, and write ours.
                set_aside(path, "is not sealed by this user")
                return
            text = body.decode("utf-8")
            del body
            self._entries = _read_records(text, str(self.store.root))
        except (NotOurs, OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
            self._entries = {}

    def _save_cache(self, items: list[tuple[str, _Entry]] | None = None) -> None:
        # The cache is a projection: failing to save it only costs the next process a re-parse.
        with contextlib.suppress(OSError):
            path = clear_way(self.store.index_dir / "catalog.json")
            atomic_write(path, sealing(self._cache_chunks(items), self._key))
            self._saved = _stat(self._cache_path)

    def reset(self) -> None:
        """Forget the cache and every record: the next refresh parses every file again (a file
        edited without a change of size or mtime is otherwise never looked at again)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._cache_path)
        self._entries = {}
        self._loaded = False  # the next refresh is a first one: every view rebuilt
        self._ignore_cache = True
        self._saved = None

    def _cache_chunks(self, items: list[tuple[str, _Entry]] | None = None) -> Iterator[str]:
        """catalog.json, one file's record at a time: at 100k memories the whole document is
        ~70 MB of text and several times that as Python objects, a peak not worth paying."""
        dumps = json.JSONEncoder(separators=(",", ":")).encode
        yield f'{{"version":{CATALOG_VERSION},"root":{dumps(str(self.store.root))},"files":{{'
        sep = ""
        for rel, entry in items if items is not None else list(self._entries.items()):
            item: dict[str, Any] = {"m": entry.mtime_ns, "s": entry.size}
            if entry.error is not None:
                item["e"] = entry.error
                if entry.code is not None:
                    item["c"] = entry.code
            if entry.memory is not None:
                item["mem"] = asdict(entry.memory)
            elif entry.event is not None:
                item["ev"] = asdict(entry.event)
            yield f"{sep}{dumps(rel)}:{dumps(item)}"
            sep = ","
        yield "}}"

    # -- refresh -------------------------------------------------------------------------------
    def refresh(self, *, persist: bool = True) -> Delta:
        """Bring the records in line with the files. Returns what changed since the last call."""
        walks = [(rel, st, True) for rel, st in self.store.memory_files()]
        walks += [(rel, st, False) for rel, st in self.store.event_files()]
        first = not self._loaded
        if first:  # after the walk: what it found bounds the cache
            self._load_cache(cache_cap(w[1].st_size for w in walks))
        seen: set[str] = set()
        touched: dict[str, _Entry | None] = {}
        cap = self.max_files
        self.over_cap = max(0, len(walks) - cap)
        if self.over_cap:
            # A store that big is hostile or broken: parse a fixed part of it (the same in every
            # clone), not every file, and say so (`check`, `list`).
            walks.sort(key=lambda w: w[0])
            del walks[cap:]
        for rel, st, is_memory in walks:
            seen.add(rel)
            old = self._entries.get(rel)
            if old is not None and old.mtime_ns == st.st_mtime_ns and old.size == st.st_size:
                continue
            touched[rel] = old
            self._entries[rel] = self._parse(rel, st, is_memory)
        for rel in [r for r in self._entries if r not in seen]:
            touched[rel] = self._entries.pop(rel)
        return self._settle(touched, first, persist)

    def refresh_paths(self, rels: set[str] | list[str], *, persist: bool = True) -> Delta:
        """Like ``refresh`` for just these store-relative paths: a file watcher that knows what
        changed spares a stat walk over every file of a large store."""
        if not self._loaded:
            return self.refresh(persist=persist)
        touched: dict[str, _Entry | None] = {}
        for rel in rels:
            top, _, name = rel.partition("/")
            is_memory = top in DIR_KINDS and "/" not in name and name.endswith(".md")
            if not (is_memory or (top == "events" and "/" not in name and name.endswith(".yaml"))):
                continue
            if name.startswith("."):
                continue
            old = self._entries.get(rel)
            try:
                st = os.lstat(self.store.root / rel)  # a link is reported, never followed
            except FileNotFoundError:
                if old is not None:
                    touched[rel] = self._entries.pop(rel)
                continue
            if old is None and len(self._entries) >= self.max_files:
                self.over_cap += 1
                continue
            if old is not None and old.mtime_ns == st.st_mtime_ns and old.size == st.st_size:
                continue
            touched[rel] = old
            self._entries[rel] = self._parse(rel, st, is_memory)
        return self._settle(touched, False, persist)

    @property
    def max_files(self) -> int:
        return self.store.config.cap("max_files", MAX_FILES)

    def _parse(self, rel: str, st: os.stat_result, is_memory: bool) -> _Entry:
        entry = _Entry(st.st_mtime_ns, st.st_size)
        try:
            if is_memory:
                entry.memory = self.store.load_memory(rel, st)
            else:
                entry.event = self.store.load_event(rel, st)
        except InvalidFile as exc:
            entry.error, entry.code = exc.message, exc.code
        except OSError as exc:
            entry.error, entry.code = f"cannot read: {exc}", "unreadable"
        return entry

    def _settle(self, touched: dict[str, _Entry | None], first: bool, persist: bool) -> Delta:
        delta = Delta()
        if touched or first:
            incremental = None if first or len(touched) > 256 else self._update_views(touched)
            delta = incremental if incremental is not None else self._rebuild_views()
            self.generation += 1
            self._note(incremental)
        if touched:
            if persist and self._defer_save is not None:
                self._defer_save = True
            elif persist:
                self._save_cache()
        return delta

    def _note(self, delta: Delta | None) -> None:
        """Log what this generation changed; None (the views were rebuilt) forgets the past."""
        if delta is None:
            self._log.forget(self.generation)
        else:
            self._log.note(self.generation, delta.added | delta.changed | delta.removed, delta.events)

    def changes_since(self, generation: int) -> tuple[set[str], set[str]] | None:
        """Ids of the memories and events added, changed or removed after ``generation``; None
        when the log does not reach back that far: rebuild from ``memories``/``events`` then."""
        since = self._log.since(generation)
        return None if since is None else (since[0], since[1])

    def _update_views(self, touched: dict[str, _Entry | None]) -> Delta | None:
        """Apply a few changed files to the views in place (a full rebuild is O(store) per write).
        None when a duplicate id is involved: only a full rebuild decides which file wins."""
        if any(msg.startswith("duplicate id") for msg in self.invalid.values()):
            return None
        delta = Delta()
        for rel in touched:
            new = self._entries.get(rel)
            if new is not None and new.memory is not None:
                holder = self.memories.get(new.memory.id)
                if holder is not None and holder.path != rel:
                    return None
        for rel, old in touched.items():
            new = self._entries.get(rel)
            self.invalid.pop(rel, None)
            self.codes.pop(rel, None)
            if old is not None and old.memory is not None and self.memories.get(old.memory.id) is old.memory:
                del self.memories[old.memory.id]
                delta.removed.add(old.memory.id)
            if old is not None and old.event is not None:
                self.events.pop(old.event.id, None)
                delta.events_changed = True
                delta.events.add(old.event.id)
            if new is None:
                continue
            if new.error is not None:
                self.invalid[rel] = new.error
                self.codes[rel] = new.code or "invalid_file"
            elif new.memory is not None:
                mid = new.memory.id
                self.memories[mid] = new.memory
                if mid in delta.removed:
                    delta.removed.discard(mid)
                    delta.changed.add(mid)
                else:
                    delta.added.add(mid)
            elif new.event is not None:
                self.events[new.event.id] = new.event
                delta.events_changed = True
                delta.events.add(new.event.id)
        return delta

    def _rebuild_views(self) -> Delta:
        before = {mid: m for mid, m in self.memories.items()}
        events_before = set(self.events)
        memories: dict[str, Memory] = {}
        events: dict[str, Event] = {}
        invalid: dict[str, str] = {}
        codes: dict[str, str] = {}
        claims: dict[str, list[str]] = {}
        conflicts: dict[str, list[str]] = {}
        for rel in sorted(self._entries):
            entry = self._entries[rel]
            if entry.error is not None:
                invalid[rel] = entry.error
                codes[rel] = entry.code or "invalid_file"
            elif entry.memory is not None:
                claims.setdefault(entry.memory.id, []).append(rel)
            elif entry.event is not None:
                events[entry.event.id] = entry.event
        for mid, rels in claims.items():
            if len(rels) == 1:
                memories[mid] = self._entries[rels[0]].memory  # type: ignore[assignment]
                continue
            # Which file is genuine is not for memstore to guess (path order, mtime and commit
            # dates are all the newcomer's to choose): neither is served until one is removed.
            conflicts[mid] = rels
            for rel in rels:
                others = ", ".join(self.store.display_path(r) for r in rels if r != rel)
                invalid[rel] = (f"duplicate id {mid}: also claimed by {others}; neither file is served "
                                "until one of them is removed or given a new id")
                codes[rel] = "id_conflict"
        delta = Delta()
        for mid, mem in memories.items():
            old = before.get(mid)
            if old is None:
                delta.added.add(mid)
            elif old is not mem:
                delta.changed.add(mid)
        delta.removed = set(before) - set(memories)
        delta.events_changed = set(events) != events_before or any(
            self.events.get(k) is not v for k, v in events.items()
        )
        self.memories, self.events, self.invalid, self.codes = memories, events, invalid, codes
        self.conflicts = conflicts
        return delta

    def hold_saves(self) -> None:
        """Keep changes in memory until ``flush``: a long-lived process (the daemon) would
        otherwise rewrite the whole cache after every write."""
        if self._defer_save is None:
            self._defer_save = False

    def flush(self) -> None:
        save = self.flush_later()
        if save is not None:
            save()

    def flush_later(self) -> Callable[[], None] | None:
        """``flush`` in two steps, for a caller holding a lock others wait on: the records are
        taken now (entries are replaced, never changed in place) and the returned function
        writes them, without that lock (~2 s at 100k memories). None: nothing to save."""
        if not self._defer_save and (not self._loaded or self._saved is None or _stat(self._cache_path) == self._saved):
            return None
        # Changes pending, or the cache was deleted or damaged on disk since it was saved.
        self._defer_save = False
        items = list(self._entries.items())
        return lambda: self._save_cache(items)

    # -- lookups ---------------------------------------------------------------------------------
    def match_prefix(self, prefix: str) -> list[str]:
        return [mid for mid in self.memories if mid.startswith(prefix)]


def find(catalogs: Iterable[Catalog], prefix: str, *, field_name: str | None = None) -> Memory:
    """Resolve a full id or a unique prefix (at least ``ids.MIN_PREFIX`` characters) across
    ``catalogs``: the one memory it names, else a typed error (too short, claimed by two files,
    not found, ambiguous) that names ``field_name``."""
    if not isinstance(prefix, str) or len(prefix.strip()) < ids.MIN_PREFIX:
        raise InvalidRequest(
            f"id {prefix!r} is too short: give at least {ids.MIN_PREFIX} characters",
            field=field_name, code="bad_id",
        )
    norm = ids.normalize_prefix(prefix)
    hits: list[Memory] = []
    claimed: list[str] = []
    for cat in catalogs:
        hits += [cat.memories[m] for m in cat.match_prefix(norm)]
        claimed += [cat.store.display_path(p)
                    for mid, paths in cat.conflicts.items() if mid.startswith(norm) for p in paths]
    # An id a shared store reuses never hides the user's own memory (reads serve the repo's or
    # the global store's record, workspace.view_order): the shared copy is not a second match.
    own = {h.id for h in hits if not h.scope.startswith(SHARED_PREFIX)}
    hits = [h for h in hits if h.id not in own or not h.scope.startswith(SHARED_PREFIX)]
    if not hits and claimed:
        # Two files claim the id: serving either could serve an impostor.
        raise Conflict(f"id {prefix!r} is claimed by {len(claimed)} files ({', '.join(claimed)}); none is "
                       "served until only one holds it", field=field_name, code="id_conflict",
                       hint="run `memstore check` and remove or re-id the file that is not genuine")
    if not hits:
        raise NotFound(f"no memory with id {prefix!r}", field=field_name)
    if len(hits) > 1:
        shown = ", ".join(sorted(h.id for h in hits)[:5])
        raise AmbiguousId(f"id prefix {prefix!r} matches {len(hits)} memories: {shown}", field=field_name,
                          hint="give more characters")
    return hits[0]


def _stat(path: os.PathLike[str]) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


# catalog.json's records are read one at a time, each turned into its _Entry at once: parsing the
# whole document first (json.loads) held every record twice at 100k memories, as dicts and as
# memories, and the dicts' freed blocks stayed spread between the memories' (~100 MB of RSS).
_DECODE = json.JSONDecoder().raw_decode


def _read_records(text: str, root: str) -> dict[str, _Entry]:
    """The records of catalog.json's ``text`` (as ``_cache_chunks`` writes it: no whitespace, the
    version and root before the files); {} when the version or root is not this store's.
    ValueError, KeyError, TypeError, AttributeError or IndexError: not such a document."""
    if not text.startswith("{"):
        raise ValueError("catalog.json is not an object")
    head: dict[str, Any] = {}
    entries: dict[str, _Entry] = {}
    share = _Share()
    at = 1
    while text[at] != "}":
        key, at = _DECODE(text, at)
        at = _expect(text, at, ":")
        if key != "files":
            head[key], at = _DECODE(text, at)
        elif (head.get("version"), head.get("root")) != (CATALOG_VERSION, root):
            return {}
        else:
            at = _expect(text, at, "{")
            while text[at] != "}":
                rel, at = _DECODE(text, at)
                if not isinstance(rel, str):
                    raise TypeError("catalog.json: a file's key is not a path")
                at = _expect(text, at, ":")
                item, at = _DECODE(text, at)
                entries[rel] = share.entry(rel, item)
                at = _after_member(text, at)
            at += 1
        at = _after_member(text, at)
    return entries


def _expect(text: str, at: int, char: str) -> int:
    if text[at] != char:
        raise ValueError(f"catalog.json: expected {char!r} at {at}")
    return at + 1


def _after_member(text: str, at: int) -> int:
    """Past the comma after an object's member; at the brace that closes the object."""
    if text[at] == ",":
        return at + 1
    if text[at] != "}":
        raise ValueError(f"catalog.json: expected ',' or '}}' at {at}")
    return at


_SHARED_FIELDS = ("kind", "scope", "created", "author", "rationale")


class _Share:
    """One object for each repeated value of a load's records: the kinds, scopes, authors,
    dates, tags, evidence refs and link targets of 100k memories are a few thousand distinct
    strings, and the JSON decoder makes a new one each time (~500 bytes a memory). Only
    immutable values are shared; every memory keeps its own lists and dicts."""

    def __init__(self) -> None:
        self._strings: dict[str, str] = {}
        self._share = self._strings.setdefault  # bound once: called ~10 times a memory
        self._numbers: dict[tuple[type, Any], Any] = {}

    def text(self, value: Any) -> Any:
        return self._share(value, value) if type(value) is str else value

    def number(self, value: Any) -> Any:
        # keyed by type too: 1 == 1.0 == True, and a memory's confidence keeps the type it had
        return self._numbers.setdefault((type(value), value), value) if value is not None else None

    def value(self, value: Any) -> Any:
        """A link's value: a target id, a list of them, or a list of typed links' dicts."""
        if type(value) is str:
            return self._share(value, value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k): self.value(v) for k, v in value.items()}
        return value

    def entry(self, rel: str, item: dict[str, Any]) -> _Entry:
        entry = _Entry(item["m"], item["s"], error=item.get("e"), code=self.text(item.get("c")))
        if "mem" in item:
            entry.memory = self.memory(rel, item["mem"])
        elif "ev" in item:
            entry.event = Event(**item["ev"])
        return entry

    def memory(self, rel: str, fields: dict[str, Any]) -> Memory:
        share = self._share
        for name in _SHARED_FIELDS:
            value = fields.get(name)
            if type(value) is str:
                fields[name] = share(value, value)
        if fields.get("path") == rel:
            fields["path"] = rel  # the same string as the entry's key
        if fields.get("confidence") is not None:
            fields["confidence"] = self.number(fields["confidence"])
        for name in ("evidence", "tags"):
            values = fields.get(name)
            if type(values) is list:
                fields[name] = [share(v, v) if type(v) is str else v for v in values]
        links = fields.get("links")
        if type(links) is dict and links:
            fields["links"] = self.value(links)
        return Memory(**fields)
