"""``memstore history ID``: where one memory came from and what happened to it since.

A memory file never changes once committed, so its story is in two places: git, for the commit
that added the file (``git log --diff-filter=A``: no ``--follow`` needed, the path never moves),
and the store's events and other memories, for what came after (votes, typed links, the
facts and changes that superseded it, its archival). Both are read as they are; nothing is
written.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .. import gitops
from ..errors import MemstoreError
from ..store.graph import build_graph
from ..store.model import Event, Memory
from ..store.relations import relation_lists
from ..store.trust import CONTENT_TRUST
from ..store.workspace import Workspace
from .api import history as store_history


def _added_in(ws: Workspace, mem: Memory) -> dict[str, str] | None:
    """The commit that added the memory's file: sha, author, date, subject; None when it is not
    committed yet (or git cannot say)."""
    store = ws.store(mem.scope)
    if store.worktree is None or not mem.path:
        return None
    shown = store.display_path(mem.path)
    with contextlib.suppress(MemstoreError, OSError):
        proc = gitops.run(["log", "--diff-filter=A", "--no-renames", "-1", "--format=%H%x1f%an%x1f%aI%x1f%s",
                           "--", shown], store.worktree, check=False)
        parts = proc.stdout.strip().split("\x1f")
        if proc.returncode == 0 and len(parts) == 4:
            return {"sha": parts[0], "author": parts[1], "date": parts[2], "subject": parts[3]}
    return None


def _episodes(ws: Workspace, mem: Memory) -> list[str]:
    """The episodes the memory was written in: those its ``event:`` evidence cites, else the one
    whose agent wrote it while it was open (as ``reflect`` counts a session's writes)."""
    cited = [ref.split(":")[1] for ref in mem.evidence if ref.startswith("event:") and ref.count(":") >= 2]
    if cited:
        return list(dict.fromkeys(cited))
    from ..store.episodes import list_episodes

    with contextlib.suppress(MemstoreError, OSError):
        for ep in list_episodes(ws)["episodes"]:
            agent, started = ep.get("agent"), str(ep.get("started") or "")
            until = str(ep.get("ended") or "~")  # "~" sorts after any timestamp
            if agent and agent not in ("unknown", "git") and agent == mem.author and started <= mem.created <= until:
                return [ep["episode"]]
    return []


def _event(ev: Event, **extra: Any) -> dict[str, Any]:
    out = {"event": ev.id, "at": ev.created, "by": ev.author, **extra}
    if ev.rationale:
        out["why"] = ev.rationale
    out["evidence"] = list(ev.evidence)
    return out


def memory_history(ws: Workspace, memory_id: str) -> dict[str, Any]:
    """One memory's history as data: its creation (who, when, episode, commit), links, votes,
    supersession and change chain, archival, and all of it as one timeline, oldest first."""
    mem = ws.find(memory_id, field_name="id")
    memories, events = store_history(ws)
    graph = build_graph(memories, events)
    mid = mem.id
    commit = _added_in(ws, mem)
    episodes = _episodes(ws, mem)
    created = {"by": mem.author, "at": mem.created, "episodes": episodes, "commit": commit}
    timeline: list[dict[str, Any]] = [{"at": mem.created, "what": "created", "by": mem.author,
                                       **({"episode": episodes[0]} if episodes else {}),
                                       **({"commit": commit["sha"][:12]} if commit else {})}]
    votes, archival, link_events, fact_links = [], [], [], []
    for ev in sorted(events, key=lambda e: (e.created, e.id)):
        if ev.type == "utility_vote" and ev.memory == mid:
            votes.append(_event(ev, vote=ev.vote, problem=ev.problem))
            timeline.append({"what": "vote", **votes[-1]})
        elif ev.type == "archive" and ev.memory == mid:
            archival.append(_event(ev, archived=bool(ev.archived)))
            timeline.append({"what": "archived" if ev.archived else "unarchived", **archival[-1]})
        elif ev.type == "link" and mid in (ev.memory, ev.target):
            link_events.append(_event(ev, relation=ev.relation, source=ev.memory, target=ev.target))
            timeline.append({"what": "link", **link_events[-1]})
        elif ev.type == "fact_update_link" and mid in (ev.old_fact, ev.new_fact, ev.change):
            fact_links.append(_event(ev, old_fact=ev.old_fact, change=ev.change, new_fact=ev.new_fact))
            timeline.append({"what": "fact_update_link", **fact_links[-1]})
    # What other memories did to this one: solutions and failed tactics of a problem, changes
    # that target it, facts that supersede it (their own creation is their event).
    for other in sorted(memories.values(), key=lambda m: (m.created, m.id)):
        if other.id == mid:
            continue
        how = None
        if other.problem == mid:
            how = f"{other.kind} written for it"
        elif mid in other.link_list("change_targets"):
            how = "change written about it"
        elif mid in other.link_list("supersedes"):
            how = "superseded by a newer fact"
        if how:
            timeline.append({"at": other.created, "what": how, "by": other.author, "memory": other.id,
                             "kind": other.kind})
    chain_back: list[str] = []  # older facts this one replaced, nearest first
    older = [o for o, n in graph.superseded_by.items() if n == mid]
    while older:
        chain_back += older
        older = [o for o, n in graph.superseded_by.items() if n in older and o not in chain_back]
    chain_forward: list[str] = []
    cur = mid
    while cur in graph.superseded_by and graph.superseded_by[cur] not in [*chain_forward, mid]:
        cur = graph.superseded_by[cur]
        chain_forward.append(cur)
    store = ws.store(mem.scope)
    attempts = graph.attempts.get(mid, [])
    last_archive = archival[-1] if archival else None
    return {
        "ok": True, "content_trust": CONTENT_TRUST,
        "memory": {"id": mid, "kind": mem.kind, "scope": mem.scope, "text": mem.text,
                   "path": store.display_path(mem.path), "confidence": mem.confidence,
                   "rationale": mem.rationale, "evidence": list(mem.evidence), "tags": list(mem.tags)},
        "created": created,
        "links": dict(mem.links),
        "relations": relation_lists(mid, graph, memories, active_only=False),
        "solutions": [a for a in attempts if memories[a].kind == "solution"],
        "failed_tactics": [a for a in attempts if memories[a].kind == "failed_tactic"],
        "changes": list(graph.changes_for.get(mid, [])),
        "supersession": {"supersedes": chain_back, "superseded_by": graph.superseded_by.get(mid),
                         "chain": chain_forward, "head": chain_forward[-1] if chain_forward else None},
        "votes": votes,
        "utility": {"global": round(graph.utility_global(mid), 4), "votes": graph.vote_count(mid)},
        "link_events": link_events,
        "fact_links": fact_links,
        "archived": ({**last_archive} if last_archive and last_archive["archived"] else None),
        "archival": archival,
        "timeline": sorted(timeline, key=lambda t: str(t.get("at") or "")),
    }
