"""Step 5 of a read (SPEC §4): what the scope's links add to the memories the lanes found.

Each function works on the hits of one read and the ``Scope``'s link graph, never on the
workspace: a superseded fact folds into its chain's head (SPEC §10), the association chain
follows typed links, problems pull their attempts and changes their targets, a dispute is shown
whole, and an elaboration joins its target's group so selection keeps them together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..store import relations
from ..store.graph import Graph
from ..store.model import ATTACHING, Memory
from . import ranking
from .scope import Scope
from .tuning import UtilityParams


@dataclass
class Hit:
    """A memory on its way into the answer: its score, why it is there, its group."""

    mem: Memory
    score: float
    reasons: list[str]
    group: str  # results in one linked group are kept together


def expand_links(hits: dict[str, Hit], sc: Scope, ok: set[str], up: UtilityParams, *,
                 problem_links: bool, update_links: bool) -> None:
    """Step 5 (mandatory, deterministic): problems pull their attempts, attempts their problem,
    memories the changes that target them, and each side of a dispute the other (a contradiction
    shown half is a silent hypothesis). (Superseded facts were folded into their heads.)"""
    g, mems = sc.graph, sc.memories
    queue = list(hits.values())
    while queue:
        hit = queue.pop(0)
        mem = hit.mem
        pulled: list[tuple[str, str]] = []
        if problem_links:
            if mem.kind == "problem":
                for att in g.attempts.get(mem.id, []):
                    pulled.append((att, f"link:{mems[att].kind}_of:{mem.id}"))
            elif mem.kind in ("solution", "failed_tactic") and mem.problem:
                pulled.append((mem.problem, f"link:problem_of:{mem.id}"))
        if update_links:
            for ch in g.changes_for.get(mem.id, []):
                pulled.append((ch, f"link:change_of:{mem.id}"))
        for other in relations.contradicting(mem.id, g):
            pulled.append((other, f"link:contradicts:{mem.id}"))
        for target, why in pulled:
            if target not in ok or target not in mems:
                continue
            score = hit.score * up.link_factor
            existing = hits.get(target)
            if existing is None:
                new = Hit(mems[target], score, [why], hit.group)
                hits[target] = new
                queue.append(new)
            else:
                if why not in existing.reasons:
                    existing.reasons.append(why)
                existing.score = max(existing.score, score)
                existing.group = min(existing.group, hit.group)


def follow_relations(hits: dict[str, Hit], sc: Scope, ok: set[str], rp: ranking.RankingParams,
                     hops: int) -> None:
    """The association chain over explicit links: from the best ``rp.hop_seeds`` hits, the
    memories their typed links name (relates_to, depends_on, elaborates_on, whichever end
    recorded the link; contradictions are ``expand_links``'s), for ``hops`` steps, each step
    scoring its parent's score times ``rp.hop_decay``. A memory the query found keeps its own
    score when that is higher. What an author linked is what the chain reaches: a related
    memory the query's words miss, never "whatever is nearest" in a store where all is near."""
    g, mems = sc.graph, sc.memories
    frontier = sorted(hits.values(), key=lambda h: -h.score)[: rp.hop_seeds]
    decay = rp.hop_decay or 1.0
    for _ in range(hops):
        reached: list[Hit] = []
        for hit in frontier:
            mid = hit.mem.id
            for kind, other in (*g.relations.get(mid, ()), *g.related_from.get(mid, ())):
                if kind == "contradicts" or other == mid or other not in ok or other not in mems:
                    continue
                why = f"link:{kind}:{mid}"
                score = hit.score * decay
                existing = hits.get(other)
                if existing is None:
                    new = Hit(mems[other], score, [why], hit.group)
                    hits[other] = new
                    reached.append(new)
                elif why not in existing.reasons:
                    existing.reasons.append(why)
                    existing.score = max(existing.score, score)
        frontier = reached


def fold_superseded(hits: dict[str, Hit], sc: Scope) -> None:
    """SPEC §10: a superseded fact never outranks its replacement; it is the replacement's history.

    Each matched superseded fact leaves the answer and its chain's head enters in its place,
    with the old fact's score when that is higher (the query was worded like the old fact),
    whatever filters the head itself would meet: the answer to a question about the old fact is
    the current one. An archived head retires its chain (as ``snapshot`` does): nothing of it
    is current, so nothing of it is returned. A hand-made cycle has no head: left as it is."""
    g = sc.graph
    for mid in [m for m, h in hits.items() if m in g.superseded_by]:
        head = g.head(mid)
        if head in g.superseded_by:
            continue
        old = hits.pop(mid)
        if head in g.archived or head not in sc.memories:
            continue
        why = f"supersedes:{mid}"
        hit = hits.get(head)
        if hit is None:
            mem = sc.memories[head]
            hits[head] = Hit(mem, old.score, [why], group_key(mem))
        else:
            hit.score = max(hit.score, old.score)
            hit.reasons.append(why)


def history(fact_id: str, sc: Scope, predecessors: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    """The facts ``fact_id`` replaced, directly or down its chain, nearest first (archived ones
    were withdrawn, not replaced: left out)."""
    g, mems = sc.graph, sc.memories
    out: list[dict[str, Any]] = []
    seen = {fact_id}
    level = [fact_id]
    while level:
        older: list[str] = []
        for new in level:
            for old in sorted(predecessors.get(new, ()), key=lambda m: mems[m].created or "", reverse=True):
                if old in seen:
                    continue
                seen.add(old)
                older.append(old)
                if old in g.archived:
                    continue
                mem = mems[old]
                succ = mems[new]
                change = succ.links.get("via_change") if old in succ.link_list("supersedes") else None
                if not isinstance(change, str):
                    change = next(reversed(g.changes_for.get(old) or [None]))
                out.append({"id": old, "scope": mem.scope, "text": mem.text, "created": mem.created,
                            "superseded": True, "superseded_by": new, "change": change})
        level = older
    return out


def predecessors_of(g: Graph) -> dict[str, list[str]]:
    """Supersession reversed: fact -> the facts it directly replaced."""
    out: dict[str, list[str]] = {}
    for old, new in g.superseded_by.items():
        out.setdefault(new, []).append(old)
    return out


def group_key(mem: Memory) -> str:
    """Problems and their attempts share a group; so do facts and their changes."""
    if mem.kind in ("solution", "failed_tactic") and mem.problem:
        return mem.problem
    return mem.id


def attach_groups(hits: list[Hit], graph: Graph) -> None:
    """A memory that elaborates on or depends on another in the answer joins that one's group, so
    selection keeps them together."""
    by_id = {h.mem.id: h for h in hits}
    attached = relations.anchors(by_id, graph)
    for mid in attached:
        by_id[mid].group = by_id[relations.root_of(mid, attached)].group


def attachment(mid: str, attached: Mapping[str, str], graph: Graph) -> dict[str, str] | None:
    """``{type, id}`` of the link that placed ``mid`` after another result, or None."""
    target = attached.get(mid)
    if target is None:
        return None
    kind = next(k for k, other in graph.relations.get(mid, ()) if other == target and k in ATTACHING)
    return {"type": kind, "id": target}
