"""``memstore diff [REV]``: what a branch adds to ``.memory/`` since REV, for people reviewing a PR.

Memories and update events are rendered readably (kind, text, links, evidence); episodes are
summarised. The comparison is the merge-base with REV (default: the default branch) against
the work tree, so memories an agent just wrote and staged (review mode) show up before they
are committed; each entry says whether it is committed yet.
"""

from __future__ import annotations

from typing import Any

from .. import gitops
from ..errors import InvalidFile, NotFound, StoreError
from ..store.disk import Store
from ..store.graph import Graph, build_graph, needs_review
from ..store.model import DIR_KINDS
from ..store.workspace import Workspace
from .check import _store_prefix
from .staged import in_store

BASE_CANDIDATES = ("origin/HEAD", "main", "master", "origin/main", "origin/master")


def default_base(store: Store) -> str:
    assert store.worktree is not None
    for rev in BASE_CANDIDATES:
        if gitops.resolve_commit(rev, store.worktree):
            return rev
    raise StoreError("cannot tell the default branch (no origin/HEAD, main or master)",
                     hint="name the base: `memstore diff REV`")


def _lines(data: bytes | None) -> int:
    return len([ln for ln in (data or b"").splitlines() if ln.strip()])


def branch_diff(ws: Workspace, rev: str | None = None) -> dict[str, Any]:
    """The memories, events and episodes added (or touched) since the merge-base with ``rev``."""
    store = ws.store("repo")
    store.require()
    if store.worktree is None or not gitops.has_head(store.worktree):
        raise StoreError("the repo has no commits yet, so there is nothing to compare with")
    wt = store.worktree
    base = rev or default_base(store)
    sha = gitops.resolve_commit(base, wt)
    if sha is None:
        raise NotFound(f"{base!r} does not resolve to a commit", field="rev", code="unknown_rev",
                       hint="fetch it first (CI: fetch-depth: 0)")
    mb = gitops.merge_base(sha, "HEAD", wt) or sha
    prefix = _store_prefix(store)
    committed = gitops.name_status(mb, "HEAD", [prefix], wt)
    changes = gitops.name_status(mb, None, [prefix], wt)
    for path in gitops.untracked([prefix], wt):
        changes.setdefault(path, "A")
    for path, st in committed.items():
        changes.setdefault(path, st)  # committed, then removed from the work tree again

    cat = ws.catalog("repo")
    known = {**(ws.catalog("global").memories if "global" in ws.scopes() else {}), **cat.memories}
    graph: list[Graph] = []

    def votes() -> Graph:  # built once, and only when a low-confidence memory asks
        if not graph:
            events = [ev for scope in ws.scopes() for ev in ws.catalog(scope).events.values()]
            graph.append(build_graph(known, events))
        return graph[0]

    answer: dict[str, Any] = {"ok": True, "base": base, "merge_base": mb, "memories": [], "events": [],
                              "episodes": [], "problems": []}
    for path in sorted(changes):
        st = changes[path]
        rel = in_store(path, prefix) or ""
        top = rel.split("/", 1)[0]
        if rel.endswith(".gitkeep") or "/" not in rel:
            continue
        entry: dict[str, Any] = {"path": path, "status": st, "committed": path in committed}
        if top in DIR_KINDS or top == "events":
            if st != "A":
                answer["problems"].append({**entry, "message": "a committed memory file was "
                                           + ("deleted" if st == "D" else "modified") + " (they are immutable)"})
                continue
            try:
                if top == "events":
                    ev = store.load_event(rel)
                    data = ev.to_dict()
                    target = cat.memories.get(ev.memory or ev.new_fact or "")
                    if target is not None:
                        data["target_text"] = target.text
                    if ev.type == "link":
                        data["link"] = _link(ev.relation or "", ev.target or "", known)
                    answer["events"].append({**entry, **data})
                else:
                    mem = store.load_memory(rel)
                    answer["memories"].append({**entry, **mem.to_json(), "path": path,
                                               "id_is_provisional": mem.id_derived,
                                               "relations": [_link(k, t, known) for k, t in mem.relations()],
                                               "review": needs_review(mem, ws.config, votes())})
            except (InvalidFile, OSError) as exc:
                answer["problems"].append({**entry, "message": f"invalid: {getattr(exc, 'message', exc)}"})
        elif top == "episodes" and rel.endswith(".jsonl"):
            from ..store.episodes import read_rows

            full = store.root / rel
            if not full.exists():
                answer["problems"].append({**entry, "message": "a committed episode was deleted"})
                continue
            header, events, ended = read_rows(full)
            before = _lines(gitops.show_file(mb, path, wt)) if st != "A" else 0
            answer["episodes"].append({**entry, "episode": full.stem, "agent": header.get("agent"),
                                       "task": header.get("task"), "events": len(events),
                                       "new_rows": _lines(full.read_bytes()) - before,
                                       "outcome": ended.get("outcome") if ended else None})
    answer["summary"] = {"memories": len(answer["memories"]), "events": len(answer["events"]),
                         "episodes": len(answer["episodes"]), "problems": len(answer["problems"]),
                         "to_review": sum(1 for m in answer["memories"] if m["review"])}
    return answer


def _link(kind: str, target: str, known: dict[str, Any]) -> dict[str, Any]:
    """A typed link with the text it points at, so a reviewer sees what is claimed about what."""
    other = known.get(target)
    return {"type": kind, "id": target, "text": other.text if other is not None else None}


