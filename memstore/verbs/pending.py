"""Global memories waiting for the user's approval (``write_mode: review``).

A global memory reaches every repo of its user, so in review mode a global write is proposed,
not committed: the memory file is written, complete, to ``~/.memory/.local/pending/`` (never
committed, never read by ``read``), and ``memstore approve ID`` moves it into the store and
commits it; ``memstore drop ID`` discards it. ``memstore pending`` and ``reflect`` list what
waits. The file is written before the write answers and removed only after the approved copy
is in place, so a proposal is never lost: an approval interrupted between the two finds the
memory already stored and only removes the proposal.

A proposal is a file on disk: between the write and the approval it may be edited by hand (or
by anything running as the user), so ``approve`` reads it as hostile input and runs the write's
gates on it again before anything is committed (``_gated``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import InvalidFile, InvalidRequest, MemstoreError, NotFound
from ..store import ids
from ..store.disk import Store, memory_from_file, slugify
from ..store.files import atomic_write, private_dir, read_untrusted
from ..store.model import Memory
from ..store.validate import check_file_text, check_schema, check_write_semantics, resolve_write_links
from ..store.workspace import Workspace

PENDING_DIRNAME = "pending"


def _folder(store: Store) -> Path:
    return store.local_dir / PENDING_DIRNAME


def propose(store: Store, mem: Memory) -> str:
    """Write ``mem`` as a proposal in ``store``; returns its path as people see it."""
    folder = _folder(store)
    # Checked before a folder is made: under a pulled `.local -> elsewhere`, pending/ would be
    # created at the link's target.
    path = store._writable(folder / f"{mem.id}-{slugify(mem.text)}.md")
    for d in (store.local_dir, folder):
        private_dir(d)  # the global store is its owner's alone
    atomic_write(path, store.render_memory(mem), exclusive=True)
    return str(path)


class _Proposal(NamedTuple):
    path: Path
    memory: Memory | None  # None: the file could not be read as a memory
    text: str  # the file's whole text, as approve would commit it
    error: MemstoreError | None  # why it could not be read


def _proposals(store: Store) -> list[_Proposal]:
    """Each proposal, oldest first: read, or with the reason it could not be."""
    folder = _folder(store)
    # Nothing is read through a linked `.local` or `pending/` (a pull can bring either).
    if not store.exists() or not store.inside(folder / "proposal.md") or not folder.is_dir():
        return []
    out: list[_Proposal] = []
    for path in sorted(folder.glob("*.md")):
        rel = path.relative_to(store.root).as_posix()
        text = ""
        try:
            text = read_untrusted(path, store.max_file_bytes)
            out.append(_Proposal(path, memory_from_file(rel, text, store.scope), text, None))
        except InvalidFile as exc:
            out.append(_Proposal(path, None, text, exc))
        except OSError as exc:
            out.append(_Proposal(path, None, text, InvalidFile(f"cannot read: {exc.strerror}", code="unreadable")))
    return out


def _entry(path: Path, mem: Memory) -> dict[str, Any]:
    return {"id": mem.id, "kind": mem.kind, "scope": mem.scope, "text": mem.text, "created": mem.created,
            "confidence": mem.confidence, "author": mem.author, "path": str(path)}


def list_pending(ws: Workspace) -> dict[str, Any]:
    """The proposals waiting in the global store, oldest first (unreadable files named apart)."""
    items = _proposals(ws.global_)
    return {"ok": True, "pending": [_entry(p.path, p.memory) for p in items if p.memory is not None],
            "unreadable": [{"path": str(p.path), "message": p.error.message} for p in items if p.error is not None],
            "next": "memstore approve ID commits one to the global store; memstore drop ID discards it"}


def _find(ws: Workspace, prefix: str, *, broken: bool = False) -> _Proposal:
    """The one proposal ``prefix`` names; an unreadable one only when ``broken`` (drop removes
    it, approve says why it cannot commit it)."""
    if not isinstance(prefix, str) or len(prefix.strip()) < ids.MIN_PREFIX:
        raise InvalidRequest(f"id {prefix!r} is too short: give at least {ids.MIN_PREFIX} characters",
                             field="id", code="bad_id")
    norm = ids.normalize_prefix(prefix)
    found = _proposals(ws.global_)
    hits = [p for p in found if p.memory is not None and p.memory.id.startswith(norm)]
    if not hits:
        # A proposal named by its id but unreadable (a link, a FIFO, too large, broken YAML) is
        # refused with the reason, not reported as missing.
        unread = [p for p in found if p.memory is None and p.path.name.startswith(norm)]
        if len(unread) == 1 and broken:
            return unread[0]
        if len(unread) == 1 and unread[0].error is not None:
            exc = unread[0].error
            raise InvalidFile(f"pending memory {unread[0].path.name} {exc.message}", code=exc.code,
                              hint="fix the file, or discard it with memstore drop")
        raise NotFound(f"no pending memory {prefix!r}", field="id", hint="memstore pending lists them")
    if len(hits) > 1:
        raise InvalidRequest(f"{prefix!r} names {len(hits)} pending memories; give more characters",
                             field="id", code="ambiguous_id")
    return hits[0]


def _request(mem: Memory) -> dict[str, Any]:
    """The write request that stores ``mem`` as its proposal file now says it: a key no write
    makes is kept, so the schema refuses it."""
    links = dict(mem.links)
    if "problem" in links:  # stored as the resolved id under the name a request does not use
        links["problem_id"] = links.pop("problem")
    memory: dict[str, Any] = {"kind": mem.kind, "scope": mem.scope, "text": mem.text, "evidence_refs": mem.evidence}
    optional = {"author": mem.author, "rationale": mem.rationale, "tags": mem.tags, "links": links,
                "confidence": mem.confidence}
    memory.update({k: v for k, v in optional.items() if v not in (None, "", [], {})})
    return {"op": "write", "memory": memory}


def _gated(ws: Workspace, proposal: _Proposal) -> Memory:
    """The proposal as a new write would store it, or the typed error a new write would give.

    The gates a write runs (schema, kind rules and limits, control characters, secrets, links)
    run again on the file as it is now, and secrets and control characters are looked for in
    its whole text (YAML comments and keys memstore does not read included). Only the existence
    of what the evidence cites is not checked again: it was, in the repository the memory was
    written from, and approve may run anywhere."""
    mem = proposal.memory
    assert mem is not None
    check_file_text(proposal.text, f"pending memory {proposal.path.name}")
    request = _request(mem)
    check_schema("write", request)
    check_write_semantics(request["memory"], ws.config)
    links = resolve_write_links(ws, request["memory"])
    return Memory(id=mem.id, kind=mem.kind, text=mem.text, scope=mem.scope, created=mem.created,
                  author=mem.author, confidence=mem.confidence, rationale=mem.rationale, links=links,
                  evidence=mem.evidence, tags=list(dict.fromkeys(mem.tags)))


def approve(ws: Workspace, prefix: str) -> dict[str, Any]:
    """Commit a proposal to the global store, then remove it from the pending folder."""
    store = ws.global_
    with store.write_lock():
        # found under the lock: a drop of the same proposal either ran before (not found) or
        # runs after (and finds it gone), never both answer yes
        proposal = _find(ws, prefix)
        path = proposal.path
        mem = _gated(ws, proposal)  # refused: the proposal stays, nothing is committed
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
        proposal = _find(ws, prefix, broken=True)  # under the lock, as approve finds it
        try:
            proposal.path.unlink()  # a link itself, never its target
        except FileNotFoundError:
            raise NotFound(f"no pending memory {prefix!r}", field="id", hint="memstore pending lists them") from None
    mem = proposal.memory
    if mem is None:
        return {"ok": True, "id": proposal.path.name.split("-", 1)[0], "dropped": True, "path": str(proposal.path)}
    return {"ok": True, "id": mem.id, "kind": mem.kind, "dropped": True, "text": mem.text}
