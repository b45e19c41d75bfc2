"""What a commit would hold under a store: its staged blobs, parsed like the files on disk.

The pre-commit hook checks these, not the work tree (SPEC §10): a commit holds what was staged,
so that is what must be valid and free of secrets, whatever the work tree holds meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import gitops
from ..errors import InvalidFile
from ..store.disk import Store, event_from_file, memory_from_file
from ..store.model import DIR_KINDS, Event, Memory

SYMLINK_MODE = "120000"


@dataclass
class StagedStore:
    memories: dict[str, Memory] = field(default_factory=dict)  # id -> memory
    events: dict[str, Event] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)  # store-relative path -> reason
    codes: dict[str, str] = field(default_factory=dict)  # path -> the code of its entry in ``invalid``
    over_cap: int = 0  # the staged set is git's to bound; kept for the catalog's shape
    max_files: int = 0
    blobs: dict[str, bytes] = field(default_factory=dict)  # store-relative path -> staged content


def _record_kind(rel: str) -> str | None:
    """'memory', 'event' or None, by the same layout rule the catalog walks."""
    top, _, name = rel.partition("/")
    if "/" in name:
        return None
    if top in DIR_KINDS and name.endswith(".md"):
        return "memory"
    if top == "events" and name.endswith(".yaml"):
        return "event"
    return None


def store_prefix(store: Store) -> str:
    """The store's folder relative to its work tree: ``.memory``, or ``.`` for a store that is
    its repository's root (a shared store's own repository, ``--store .``)."""
    assert store.worktree is not None
    return store.root.relative_to(store.worktree.resolve()).as_posix()


def in_store(path: str, prefix: str) -> str | None:
    """A repo-relative ``path`` relative to the store at ``prefix``; None when outside it."""
    if prefix == ".":
        return path
    return path[len(prefix) + 1:] if path.startswith(prefix + "/") else None


def repo_path(prefix: str, rel: str) -> str:
    """A store-relative ``rel`` relative to the work tree again."""
    return rel if prefix == "." else f"{prefix}/{rel}"


def read_staged(store: Store, prefix: str) -> StagedStore:
    """Every staged file under ``prefix`` (the store's repo-relative folder), memories and
    events parsed; anything that does not parse is ``invalid`` with its reason."""
    assert store.worktree is not None
    entries = gitops.staged_entries(prefix, store.worktree)
    blobs = gitops.read_blobs([sha for _, sha, _ in entries], store.worktree)
    out = StagedStore()
    claims: dict[str, list[Memory]] = {}
    for mode, sha, path in entries:
        rel = in_store(path, prefix)
        if rel is None:
            continue
        data = blobs.get(sha, b"")
        out.blobs[rel] = data
        what = _record_kind(rel)
        if what is None:
            continue
        if mode == SYMLINK_MODE:
            out.invalid[rel], out.codes[rel] = "a symlink is staged here, not a file", "not_regular"
            continue
        if len(data) > store.max_file_bytes:
            out.invalid[rel] = f"{len(data)} bytes, over the cap of {store.max_file_bytes} (limits.max_file_bytes)"
            out.codes[rel] = "too_large"
            continue
        try:
            text = data.decode("utf-8")
            if what == "memory":
                mem = memory_from_file(rel, text, store.scope)
                claims.setdefault(mem.id, []).append(mem)
            else:
                ev = event_from_file(rel, text, store.scope)
                out.events[ev.id] = ev
        except UnicodeDecodeError:
            out.invalid[rel], out.codes[rel] = "not UTF-8 text", "invalid_file"
        except InvalidFile as exc:
            out.invalid[rel], out.codes[rel] = exc.message, exc.code
    for mid, mems in claims.items():
        if len(mems) == 1:
            out.memories[mid] = mems[0]
            continue
        # As in the catalog: neither claimant of an id is taken for the genuine one.
        for mem in mems:
            others = ", ".join(m.path for m in mems if m is not mem)
            out.invalid[mem.path] = f"duplicate id {mid}: also claimed by {others}; neither file is served"
            out.codes[mem.path] = "id_conflict"
    return out
