"""Typed links as people and agents see them (SPEC §10): the lists ``show`` and reads give,
where a read places a memory that elaborates on or depends on another, disputes, and the
doubts every surface shows beside a memory (``doubts``).

Everything here works on the graph already in memory (``Graph.relations`` / ``related_from``):
no file is read, so a read pays a few dictionary lookups per result.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from .config import Config
from .graph import Graph, needs_review
from .model import ATTACHING, Memory

_SETTLE = ("do not pick one silently; settle it against the current code, then record the outcome with a "
           "change memory that targets both (and archive the side that lost, or write a fact that supersedes it).")
DISPUTE_GUIDANCE = "These two memories contradict each other: " + _SETTLE
DISPUTE_RULE = "Some results contradict each other (see disputes): " + _SETTLE


def state(mid: str, graph: Graph, memories: Mapping[str, Memory]) -> str:
    if mid not in memories:
        return "missing"
    return "archived" if mid in graph.archived else "active"


def relation_lists(mid: str, graph: Graph, memories: Mapping[str, Memory], *,
                   active_only: bool) -> dict[str, list[dict[str, str]]]:
    """``{"out": [{type, id}], "in": [{type, id}]}``: the typed links from ``mid`` and to it.
    With ``active_only`` (reads) links to archived or missing memories are left out; otherwise
    (``show``) each entry says the other end's ``state``: active, archived or missing."""
    lists: dict[str, list[dict[str, str]]] = {"out": [], "in": []}
    for direction, pairs in (("out", graph.relations.get(mid, ())), ("in", graph.related_from.get(mid, ()))):
        for kind, other in pairs:
            st = state(other, graph, memories)
            if active_only and st != "active":
                continue
            entry = {"type": kind, "id": other}
            if not active_only:
                entry["state"] = st
            lists[direction].append(entry)
    return lists


def anchors(ids: Collection[str], graph: Graph) -> dict[str, str]:
    """For each of ``ids`` that elaborates on or depends on another of ``ids``: that one (the
    first such link the memory lists). Cycles are cut: a memory is never its own anchor."""
    out: dict[str, str] = {}
    for mid in ids:
        for kind, other in graph.relations.get(mid, ()):
            if kind in ATTACHING and other in ids and other != mid:
                out[mid] = other
                break
    looped: set[str] = set()  # a loop of attachments (hand-made) places none of its members
    for mid in out:
        seen = {mid}
        cur = out.get(mid)
        while cur is not None and cur not in seen:
            seen.add(cur)
            cur = out.get(cur)
        if cur == mid:
            looped.add(mid)
    return {mid: other for mid, other in out.items() if mid not in looped}


def root_of(mid: str, attached: Mapping[str, str]) -> str:
    while mid in attached:
        mid = attached[mid]
    return mid


def place(ordered: list[str], attached: Mapping[str, str]) -> list[str]:
    """``ordered`` with each attached memory moved directly after what it is attached to; a
    cluster stands where its best-placed member stood."""
    children: dict[str, list[str]] = {}
    for mid in ordered:
        if mid in attached:
            children.setdefault(attached[mid], []).append(mid)
    out: list[str] = []
    done: set[str] = set()

    def emit(mid: str) -> None:
        out.append(mid)
        done.add(mid)
        for child in children.get(mid, ()):
            emit(child)

    for mid in ordered:
        root = root_of(mid, attached)
        if root not in done:
            emit(root)
    return out


def contradicting(mid: str, graph: Graph) -> Iterable[str]:
    """The memories ``mid`` is in dispute with, whichever end recorded it."""
    for kind, other in graph.relations.get(mid, ()):
        if kind == "contradicts" and other != mid:
            yield other
    for kind, other in graph.related_from.get(mid, ()):
        if kind == "contradicts" and other != mid:
            yield other


def side(mem: Memory) -> dict[str, Any]:
    return {"id": mem.id, "kind": mem.kind, "scope": mem.scope, "text": mem.text, "author": mem.author,
            "created": mem.created, "confidence": mem.confidence, "evidence": list(mem.evidence)}


def disputes(ids: list[str], graph: Graph, memories: Mapping[str, Memory]) -> list[dict[str, Any]]:
    """Each contradicting pair among ``ids`` once, in answer order: both sides (older first), who
    wrote each and when, their evidence, and what to do about it."""
    present = set(ids)
    out: list[dict[str, Any]] = []
    seen: set[frozenset[str]] = set()
    for mid in ids:
        for other in contradicting(mid, graph):
            pair = frozenset((mid, other))
            if other not in present or pair in seen:
                continue
            seen.add(pair)
            a, b = sorted((memories[mid], memories[other]), key=lambda m: (m.created, m.id))
            out.append({"ids": [a.id, b.id], "sides": [side(a), side(b)], "guidance": DISPUTE_GUIDANCE})
    return out


def open_disputes(graph: Graph, memories: Mapping[str, Memory]) -> list[tuple[str, str]]:
    """Every contradicting pair whose two sides are both active (neither archived nor missing),
    once each, as (older, newer) ids."""
    out: set[tuple[str, str]] = set()
    for mid, pairs in graph.relations.items():
        for kind, other in pairs:
            if kind != "contradicts" or other == mid:
                continue
            if state(mid, graph, memories) == state(other, graph, memories) == "active":
                a, b = sorted((memories[mid], memories[other]), key=lambda m: (m.created, m.id))
                out.add((a.id, b.id))
    return sorted(out)


# -- doubts -------------------------------------------------------------------------------------------
# What every surface that shows a memory says beside it, in this order (docs/json.md):
DOUBTS = ("disputed", "unconfirmed", "stale", "unverified", "voted_down")
DOUBT_WORDS = {"disputed": "disputed", "unconfirmed": "unconfirmed", "stale": "stale: verify against the code",
               "unverified": "cites another repo's code: unverified here", "voted_down": "voted down for this problem"}


def doubts(mem: Memory, graph: Graph, memories: Mapping[str, Memory], config: Config, *,
           stale: Mapping[str, Any] | None = None, problem: str | None = None,
           unverified: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """The doubts a memory carries wherever it is shown, as ``[{"doubt", "why"}]`` in ``DOUBTS``
    order (empty: none). The one rule read results, ``context``, ``snapshot``, the agent hooks
    and ``review`` apply:

    - ``disputed``: an open ``contradicts`` link (the other side active); both sides carry it,
      and neither is ever shown as a current fact;
    - ``unconfirmed``: written less sure than ``review.confidence_below`` and not confirmed
      since by a positive vote (``graph.needs_review``: the write's ``review: true``);
    - ``stale``: ``stale`` is what ``git/stale`` found for it (cited lines, or files, changed);
    - ``unverified``: it cites ``repo:NAME@SHA:path``, code of another repository, and no
      checkout here confirmed it. ``unverified`` is what ``git/stale.check_repo_refs`` found:
      the citations it could not check, with why (one it checked is either fine or in
      ``stale``); None, when nothing was checked, leaves every ``repo:`` citation unverified;
    - ``voted_down``: its votes for ``problem`` (the problem in hand, else the one it is an
      attempt at) add up below zero; such a solution is never listed as the best."""
    out: list[dict[str, str]] = []
    rivals = [o for o in dict.fromkeys(contradicting(mem.id, graph)) if state(o, graph, memories) == "active"]
    if rivals and mem.id not in graph.archived:
        out.append({"doubt": "disputed", "why": "contradicted by " + ", ".join(rivals)})
    if needs_review(mem, config, graph):
        why = (f"written with confidence {mem.confidence:g}, below review.confidence_below "
               f"{config.review_bar:g}; no vote confirmed it")
        out.append({"doubt": "unconfirmed", "why": why})
    if stale:
        cited = stale.get("evidence") or stale.get("files") or []
        out.append({"doubt": "stale", "why": "the code it cites changed since: " + ", ".join(map(str, cited))})
    # A repo: citation names a file of another repository at one commit: unless a checkout of it
    # here said so, nothing tells whether those lines still say what the memory claims.
    if unverified is None:
        unchecked = [raw for raw in dict.fromkeys(mem.evidence) if raw.startswith("repo:")]
        if unchecked:
            out.append({"doubt": "unverified", "why": "cites code of another repository, not checked here: "
                        + ", ".join(unchecked)})
    elif unverified:
        out.append({"doubt": "unverified", "why": "cites code of another repository, not checked here: "
                    + "; ".join(f"{raw} ({why})" for raw, why in unverified.items())})
    problem = problem or mem.problem
    if problem is not None and graph.problem_votes(mem.id, problem) < 0:
        out.append({"doubt": "voted_down", "why": f"voted down for problem {problem}"})
    return out


def doubt_label(found: list[dict[str, str]] | None) -> str:
    """The doubts as the text surfaces print them beside a memory: ``" (disputed; unconfirmed)"``,
    or "" without any."""
    words = [DOUBT_WORDS.get(d.get("doubt", ""), d.get("doubt", "")) for d in found or ()]
    return f" ({'; '.join(words)})" if words else ""


def is_doubted(found: list[dict[str, str]] | None, doubt: str) -> bool:
    return any(d.get("doubt") == doubt for d in found or ())
