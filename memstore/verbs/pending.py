"""Global memories waiting for the user's approval (``write_mode: review``).

A global memory reaches every repo of its user, so in review mode a global write is proposed,
not committed: the memory file is written, complete, to ``~/.memory/.local/pending/`` (never
committed, never read by ``read``), and ``memstore approve ID`` moves it into the store and
commits it; ``memstore drop ID`` discards it. ``memstore pending`` and ``reflect`` list what
waits. The file is written before the write answers and removed only after the approved copy
is in place, so a proposal is never lost: an approval interrupted between the two finds the
memory already stored and only removes the proposal.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from ..errors import InvalidFile, InvalidRequest, NotFound
from ..store import ids
from ..store.disk import Store, memory_from_file, slugify
from ..store.files import atomic_write, private_dir, read_untrusted
from ..store.model import Memory
from ..store.workspace import Workspace

PENDING_DIRNAME = "pending"


def _folder(store: Store) -> Path:
    return store.local_dir / PENDING_DIRNAME


def propose(store: Store, mem: Memory) -> str:
    """Write ``mem`` as a proposal in ``store``; returns its path as people see it."""
    folder = _folder(store)
    for d in (store.local_dir, folder):
        private_dir(d)  # the global store is its owner's alone
    path = store._writable(folder / f"{mem.id}-{slugify(mem.text)}.md")
    atomic_write(path, store.render_memory(mem), exclusive=True)
    return str(path)


def _proposals(store: Store) -> list[tuple[Path, Memory | None, str | None]]:
    """(file, memory or None, why it could not be read) for each proposal, oldest first."""
    folder = _folder(store)
    if not store.exists() or not folder.is_dir() or folder.is_symlink():
        return []
    out: list[tuple[Path, Memory | None, str | None]] = []
    for path in sorted(folder.glob("*.md")):
        rel = path.relative_to(store.root).as_posix()
        try:
            out.append((path, memory_from_file(rel, read_untrusted(path, store.max_file_bytes), store.scope), None))
        except (InvalidFile, OSError) as exc:
            out.append((path, None, getattr(exc, "message", str(exc))))
    return out


def _entry(path: Path, mem: Memory) -> dict[str, Any]:
    return {"id": mem.id, "kind": mem.kind, "scope": mem.scope, "text": mem.text, "created": mem.created,
            "confidence": mem.confidence, "author": mem.author, "path": str(path)}


def list_pending(ws: Workspace) -> dict[str, Any]:
    """The proposals waiting in the global store, oldest first (unreadable files named apart)."""
    items = _proposals(ws.global_)
    return {"ok": True, "pending": [_entry(p, m) for p, m, _ in items if m is not None],
            "unreadable": [{"path": str(p), "message": why} for p, m, why in items if m is None],
            "next": "memstore approve ID commits one to the global store; memstore drop ID discards it"}


def _find(ws: Workspace, prefix: str) -> tuple[Path, Memory]:
    if not isinstance(prefix, str) or len(prefix.strip()) < ids.MIN_PREFIX:
        raise InvalidRequest(f"id {prefix!r} is too short: give at least {ids.MIN_PREFIX} characters",
                             field="id", code="bad_id")
    norm = ids.normalize_prefix(prefix)
    hits = [(p, m) for p, m, _ in _proposals(ws.global_) if m is not None and m.id.startswith(norm)]
    if not hits:
        raise NotFound(f"no pending memory {prefix!r}", field="id", hint="memstore pending lists them")
    if len(hits) > 1:
        raise InvalidRequest(f"{prefix!r} names {len(hits)} pending memories; give more characters",
                             field="id", code="ambiguous_id")
    return hits[0]


def approve(ws: Workspace, prefix: str) -> dict[str, Any]:
    """Commit a proposal to the global store, then remove it from the pending folder."""
    store = ws.global_
    with store.write_lock():
        # found under the lock: a drop of the same proposal either ran before (not found) or
        # runs after (and finds it gone), never both answer yes
        path, mem = _find(ws, prefix)
        if mem.id in ws.catalog("global").memories:  # approved before, interrupted before the cleanup
            stored = ws.catalog("global").memories[mem.id].path
        else:
            created = store.create_memory(mem)
            ws.wrote(store, created)
            stored = store.relpath(created)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return {"ok": True, "id": mem.id, "kind": mem.kind, "scope": mem.scope, "approved": True,
            "path": store.display_path(stored)}


def drop(ws: Workspace, prefix: str) -> dict[str, Any]:
    """Discard a proposal: nothing reaches the global store."""
    with ws.global_.write_lock():
        path, mem = _find(ws, prefix)  # under the lock, as approve finds it
        try:
            path.unlink()
        except FileNotFoundError:
            raise NotFound(f"no pending memory {prefix!r}", field="id", hint="memstore pending lists them") from None
    return {"ok": True, "id": mem.id, "kind": mem.kind, "dropped": True, "text": mem.text}
