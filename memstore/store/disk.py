"""A store on disk (``.memory/`` or ``~/.memory``): its layout, parsing its files, and being the
only code that writes canonical files (memories, events, episodes)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import stat
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import gitops
from ..errors import Conflict, DiskFull, GitError, InvalidFile, NoStore, ReadOnlyStore
from . import ids, kinds
from .config import MAX_FIELD_CHARS, MAX_LIST_ITEMS, Config
from .files import (
    MAX_FILE_BYTES,
    Found,
    atomic_write,
    clear_way,
    dump_markdown,
    dump_yaml,
    file_lock,
    found_stat,
    parse_markdown,
    private_dir,
    read_found,
    read_untrusted,
    real_dir,
    safe_yaml,
    walked_text,
)
from .model import DIR_KINDS, EVENT_TYPES, KIND_DIRS, KINDS, SCOPES, Event, Memory
from .secrets import without_secrets

STORE_DIRNAME = ".memory"
_ID_CHARS = frozenset(ids.ALPHABET)
INDEX_DIRNAME = ".index"
LOCAL_DIRNAME = ".local"  # per-clone state that is never committed (current episode, ...)
# A shared store's scope is this prefix and its name ("shared:team"); its files say "repo" or
# "shared" (or nothing): the same layout as any store, written by `memstore --store DIR`.
SHARED_PREFIX = "shared:"
GITIGNORE = f"{INDEX_DIRNAME}/\n{LOCAL_DIRNAME}/\n"
# The config.yaml `init` writes: what each store's settings are for, said to the person who
# opens the file, with a pointer to where every key is explained.
DEFAULT_CONFIG = """\
# memstore settings for this repository's store, committed with the code. They override the
# global store's (~/.memory/config.yaml); MEMSTORE_* environment variables override both.
# Every key, with its default: docs/configuration.md in memstore's documentation.
write_mode: review        # review: agents' memories are staged, people approve them in the PR | autonomous
git:
  stage: true             # git-add each new memory and event file
  commit: false           # also commit each write
"""
GLOBAL_CONFIG = """\
# memstore settings for your global store (~/.memory, a git repository of its own). They apply
# in every repository, where the repo store's .memory/config.yaml overrides them;
# MEMSTORE_* environment variables override both. Every key, with its default:
# docs/configuration.md in memstore's documentation.
write_mode: review        # review: a global memory waits, proposed, until `memstore approve` | autonomous
git:
  stage: true             # for a repo store: the global store commits every write whatever
  commit: false           # these say, and `memstore sync` carries it through its remote
"""
# What init wrote before GLOBAL_CONFIG: a global store still holding it has not been edited.
OLD_DEFAULT_CONFIG = """\
# memstore settings for this store. Repo settings override the global store's;
# MEMSTORE_* environment variables override both. See the README for every key.
write_mode: review        # review: agents propose, people approve in PRs | autonomous
git:
  stage: true             # git-add new memory/event files (repo store)
  commit: false           # also commit each write (the global store always commits)
"""
# An episode line longer than this is skipped unread: evidence refs need only the seq numbers.
MAX_EPISODE_LINE = 1 << 20


def slugify(text: str, max_len: int = 40) -> str:
    # The name is committed and shown as much as the text: it is made from the text with every
    # likely secret cut out (normalised first, as the scanner reads it), so no secret rides in
    # it, even one in text that reaches here past the write gates (a hand-made file, an import).
    norm = unicodedata.normalize("NFKD", without_secrets(text)).encode("ascii", "ignore").decode().lower()
    words = re.findall(r"[a-z0-9]+", norm)
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > max_len:
            break
        slug = candidate
    return slug or "memory"


def _str_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    # A list of short strings, as memstore writes them (the lists of every file a first load
    # parses): judged by C-level passes over it.
    if (type(value) is list and len(value) <= MAX_LIST_ITEMS and {*map(type, value)} <= _JUST_STR
            and max(map(len, value), default=0) <= MAX_FIELD_CHARS):
        return list(value)
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
        raise InvalidFile(f"{what} must be a list of strings")
    if len(value) > MAX_LIST_ITEMS:
        raise InvalidFile(f"{what} has {len(value)} items, over the cap of {MAX_LIST_ITEMS}", code="too_large")
    out = [str(v) for v in value]
    if any(len(v) > MAX_FIELD_CHARS for v in out):
        raise InvalidFile(f"an item of {what} is over {MAX_FIELD_CHARS} characters", code="too_large")
    return out


_JUST_STR = {str}


def _capped(value: Any, what: str) -> str:
    text = str(value or "")
    if len(text) > MAX_FIELD_CHARS:
        raise InvalidFile(f"{what} is {len(text)} characters, over the cap of {MAX_FIELD_CHARS}; not indexed",
                          code="too_large")
    return text


def _relations(value: Any) -> None:
    """``links.relations`` must be a list of ``{type, id}``: a file from a clone is hostile input,
    and a malformed entry is reported rather than silently dropped."""
    if not isinstance(value, list):
        raise InvalidFile("links.relations must be a list of {type, id}")
    if len(value) > MAX_LIST_ITEMS:
        raise InvalidFile(f"links.relations has {len(value)} items, over the cap of {MAX_LIST_ITEMS}", code="too_large")
    for i, item in enumerate(value):
        if not isinstance(item, dict) or set(item) != {"type", "id"} or not isinstance(item["id"], str):
            raise InvalidFile(f"links.relations[{i}] must be {{type, id}} with a memory id")
        if item["type"] not in kinds.RELATION_TYPES:
            raise InvalidFile(f"links.relations[{i}].type {item['type']!r} is not one of "
                              f"{', '.join(kinds.RELATION_TYPES)}")
        if len(item["id"]) > MAX_FIELD_CHARS:
            raise InvalidFile(f"links.relations[{i}].id is over {MAX_FIELD_CHARS} characters", code="too_large")


def memory_from_file(relpath: str, text: str, scope: str) -> Memory:
    """Parse one memory file. Raises InvalidFile with a reason a person can act on."""
    meta, body = parse_markdown(text)
    folder = relpath.split("/", 1)[0]
    folder_kind = DIR_KINDS.get(folder)
    kind = meta.get("kind", folder_kind)
    if kind not in KINDS:
        raise InvalidFile(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    if folder_kind and kind != folder_kind:
        raise InvalidFile(f"kind {kind!r} does not match its folder {folder}/ (expected {folder_kind!r})")
    raw_id = meta.get("id")
    derived = raw_id in (None, "")
    if derived:
        mem_id = ids.derived_id(relpath)
    elif not ids.is_id(str(raw_id)):
        raise InvalidFile(f"id {raw_id!r} is not a 26-character lowercase ULID")
    else:
        mem_id = str(raw_id)
    file_scope = meta.get("scope", scope)
    if scope.startswith(SHARED_PREFIX) and file_scope in ("repo", "shared", scope):
        file_scope = scope
    elif file_scope not in SCOPES:
        raise InvalidFile(f"scope {file_scope!r} is not repo or global")
    if file_scope != scope:
        raise InvalidFile(f"scope {file_scope!r} does not match the {scope} store it lies in")
    if not body.strip():
        raise InvalidFile("the memory has no text")
    _capped(body, "the memory's text")
    links = meta.get("links") or {}
    if not isinstance(links, dict):
        raise InvalidFile("links must be a mapping")
    for key, value in links.items():
        if key == "relations":
            _relations(value)
        elif isinstance(value, list):
            _str_list(value, f"links.{key}")
    confidence = meta.get("confidence")
    if confidence is not None and (isinstance(confidence, bool) or not isinstance(confidence, int | float)
                                   or not math.isfinite(confidence)):
        raise InvalidFile("confidence must be a number in [0, 1]")
    created = meta.get("created") or ""
    return Memory(
        id=mem_id,
        kind=str(kind),
        text=body.strip(),
        scope=str(file_scope),
        created=str(created),
        author=_capped(meta.get("author"), "author"),
        confidence=float(confidence) if confidence is not None else None,
        rationale=_capped(meta.get("rationale"), "rationale"),
        links=links,
        evidence=_str_list(meta.get("evidence"), "evidence"),
        tags=_str_list(meta.get("tags"), "tags"),
        path=relpath,
        id_derived=derived,
    )


def event_from_file(relpath: str, text: str, scope: str = "") -> Event:
    data = safe_yaml(text, "event file")
    if not isinstance(data, dict):
        raise InvalidFile("an event file must be a YAML mapping")
    ev_type = data.get("type")
    if ev_type not in EVENT_TYPES:
        raise InvalidFile(f"event type {ev_type!r} is not one of {', '.join(EVENT_TYPES)}")
    ev_id = str(data.get("id") or "")
    stem = Path(relpath).stem
    if not ids.is_id(ev_id):
        raise InvalidFile(f"event id {ev_id!r} is not a ULID")
    if stem != ev_id:
        raise InvalidFile(f"event id {ev_id} does not match its file name {stem}")
    vote = data.get("vote")
    if vote is not None and (isinstance(vote, bool) or not isinstance(vote, int | float) or not math.isfinite(vote)):
        raise InvalidFile("vote must be a number in [-1, 1]")
    archived = data.get("archived")
    if archived is not None and not isinstance(archived, bool):
        raise InvalidFile("archived must be true or false")
    relation = _opt_str(data.get("relation"))
    if ev_type == "link" and relation not in kinds.RELATION_TYPES:
        raise InvalidFile(f"a link event's relation {relation!r} is not one of {', '.join(kinds.RELATION_TYPES)}")
    conf = data.get("confidence")
    return Event(
        id=ev_id,
        type=str(ev_type),
        created=str(data.get("created") or ""),
        author=_capped(data.get("author"), "author"),
        memory=_opt_str(data.get("memory")),
        problem=_opt_str(data.get("problem")),
        vote=float(vote) if vote is not None else None,
        archived=archived,
        old_fact=_opt_str(data.get("old_fact")),
        change=_opt_str(data.get("change")),
        new_fact=_opt_str(data.get("new_fact")),
        confidence=float(conf) if isinstance(conf, int | float) and not isinstance(conf, bool)
        and math.isfinite(conf) else None,
        rationale=_capped(data.get("rationale"), "rationale"),
        evidence=_str_list(data.get("evidence"), "evidence"),
        episode=_opt_str(data.get("episode")),
        relation=relation,
        target=_opt_str(data.get("target")),
        path=relpath,
        scope=scope,
    )


def episode_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of an episode file, in order; lines that do not parse (or are over
    MAX_EPISODE_LINE) are skipped. A symlink or other non-regular file yields nothing: episodes
    come with clones too, and evidence refs must not read through them."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return
    with os.fdopen(fd, "rb") as fh:
        while line := fh.readline(MAX_EPISODE_LINE + 1):
            if len(line) > MAX_EPISODE_LINE and not line.endswith(b"\n"):
                while (rest := fh.readline(MAX_EPISODE_LINE)) and not rest.endswith(b"\n"):
                    pass
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                yield row


def _opt_str(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def episode_tail(path: Path) -> tuple[int, bool]:
    """(the last seq in an episode file, whether it has ended). Reads backwards from the end
    in growing chunks, so appending to a long episode costs no more than to a short one."""
    size = path.stat().st_size
    chunk = 64 * 1024
    with path.open("rb") as fh:
        while True:
            start = max(0, size - chunk)
            fh.seek(start)
            lines = fh.read().split(b"\n")
            if start > 0:
                lines = lines[1:]  # the first line may be cut
            for raw in reversed(lines):
                try:
                    row = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    if "ended" in row:
                        return _seq_before_end(path), True
                    if isinstance(row.get("seq"), int):
                        return row["seq"], False
                    if "episode" in row:
                        return 0, False
            if start == 0:
                return 0, False
            chunk *= 4


def _seq_before_end(path: Path) -> int:
    last = 0
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                if isinstance(row, dict) and isinstance(row.get("seq"), int):
                    last = row["seq"]
    return last


@dataclass
class Store:
    """One store directory. ``scope`` is 'repo', 'global' or 'shared:NAME'; ``worktree`` is the git work tree
    it lives in (None when it is not inside one)."""

    root: Path
    scope: str
    config: Config
    worktree: Path | None = None
    # The repo's .memory is a symlink: a clone may point it anywhere, so the store is not used.
    linked: bool = False
    # While batch_git() is active: files written but not yet recorded in git.
    _pending: list[Path] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def at(cls, root: Path, scope: str, config: Config, *, refuse_link: bool = False) -> Store:
        """The store at ``root``; with ``refuse_link``, a ``root`` that is a symlink is set aside
        (``linked``): it exists for no verb, and creating it is refused."""
        root = root.expanduser()
        if refuse_link and root.is_symlink():
            root = root.parent.resolve() / root.name
            return cls(root=root, scope=scope, config=config, worktree=gitops.toplevel(root.parent), linked=True)
        root = root.resolve()
        store = cls(root=root, scope=scope, config=config, worktree=gitops.toplevel(root))
        if scope == "global" and root.is_dir():
            # Before anything (a write lock, the catalog cache) creates .index/ with the umask's mode.
            with contextlib.suppress(OSError):
                private_dir(store.index_dir)
        return store

    # -- layout -----------------------------------------------------------------------------
    @property
    def index_dir(self) -> Path:
        # Never a link out of the store: see memstore.store.files.real_dir.
        return real_dir(self.root / INDEX_DIRNAME)

    @property
    def local_dir(self) -> Path:
        return self.root / LOCAL_DIRNAME

    def exists(self) -> bool:
        return not self.linked and self.root.is_dir()

    @property
    def read_only(self) -> bool:
        """A shared store: memstore reads it and never writes a memory or event into it."""
        return self.scope.startswith(SHARED_PREFIX)

    def refuse_write(self) -> None:
        if self.read_only:
            name = self.scope.removeprefix(SHARED_PREFIX)
            raise ReadOnlyStore(f"the shared store {name!r} is read-only here: what it holds changes through "
                                "its own repository, reviewed in a pull request", field="scope",
                                hint="write the memory in this repo's store (scope repo); to share it, "
                                f"open a pull request on the {name} repository")

    def refuse_link(self) -> None:
        if self.linked:
            raise InvalidFile(f"{self.root} is a symbolic link; memstore never follows a repo's {STORE_DIRNAME} "
                              "link (it could lead anywhere on this machine)", code="not_regular",
                              hint="make it a real folder, or pass --store to use the target on purpose")

    def require(self) -> None:
        self.refuse_link()
        if not self.exists():
            hint = "memstore init --global" if self.scope == "global" else "memstore init"
            raise NoStore(f"no {self.scope} store at {self.root}", hint=f"run `{hint}`")

    def init(self) -> list[str]:
        """Create the layout idempotently; returns what was created (relative names)."""
        self.refuse_link()
        created: list[str] = []
        if not self.root.exists():
            created.append(".")
        # The global store holds what a user keeps across every repo: theirs alone by default.
        self.root.mkdir(mode=0o700 if self.scope == "global" else 0o777, parents=True, exist_ok=True)
        if self.scope == "global":
            private_dir(self.index_dir)
        for sub in [*KIND_DIRS.values(), "events", "episodes"]:
            path = self.root / sub
            if not path.exists():
                path.mkdir()
                (path / ".gitkeep").touch()
                created.append(sub + "/")
        gitignore = self.root / ".gitignore"
        if not gitignore.exists():
            atomic_write(gitignore, GITIGNORE)
            created.append(".gitignore")
        config = self.root / "config.yaml"
        if not config.exists():
            atomic_write(config, GLOBAL_CONFIG if self.scope == "global" else DEFAULT_CONFIG)
            created.append("config.yaml")
        layout = [gitignore, config, *[self.root / d / ".gitkeep" for d in [*KIND_DIRS.values(), "events", "episodes"]]]
        if self.scope == "repo" and self.worktree is not None and created and self.config.get("git", "stage", True):
            gitops.stage(layout, self.worktree)
        if self.scope == "global" and (self.worktree is None or self.worktree != self.root):
            gitops.init(self.root)
            gitops.toplevel.cache_clear()
            self.worktree = self.root
            created.append(".git/")
            gitops.commit(layout, "memstore: initialise global store", self.root)
        return created

    def relpath(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def display_path(self, relpath: str) -> str:
        """A path as people see it: relative to the work tree when inside one."""
        full = self.root / relpath
        if self.worktree is not None:
            with contextlib.suppress(ValueError):
                return full.relative_to(self.worktree).as_posix()
        return str(full)

    # -- walking and parsing -------------------------------------------------------------------
    def memory_files(self) -> Iterator[tuple[str, os.stat_result]]:
        yield from _stats(self.memory_entries())

    def memory_entries(self) -> Iterator[tuple[str, Found]]:
        """``memory_files`` without an lstat of each file (``files.read_found`` reads them)."""
        for folder in KIND_DIRS.values():
            yield from self._walk(folder, ".md")

    def event_entries(self) -> Iterator[tuple[str, Found]]:
        yield from self._walk("events", ".yaml")

    def _walk(self, folder: str, suffix: str) -> Iterator[tuple[str, Found]]:
        """The store's files in ``folder`` as the folder lists them (``os.scandir``: the type
        each entry has, never followed): a symlink, FIFO or device is yielded as itself (loading
        it then reports it). A folder that is not a real directory (a link elsewhere, a loop) is
        yielded as one entry, by its lstat, and not entered."""
        base = self.root / folder
        try:
            st = os.lstat(base)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            yield folder, st
            return
        try:
            entries = os.scandir(base)
        except OSError:
            return
        with entries:
            for entry in entries:
                if entry.name.endswith(suffix) and not entry.name.startswith("."):
                    yield f"{folder}/{entry.name}", entry

    @property
    def max_file_bytes(self) -> int:
        return self.config.cap("max_file_bytes", MAX_FILE_BYTES)

    def read_file(self, relpath: str) -> str:
        """A store file's text, bounded and never through a link (``files.read_untrusted``)."""
        return read_untrusted(self.root / relpath, self.max_file_bytes)

    def load_memory(self, relpath: str) -> Memory:
        return memory_from_file(relpath, self.read_file(relpath), self.scope)

    def load_event(self, relpath: str) -> Event:
        return event_from_file(relpath, self.read_file(relpath), self.scope)

    def found_reader(self) -> Callable[[str, Found], tuple[os.stat_result, bytes | str]]:
        """``(relpath, found) -> (fstat, bytes)`` of walked files (``files.read_found``: the
        type judged from the folder's entry before the open, type and size from the fstat
        before the read), the cap and the root looked up once: a first load calls it for every
        file of the store."""
        root, cap = f"{self.root}/", self.max_file_bytes

        def read(relpath: str, found: Found) -> tuple[os.stat_result, bytes | str]:
            return read_found(found.path if isinstance(found, os.DirEntry) else root + relpath, found, cap)

        return read

    def memory_from_bytes(self, relpath: str, data: bytes | str) -> Memory:
        """``load_memory`` of what ``files.read_found`` returned."""
        text = data if isinstance(data, str) else walked_text(data, self.max_file_bytes)
        return memory_from_file(relpath, text, self.scope)

    def event_from_bytes(self, relpath: str, data: bytes | str) -> Event:
        text = data if isinstance(data, str) else walked_text(data, self.max_file_bytes)
        return event_from_file(relpath, text, self.scope)

    # -- episodes (read side; evidence refs point here) ---------------------------------------
    def episode_path(self, episode_id: str) -> Path | None:
        # The id becomes a glob pattern: anything but an id's own characters (``*``, ``[``, a
        # ``/`` or ``..`` from an evidence ref in a cloned file, or an agent's argument) would
        # match files it does not name, or reach outside the store.
        if not episode_id or not set(episode_id) <= _ID_CHARS:
            return None
        matches: list[Path] = []
        for base in (self.root / "episodes", self.local_dir / "episodes"):
            if base.is_dir() and not base.is_symlink():
                # A linked month folder would lead out of the store: not followed.
                matches += sorted(p for p in base.glob(f"*/{episode_id}*.jsonl") if not p.parent.is_symlink())
        return matches[0] if len(matches) == 1 else None

    def episode_seqs(self, episode_id: str) -> set[int] | None:
        """The event seq numbers an episode holds, or None if no such episode."""
        path = self.episode_path(episode_id)
        if path is None:
            return None
        return {row["seq"] for row in episode_rows(path) if isinstance(row.get("seq"), int)}

    # -- writing ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def write_lock(self, waiting: Callable[[], contextlib.AbstractContextManager[object]] | None = None
                   ) -> Iterator[None]:
        """Serialises writers across processes: id checks, duplicate checks and git staging
        must see each other's files. ``waiting`` is entered only for as long as another writer
        holds the lock (the daemon lets go of the stores it holds meanwhile: other requests,
        other repos' among them, need not wait on this one)."""
        self.refuse_write()
        if waiting is None:
            with file_lock(clear_way(self.index_dir / "write.lock")):
                yield
            return
        path = self.index_dir / "write.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        path = clear_way(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                with waiting():
                    fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def memory_path(self, mem: Memory) -> Path:
        return self.root / KIND_DIRS[mem.kind] / f"{mem.id}-{slugify(mem.text)}.md"

    def render_memory(self, mem: Memory) -> str:
        return dump_markdown(mem.frontmatter(), mem.text)

    def render_event(self, ev: Event) -> str:
        return dump_yaml(ev.to_dict())

    def _linked_folder(self, path: Path) -> Path | None:
        """The first folder between the store root and ``path`` that is a symlink (or anything
        but a directory), or None. A folder not there yet is created as a real directory."""
        if not path.is_relative_to(self.root):
            return None
        cur = self.root
        for part in path.parent.relative_to(self.root).parts:
            cur = cur / part
            try:
                st = os.lstat(cur)
            except FileNotFoundError:
                return None
            if not stat.S_ISDIR(st.st_mode):
                return cur
        return None

    def inside(self, path: Path) -> bool:
        """Whether ``path`` is reached without a link: for a read of memstore's own state
        (``.local/``), which a linked folder would take anywhere on this machine."""
        return self._linked_folder(path) is None

    def _writable(self, path: Path) -> Path:
        """``path`` if no folder between the store root and it is a symlink (or anything but a
        directory): a clone may bring ``facts -> /elsewhere`` (or ``.local``, ``episodes``, a
        month of episodes), and a write must not land there. Call it before any folder on the
        way is created: ``mkdir`` under a linked folder creates it at the link's target."""
        linked = self._linked_folder(path)
        if linked is not None:
            raise InvalidFile(f"{self.display_path(self.relpath(linked))} is not a real directory (a symlink?); "
                              "memstore never writes through links in a store", code="not_regular",
                              hint=f"remove {self.display_path(self.relpath(linked))} (memstore makes a real "
                              "folder there), then run the command again")
        return path

    def create_memory(self, mem: Memory) -> Path:
        path = self._writable(self.memory_path(mem))
        atomic_write(path, self.render_memory(mem), exclusive=True)
        mem.path = self.relpath(path)
        self._record_or_undo([path], f"memstore: add {mem.kind} {mem.id[:10]}")
        return path

    def record_memory_again(self, mem: Memory, path: Path) -> Path:
        """``path``, the file an interrupted attempt of the write of ``mem`` left (a retry under
        the id its caller fixed), recorded in git as ``create_memory`` records a new one."""
        mem.path = self.relpath(path)
        self._record_again(path, f"memstore: add {mem.kind} {mem.id[:10]}")
        return path

    def record_event_again(self, ev: Event, path: Path) -> Path:
        """``record_memory_again`` for an event."""
        ev.path = self.relpath(path)
        self._record_again(path, f"memstore: {ev.type} {(ev.memory or ev.new_fact or ev.id)[:10]}")
        return path

    def _record_again(self, path: Path, message: str) -> None:
        # The attempt may have died before git saw the file, after it staged it, or after its
        # commit: only what git does not have yet is recorded (a commit of nothing would fail).
        if self._pending is not None or (self.worktree is not None and gitops.changed([path], self.worktree)):
            self._record_or_undo([path], message)

    def create_event(self, ev: Event) -> Path:
        path = self._writable(self.root / "events" / f"{ev.id}.yaml")
        atomic_write(path, self.render_event(ev), exclusive=True)
        ev.path = self.relpath(path)
        self._record_or_undo([path], f"memstore: {ev.type} {(ev.memory or ev.new_fact or ev.id)[:10]}")
        return path

    # -- episodes (write side): header on create, one appended line per event ----------------
    def episodes_dir(self, *, local: bool) -> Path:
        """Where new episodes go: ``episodes/`` (committed) or ``.local/episodes/`` (gitignored)."""
        return (self.local_dir if local else self.root) / "episodes"

    def create_episode(self, header: dict[str, Any], *, local: bool) -> Path:
        """Write a new episode file holding only its header line (``episodes/<YYYY-MM>/<id>.jsonl``)."""
        path = self._writable(self.episodes_dir(local=local) / str(header["started"])[:7]
                              / f"{header['episode']}.jsonl")
        # Not staged yet: while the session runs the agent's own commits must not sweep up a
        # half-written log (and git hooks keep appending to it); `record_episode` at the end does.
        atomic_write(path, json.dumps(header, ensure_ascii=False) + "\n", exclusive=True)
        return path

    def append_episode(self, path: Path, make_row: Callable[[int], dict[str, Any]]) -> dict[str, Any]:
        """Append one row to an episode. ``make_row(seq)`` builds it from the next seq number.

        Concurrent loggers (an agent, a git hook) take an exclusive flock on the file itself, so
        the seq is read and assigned under the lock; the row goes out in one O_APPEND write, so a
        reader never sees two rows interleaved. A closed episode refuses further rows."""
        fd = os.open(self._writable(path), os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            last_seq, ended = episode_tail(path)
            if ended:
                raise Conflict(f"episode {path.stem} has ended; start a new one", code="episode_ended",
                               hint="memstore episode start")
            row = make_row(last_seq + 1)
            data = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)  # releases the flock
        return row

    def record_episode(self, path: Path, message: str) -> None:
        """A closed committed-episode file goes to git like any other write (staged, or committed
        in autonomous mode / the global store)."""
        if not path.is_relative_to(self.local_dir):
            self._record_in_git([path], message)

    @contextlib.contextmanager
    def batch_git(self, message: str = "memstore: add memories") -> Iterator[None]:
        """Record every file written inside the block in git with one call at the end (one
        ``git add`` is ~30 ms; a bulk import would otherwise pay it per file). Files written
        before an error are still recorded; when recording them fails (a full disk) they are
        removed, as a single write's file is: none was acknowledged."""
        if self._pending is not None:  # nested: the outer block records
            yield
            return
        self._pending = []
        try:
            yield
        finally:
            pending, self._pending = self._pending, None
            if pending:
                self._record_or_undo(pending, message)

    def _record_or_undo(self, paths: list[Path], message: str) -> None:
        """Record new files in git, or leave no trace of them: a write whose staging failed is
        not acknowledged, so a file left behind would be served by every read and written again
        by the agent's retry (a duplicate), and a half-staged one would reach the next commit."""
        try:
            self._record_in_git(paths, message)
        except BaseException as exc:
            unstaged = True
            if self.worktree is not None and self._pending is None:
                # Staged before the commit failed (autonomous mode): out of git's index again.
                # Removing a path needs no new object, so this fits where the add did not.
                unstaged = gitops.unstage(paths, self.worktree)
            if unstaged:  # else the file stays beside its index entry: a staged file with no file is worse
                for path in paths:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
            full = git_disk_full(exc, self.worktree)
            if full is not None:
                raise full from exc
            raise

    def _record_in_git(self, paths: list[Path], message: str) -> None:
        if self._pending is not None:
            self._pending.extend(paths)
            return
        if self.worktree is None:
            return
        # Write modes (SPEC §7): in `review` a person approves repo memories in the PR, so they
        # are only staged even with git.commit; `autonomous` may commit each write.
        autonomous_commit = self.config.write_mode == "autonomous" and self.config.get("git", "commit", False)
        if self.scope == "global" or autonomous_commit:
            gitops.commit(paths, message, self.worktree)
        elif self.config.get("git", "stage", True):
            gitops.stage(paths, self.worktree)


# What git says when the device (or the user's quota) is full: its own words for ENOSPC, and
# the C library's, which it quotes.
_GIT_FULL = ("no space left", "out of diskspace", "disk quota exceeded", "file too large")
_ROOM = 1024 * 1024  # a device with less free than this counts as full when git fails on it


def git_disk_full(exc: BaseException, worktree: Path | None) -> DiskFull | None:
    """A failed git call that failed for want of room: the ``disk_full`` error that says so,
    not ``git`` (the user's to fix by freeing space, and safe to retry then); None otherwise."""
    if not isinstance(exc, GitError):
        return None
    said = exc.message.lower()
    full = any(words in said for words in _GIT_FULL)
    if not full and worktree is not None:
        with contextlib.suppress(OSError, GitError):
            st = os.statvfs(gitops.git_dir(worktree))
            full = st.f_bavail * st.f_frsize < _ROOM
    if not full:
        return None
    return DiskFull(f"no space left on the device for git to record the write ({exc.message}); it was not written",
                    hint="free some space and run the command again")


def _stats(found: Iterator[tuple[str, Found]]) -> Iterator[tuple[str, os.stat_result]]:
    """Each walked file with its lstat (a file gone since the walk is left out)."""
    for rel, entry in found:
        st = found_stat(entry)
        if st is not None:
            yield rel, st
