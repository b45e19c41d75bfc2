"""The parsed-records projection of one store: every memory and event, refreshed incrementally.

A cheap stat walk finds what changed since the last call; only those files are parsed again.
The result is cached in ``.index/catalog.json`` so a fresh process does not re-parse the store.
Invalid files are kept aside with their reason and never stop the others from loading; so are
files over the store's cap, and every file of an id that two files claim (SECURITY: a file that
reuses a trusted memory's id must not replace it, and neither side wins silently).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import logging
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from ..errors import AmbiguousId, Conflict, InvalidFile, InvalidRequest, NotFound
from . import ids
from .changelog import ChangeLog
from .config import env_count
from .disk import SHARED_PREFIX, Store
from .files import Found, NotOurs, atomic_write, clear_way, found_stat, read_projection, scan_memory, set_aside
from .model import DIR_KINDS, Event, Memory
from .userkey import looks_sealed, projection_key, sealing, unseal

log = logging.getLogger("memstore.store.catalog")

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


# A read that finds more memory files than this to parse (a fresh clone of a large store)
# parses, before it answers, only the files that may hold what it looks for, about this many at
# most, and leaves the rest unread until the load completes (``Wanted``).
FIRST_PARSE = 10_000
FIRST_PARSE_ENV = "MEMSTORE_FIRST_PARSE"  # another threshold (tests set a low one to take this path)


def first_parse_setting() -> int:
    """``MEMSTORE_FIRST_PARSE``, or ``FIRST_PARSE``."""
    return env_count(FIRST_PARSE_ENV, FIRST_PARSE)


@dataclass(frozen=True)
class Wanted:
    """What a read looks for, so that a first load can leave unread the files that cannot hold
    it: ``texts``, strings the lower-cased text of every memory holding one of the query's terms
    contains (the scan lane's ``source``); ``tags``, lower-cased tags that are a query term."""

    texts: tuple[str, ...]
    tags: frozenset[str] = frozenset()


# Files whose bodies ``_Needles.find`` searches as one text (~0.5 MB of short memories).
_SEARCH_FILES = 2000
TAG_KEY = "\x00tag:"  # in ``Catalog.unread_holding``, before a tag (no string looked for holds a NUL)


class _Unread(NamedTuple):
    """A memory file a partial load scanned and did not parse: its stat when read, the id its strict
    scan found, and its bytes (parsed from these when the load completes)."""

    mtime_ns: int
    size: int
    id: str
    data: bytes
    body: int  # where the body starts in ``data``
    tags: list[str]  # lower-cased, as the scan read them


class _Needles:
    """``Wanted`` as bytes to look for in a scanned file, and how many files hold each.

    Of the wanted strings, the rarest among the files looked at are honoured first, while the
    files they are in stay within a budget (the rarest always): a query's common words (in half
    the store) would otherwise have most files parsed before the answer, and a memory that holds
    only common query words scores little in the keyword lane."""

    def __init__(self, wanted: Wanted) -> None:
        texts = [t.encode("utf-8") for t in dict.fromkeys(wanted.texts)]
        # A string that holds another is found wherever that one is looked for.
        self.texts = [t for t in texts if not any(o != t and o in t for o in texts)]
        self.tags = sorted(wanted.tags)
        self.holders: list[int] = []
        self.counts: list[int] = []

    def find(self, helds: Sequence[_Unread]) -> None:
        """Which of ``helds`` hold each wanted string and tag (``holders``: a bitmap each, one
        byte a file, 1 where it holds it) and how many (``counts``). The bodies are searched
        a few thousand at a time as one lower-cased text (NUL between them: no string looked
        for holds one), each string from one file's body to the next after a hit (a test of
        every string in every body took 165-496 ms at 100k for perf.py's queries; this, 143-320)."""
        n = len(helds)
        found = [bytearray(n) for _ in range(len(self.texts) + len(self.tags))]
        bisect_right = bisect.bisect_right
        for lo in range(0, n, _SEARCH_FILES):
            part = helds[lo:lo + _SEARCH_FILES]
            starts: list[int] = []
            at = 0
            for held in part:
                starts.append(at)
                at += len(held.data) - held.body + 1
            starts.append(at)  # past the last body: where a search after a hit in it starts
            text = b"\0".join([memoryview(held.data)[held.body:] for held in part]).lower()
            find = text.find
            for into, needle in zip(found, self.texts, strict=False):
                # After a hit, on from the next file's body: a file is counted once, and a
                # string in most files costs a find per file, not per place it is in.
                pos = find(needle)
                while pos >= 0:
                    k = bisect_right(starts, pos) - 1
                    into[lo + k] = 1
                    pos = find(needle, starts[k + 1])
        if self.tags:
            tags = [held.tags for held in helds]
            for into, tag in zip(found[len(self.texts):], self.tags, strict=True):
                into[:] = bytes(map(operator.contains, tags, itertools.repeat(tag)))
        self.holders = [int.from_bytes(into, "little") for into in found]
        self.counts = [holders.bit_count() for holders in self.holders]

    def choose(self, budget: int) -> int:
        """The files to parse (a bitmap as ``holders``): those holding the strings honoured,
        rarest first, while their files stay within ``budget``."""
        files = total = 0
        for n, i in enumerate(sorted(range(len(self.counts)), key=self.counts.__getitem__)):
            if n and total + self.counts[i] > budget:
                break
            files |= self.holders[i]
            total += self.counts[i]
        return files

    def left(self, parsed: int) -> dict[str, int]:
        """Of each string and tag, how many of the files found were left unread (not in the
        bitmap ``parsed``): what the keyword lane adds to a term's document frequency until
        they are read. A tag's key is ``TAG_KEY`` and the tag."""
        keys = [text.decode("utf-8") for text in self.texts] + [TAG_KEY + tag for tag in self.tags]
        return {key: (holders & ~parsed).bit_count() for key, holders in zip(keys, self.holders, strict=True)}


def _picked(files: int, n: int) -> bytes:
    """A bitmap of ``_Needles`` as one byte a file (1: picked), for ``zip`` with the files."""
    return files.to_bytes(n, "little")


def _failed(st: os.stat_result, exc: InvalidFile | OSError) -> _Entry:
    """The entry of a file that could not be read or parsed: its error and the code ``check``
    reports it with."""
    if isinstance(exc, InvalidFile):
        return _Entry(st.st_mtime_ns, st.st_size, error=exc.message, code=exc.code)
    return _Entry(st.st_mtime_ns, st.st_size, error=f"cannot read: {exc}", code="unreadable")


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
        # Memory files a read's first load left unread (``Wanted``): none of them is in
        # ``memories`` yet, so the views are partial until ``complete``.
        self._unread: dict[str, _Unread] = {}
        # Files ``complete`` parsed a slice at a time, not in the views yet (the next settle).
        self._unsettled: dict[str, _Entry | None] = {}
        # Of the strings the last partial read looked for, how many unread files hold each: the
        # keyword lane counts them in a term's document frequency, so that its idf is the whole
        # store's while those files wait (``unread`` counts them in the number of documents).
        self.unread_holding: dict[str, int] = {}
        self._unread_chars: tuple[tuple[int, int] | None, int] = (None, 0)  # (generation, files): chars
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

    def _load_cache(self, cap: Callable[[], int]) -> None:
        """The records catalog.json holds, if this user sealed it and it is no larger than
        ``cap()`` (checked on the open file before it is read); anything else is set aside."""
        self._loaded = True
        if self._ignore_cache:
            self._ignore_cache = False
            return
        path = self.store.index_dir / "catalog.json"
        if not os.path.lexists(path):
            # A fresh clone's: no cap to work out (it takes an lstat of every file).
            return
        try:
            data = read_projection(path, cap(), tail=looks_sealed)
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
        self._unread = {}
        self._unsettled = {}
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
    def refresh(self, *, persist: bool = True, wanted: Wanted | None = None) -> Delta:
        """Bring the records in line with the files. Returns what changed since the last call.

        ``wanted``: a read's, when it may answer from part of the store. With more than
        ``FIRST_PARSE`` memory files to parse, only those that may hold what it looks for are
        parsed now and the others left unread (``partial``); without it, every file is read,
        the ones a partial load left unread included."""
        walks: list[tuple[str, Found, bool]] = [(rel, e, True) for rel, e in self.store.memory_entries()]
        walks += [(rel, e, False) for rel, e in self.store.event_entries()]
        first = not self._loaded
        if first:  # after the walk: what it found bounds the cache
            self._load_cache(lambda: cache_cap(st.st_size for w in walks if (st := found_stat(w[1]))))
        seen: set[str] = set()
        touched: dict[str, _Entry | None] = {}
        cap = self.max_files
        self.over_cap = max(0, len(walks) - cap)
        if self.over_cap:
            # A store that big is hostile or broken: parse a fixed part of it (the same in every
            # clone), not every file, and say so (`check`, `list`).
            walks.sort(key=lambda w: w[0])
            del walks[cap:]
        unread, self._unread = self._unread, {}
        todo: list[tuple[str, Found, bool]] = []
        for rel, found, is_memory in walks:
            old = self._entries.get(rel)
            held = unread.get(rel)
            if old is not None or held is not None:
                # Only a file on record needs its lstat to tell whether it changed; a file read
                # for the first time is judged by the fstat of its open descriptor (read_found).
                st = found_stat(found)
                if st is None:  # gone since the walk: as if not found
                    continue
                seen.add(rel)
                if old is not None and old.mtime_ns == st.st_mtime_ns and old.size == st.st_size:
                    continue
                found = st
            else:
                seen.add(rel)
            todo.append((rel, found, is_memory))
        if wanted is not None and sum(w[2] for w in todo) > (budget := first_parse_setting()):
            self._read_partly(todo, wanted, touched, budget)
        else:
            reading = self._reading()
            for rel, found, is_memory in todo:
                touched[rel] = self._entries.pop(rel, None)
                held = unread.get(rel)
                if (held is not None and isinstance(found, os.stat_result) and held.mtime_ns == found.st_mtime_ns
                        and held.size == found.st_size):
                    self._entries[rel] = self._parse_data(rel, found, held.data)
                elif (entry := self._parse(rel, found, is_memory, reading)) is not None:
                    self._entries[rel] = entry
        for rel in [r for r in self._entries if r not in seen]:
            touched[rel] = self._entries.pop(rel)
        # Files left unread (or no longer) change which ids are claimed: the views are rebuilt.
        return self._settle(touched, first, persist, rebuild=bool(unread or self._unread))

    def _read_partly(self, todo: list[tuple[str, Found, bool]], wanted: Wanted,
                     touched: dict[str, _Entry | None], budget: int) -> None:
        """Parse of ``todo`` the files that may hold what ``wanted`` names and those the strict
        scan cannot read; leave the rest unread, each with the id its scan found (a file that
        claims the id of a parsed one keeps that one from being served, as a parsed file would)."""
        needles = _Needles(wanted)
        maybe: list[tuple[str, os.stat_result, _Unread]] = []
        reading = self._reading()
        for rel, found, is_memory in todo:
            touched[rel] = self._entries.pop(rel, None)
            read = reading(rel, found)
            if read is None:
                continue
            if isinstance(read, _Entry):
                self._entries[rel] = read
                continue
            st, data = read
            if not is_memory:
                self._entries[rel] = self._parse_data(rel, st, data, is_memory=False)
                continue
            got = scan_memory(data) if isinstance(data, bytes) else None
            if got is None:
                self._entries[rel] = self._parse_data(rel, st, data)
                continue
            maybe.append((rel, st, _Unread(st.st_mtime_ns, st.st_size, got[0], data, got[2], got[1])))  # type: ignore[arg-type]
        needles.find([held for _, _, held in maybe])
        files = needles.choose(budget)
        for (rel, st, held), pick in zip(maybe, _picked(files, len(maybe)), strict=True):
            if pick:
                self._entries[rel] = self._parse_data(rel, st, held.data)
            else:
                self._unread[rel] = held
        self.unread_holding = needles.left(files)

    def read_wanted(self, wanted: Wanted, *, persist: bool = True) -> Delta:
        """A read while a partial load's files wait: parse the unread files that may hold what
        it looks for (from the bytes held, within the same budget as a first load), and leave
        the rest unread."""
        needles = _Needles(wanted)
        rels = list(self._unread)
        needles.find(list(self._unread.values()))
        files = needles.choose(first_parse_setting())
        touched: dict[str, _Entry | None] = {}
        for rel, pick in zip(rels, _picked(files, len(rels)), strict=True):
            if pick:
                touched[rel] = self._entries.get(rel)
                self._entries[rel] = self._parse_unread(rel, self._unread.pop(rel))
        self.unread_holding = needles.left(files)
        return self._settle(touched, False, persist, rebuild=bool(touched))

    def _parse_unread(self, rel: str, held: _Unread) -> _Entry:
        """The entry of a file left unread: parsed from the bytes held while its lstat is the
        same, read again when it changed since (gone: an error entry the next walk drops)."""
        try:
            st = os.lstat(self.store.root / rel)
        except FileNotFoundError:
            return _Entry(held.mtime_ns, held.size, error="was removed", code="unreadable")
        if held.mtime_ns == st.st_mtime_ns and held.size == st.st_size:
            return self._parse_data(rel, st, held.data)
        return self._parse(rel, st, True) or _Entry(held.mtime_ns, held.size, error="was removed", code="unreadable")

    @property
    def partial(self) -> bool:
        """Some memory files are not read yet (a read's first load): ``memories`` holds only
        part of the store until ``complete``."""
        return bool(self._unread or self._unsettled)

    @property
    def unread(self) -> int:
        """How many memory files a partial load has not read yet."""
        return len(self._unread) + len(self._unsettled)

    @property
    def unread_chars(self) -> int:
        """About how many characters the bodies of the files not read yet hold (ASCII, as the
        strict scan accepts them: one a byte)."""
        # Asked by every index refresh while files wait (a sum over ~100k files, ~40 ms): worked
        # out again when files were left unread or read since (each such change settles the
        # views, a new generation, or takes files out).
        key = (self.generation, len(self._unread))
        if self._unread_chars[0] != key:
            self._unread_chars = (key, sum(len(held.data) - held.body for held in self._unread.values()))
        return self._unread_chars[1]

    def complete(self, *, persist: bool = True, limit: int | None = None) -> Delta | None:
        """Parse the files a partial load left unread (from the bytes it read, when the file's
        lstat is unchanged; a file changed or gone since is read again, or dropped), and bring
        the views in line. ``limit``: parse at most this many now and return None while some
        remain (the views change once, when the last is parsed)."""
        if not self.partial:
            return Delta()
        rels = list(self._unread)[:limit] if limit is not None else list(self._unread)
        for rel in rels:
            held = self._unread.pop(rel)
            if not os.path.lexists(self.store.root / rel):
                continue
            self._unsettled[rel] = self._entries.get(rel)
            self._entries[rel] = self._parse_unread(rel, held)
        if self._unread:
            return None
        self.unread_holding = {}
        return self._settle({}, False, persist, rebuild=True)

    def refresh_paths(self, rels: set[str] | list[str], *, persist: bool = True,
                      wanted: Wanted | None = None) -> Delta:
        """Like ``refresh`` for just these store-relative paths: a file watcher that knows what
        changed spares a stat walk over every file of a large store."""
        if not self._loaded:
            return self.refresh(persist=persist, wanted=wanted)
        touched: dict[str, _Entry | None] = {}
        rebuild = False
        for rel in rels:
            top, _, name = rel.partition("/")
            is_memory = top in DIR_KINDS and "/" not in name and name.endswith(".md")
            if not (is_memory or (top == "events" and "/" not in name and name.endswith(".yaml"))):
                continue
            if name.startswith("."):
                continue
            old = self._entries.get(rel)
            # A file left unread that changed is read now, as any other (or dropped when gone).
            rebuild = self._unread.pop(rel, None) is not None or rebuild
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
            entry = self._parse(rel, st, is_memory)
            if entry is not None:
                self._entries[rel] = entry
            elif old is not None:
                del self._entries[rel]
        return self._settle(touched, False, persist, rebuild=rebuild)

    @property
    def max_files(self) -> int:
        return self.store.config.cap("max_files", MAX_FILES)

    def _reading(self) -> Callable[[str, Found], tuple[os.stat_result, bytes | str] | _Entry | None]:
        """A walked file's stat and bytes, or the entry saying why it was not read; None when
        it is gone since the walk."""
        reader = self.store.found_reader()

        def read(rel: str, found: Found) -> tuple[os.stat_result, bytes | str] | _Entry | None:
            try:
                return reader(rel, found)
            except (InvalidFile, OSError) as exc:
                st = found_stat(found)
                return None if st is None else _failed(st, exc)

        return read

    def _parse(self, rel: str, found: Found, is_memory: bool,
               reading: Callable[[str, Found], tuple[os.stat_result, bytes | str] | _Entry | None] | None = None
               ) -> _Entry | None:
        """The entry of a walked file (None: gone since the walk); ``reading``: a loop's ``_reading()``."""
        read = (reading or self._reading())(rel, found)
        if read is None or isinstance(read, _Entry):
            return read
        return self._parse_data(rel, read[0], read[1], is_memory=is_memory)

    def _parse_data(self, rel: str, st: os.stat_result, data: bytes | str, *, is_memory: bool = True) -> _Entry:
        """``_parse`` of a file whose bytes (or text) were read already."""
        entry = _Entry(st.st_mtime_ns, st.st_size)
        try:
            if is_memory:
                entry.memory = self.store.memory_from_bytes(rel, data)
            else:
                entry.event = self.store.event_from_bytes(rel, data)
        except InvalidFile as exc:
            return _failed(st, exc)
        return entry

    def _settle(self, touched: dict[str, _Entry | None], first: bool, persist: bool, *,
                rebuild: bool = False) -> Delta:
        if self._unsettled:
            touched, self._unsettled = {**self._unsettled, **touched}, {}
            rebuild = True
        delta = Delta()
        if touched or first or rebuild:
            incremental = (None if first or rebuild or self._unread or len(touched) > 256
                           else self._update_views(touched))
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
        # A file left unread claims the id its strict scan found: a parsed file of that id is
        # not served meanwhile, as if both had been parsed (neither is ever served).
        unread: dict[str, list[str]] = {}
        for rel, held in self._unread.items():
            unread.setdefault(held.id, []).append(rel)
        for mid, rels in claims.items():
            if mid in unread:
                rels = sorted(rels + unread[mid])
            if len(rels) == 1:
                memories[mid] = self._entries[rels[0]].memory  # type: ignore[assignment]
                continue
            # Which file is genuine is not for memstore to guess (path order, mtime and commit
            # dates are all the newcomer's to choose): neither is served until one is removed.
            conflicts[mid] = rels
            for rel in rels:
                if rel in self._unread:
                    continue
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
