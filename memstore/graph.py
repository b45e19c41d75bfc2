"""Explicit links and utility, derived from immutable memories and events (SPEC §2, §4.5, §4.7).

Nothing here is stored: "what is archived / superseded / useful now" is computed from the
append-only history every time the history changes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from .model import Event, Memory

# Votes without evidence count half (SPEC §4): attribution without a pointer is weaker.
UNEVIDENCED_WEIGHT = 0.5
# Shrinkage toward 0 for the global prior: two neutral pseudo-votes.
PRIOR_STRENGTH = 2.0


@dataclass
class Vote:
    memory: str
    problem: str | None
    value: float
    weight: float
    author: str
    created: str


@dataclass
class Graph:
    archived: set[str] = field(default_factory=set)
    attempts: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # problem -> attempts
    changes_for: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # target -> changes
    superseded_by: dict[str, str] = field(default_factory=dict)  # old fact -> new fact
    votes: dict[str, list[Vote]] = field(default_factory=lambda: defaultdict(list))  # memory -> votes

    def head(self, fact_id: str) -> str:
        """Follow supersession to the current fact; cycle-safe (a hand-made cycle stops)."""
        seen = {fact_id}
        cur = fact_id
        while cur in self.superseded_by:
            nxt = self.superseded_by[cur]
            if nxt in seen:
                break
            seen.add(nxt)
            cur = nxt
        return cur

    def utility_global(self, memory_id: str) -> float:
        votes = self.votes.get(memory_id, [])
        total = sum(v.value * v.weight for v in votes)
        weight = sum(v.weight for v in votes)
        return total / (weight + PRIOR_STRENGTH) if votes else 0.0

    def vote_count(self, memory_id: str) -> int:
        return len(self.votes.get(memory_id, []))


def archived_ids(events: Iterable[Event]) -> set[str]:
    """Memories whose latest archive event archives them (events only: cheap at any size)."""
    latest: dict[str, Event] = {}
    for ev in sorted((e for e in events if e.type == "archive" and e.memory), key=_order):
        latest[ev.memory or ""] = ev
    return {mid for mid, ev in latest.items() if ev.archived}


def _order(ev: Event) -> tuple[str, str]:
    # ULIDs sort by creation time; ``created`` breaks ties for hand-written events.
    return (ev.created, ev.id)


def build_graph(memories: dict[str, Memory], events: Iterable[Event]) -> Graph:
    g = Graph()
    for mem in memories.values():
        kind = mem.kind
        if kind in ("solution", "failed_tactic"):
            problem = mem.links.get("problem")
            if isinstance(problem, str) and problem in memories:
                g.attempts[problem].append(mem.id)
        elif kind == "change":
            for target in mem.link_list("change_targets"):
                if target in memories:
                    g.changes_for[target].append(mem.id)
        elif kind == "fact" and mem.links.get("supersedes"):
            for old in mem.link_list("supersedes"):
                if old in memories and old != mem.id:
                    g.superseded_by[old] = _newer(g.superseded_by.get(old), mem.id, memories)
    latest_archive: dict[str, Event] = {}
    latest_vote: dict[tuple[str, str | None, str], Event] = {}
    for ev in sorted(events, key=_order):
        if ev.type == "archive" and ev.memory:
            latest_archive[ev.memory] = ev
        elif ev.type == "utility_vote" and ev.memory and ev.vote is not None:
            # Only the latest vote per (memory, problem, author/episode) counts.
            latest_vote[(ev.memory, ev.problem, ev.episode or ev.author)] = ev
        elif ev.type == "fact_update_link" and ev.old_fact and ev.new_fact:
            if ev.old_fact in memories and ev.new_fact in memories and ev.old_fact != ev.new_fact:
                g.superseded_by[ev.old_fact] = _newer(g.superseded_by.get(ev.old_fact), ev.new_fact, memories)
            if ev.change and ev.change in memories and ev.change not in g.changes_for[ev.old_fact]:
                g.changes_for[ev.old_fact].append(ev.change)
    g.archived = {mid for mid, ev in latest_archive.items() if ev.archived}
    for (mid, problem, author), ev in latest_vote.items():
        weight = 1.0 if ev.evidence else UNEVIDENCED_WEIGHT
        value = max(-1.0, min(1.0, float(ev.vote or 0.0)))
        g.votes[mid].append(Vote(mid, problem, value, weight, author, ev.created))
    return g


def _newer(current: str | None, candidate: str, memories: dict[str, Memory]) -> str:
    """Two facts superseding the same one: the newer (by id, i.e. time) is the successor."""
    if current is None:
        return candidate
    return max(current, candidate)
