"""Explicit links and utility, derived from immutable memories and events (SPEC §2, §4.5, §4.7).

Nothing here is stored: "what is archived / superseded / useful now" is computed from the
append-only history every time the history changes.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import Config
from .model import RELATION_TYPES, Event, Memory

# Votes without evidence count half (SPEC §4): attribution without a pointer is weaker.
UNEVIDENCED_WEIGHT = 0.5
# Shrinkage toward 0 for the global prior: two neutral pseudo-votes.
PRIOR_STRENGTH = 2.0
# The age at which a vote counts half in global utility: config.yaml ``utility.half_life_days``
# (docs/decisions/utility-half-life.md); this is its default.
HALF_LIFE_DAYS = 180.0
DAY = 86400.0


@dataclass
class Vote:
    memory: str
    problem: str | None
    value: float
    weight: float
    author: str
    created: str
    at: float | None = None  # ``created`` in seconds since the epoch (None: no readable time)


def epoch(created: str) -> float | None:
    """An ISO time (``2026-11-18T15:32:15Z``) in seconds since the epoch, or None."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


def decay(at: float | None, half_life_days: float, now: float) -> float:
    """A vote's weight factor for its age: 1 now, 1/2 at ``half_life_days``; a vote with no
    readable time, or dated in the future (a clock ahead, a hand-written file), counts whole."""
    if at is None or at >= now:
        return 1.0
    return math.exp(-math.log(2) * (now - at) / (half_life_days * DAY))


@dataclass
class Graph:
    archived: set[str] = field(default_factory=set)
    attempts: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # problem -> attempts
    changes_for: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # target -> changes
    superseded_by: dict[str, str] = field(default_factory=dict)  # old fact -> new fact
    votes: dict[str, list[Vote]] = field(default_factory=lambda: defaultdict(list))  # memory -> votes
    # Typed links (links.relations, ``related``, link events): memory -> [(type, target)], its
    # file's first, then its events' in order; and target -> [(type, source)], sorted. Targets
    # are kept whether or not they exist: ``show`` and ``check`` name the missing ones.
    relations: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    related_from: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

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

    def utility_global(self, memory_id: str, half_life_days: float = HALF_LIFE_DAYS, now: float | None = None) -> float:
        """The shrunk mean of every vote on the memory, each weighed by its evidence and its age:
        a vote ``half_life_days`` old counts half (the design: global utility decays with the
        age of its votes; the votes of the problem in hand, U_local, do not)."""
        votes = self.votes.get(memory_id, [])
        if not votes:
            return 0.0
        now = time.time() if now is None else now
        weights = [v.weight * decay(v.at, half_life_days, now) for v in votes]
        total = sum(v.value * w for v, w in zip(votes, weights, strict=True))
        return total / (sum(weights) + PRIOR_STRENGTH)

    def problem_votes(self, memory_id: str, problem: str | None) -> float:
        """The evidence-weighted sum of the votes cast on ``memory_id`` for ``problem``: below 0,
        it was voted down for that problem."""
        if problem is None:
            return 0.0
        return sum(v.value * v.weight for v in self.votes.get(memory_id, []) if v.problem == problem)

    def superseded_tactic(self, mem: Memory, memories: Mapping[str, Memory]) -> str | None:
        """For a failed tactic: the solution of its problem written after it whose votes are
        positive (the newest such), which supersedes it: it is history, not a watch-out. A
        solution voted on for another problem only, or not at all, supersedes nothing."""
        if mem.kind != "failed_tactic" or not mem.problem:
            return None
        best: str | None = None
        for other in self.attempts.get(mem.problem, ()):
            sol = memories.get(other)
            if sol is None or sol.kind != "solution" or other in self.archived or (sol.created, sol.id) <= (
                    mem.created, mem.id):
                continue
            votes = self.votes.get(other, [])
            if votes and sum(v.value * v.weight for v in votes if v.problem in (None, mem.problem)) > 0:
                best = other if best is None or (sol.created, sol.id) > (memories[best].created, best) else best
        return best

    def vote_count(self, memory_id: str) -> int:
        return len(self.votes.get(memory_id, []))


def needs_review(mem: Memory, config: Config, graph: Graph | None = None) -> bool:
    """Written with a confidence below ``review.confidence_below`` and not reinforced since by a
    positive vote (nor archived): stored, but ``write`` says so and ``check`` and ``diff`` list it
    for a person to confirm (a +1 vote) or archive."""
    if mem.confidence is None or mem.confidence >= config.review_bar:
        return False
    if graph is None:
        return True
    return mem.id not in graph.archived and not any(v.value > 0 for v in graph.votes.get(mem.id, []))


def archived_ids(events: Iterable[Event]) -> set[str]:
    """Memories whose latest archive event archives them (events only: cheap at any size)."""
    latest: dict[str, Event] = {}
    for ev in sorted((e for e in events if e.type == "archive" and e.memory), key=_order):
        latest[ev.memory or ""] = ev
    return {mid for mid, ev in latest.items() if ev.archived}


def _order(ev: Event, key: Hashable = 0) -> tuple[Any, ...]:
    # ULIDs sort by creation time; ``created`` breaks ties for hand-written events; the key
    # (the event's place among the inputs) orders copies of one event in two stores.
    return (ev.created, ev.id, key)


_ATTEMPTS = ("solution", "failed_tactic")
_LINKING = frozenset({*_ATTEMPTS, "change", "fact"})


def _targets(mem: Memory) -> tuple[str, ...]:
    """The memories ``mem`` links to through the link its kind defines (repeats kept)."""
    kind = mem.kind
    if kind in _ATTEMPTS:
        problem = mem.links.get("problem")
        return (problem,) if isinstance(problem, str) else ()
    if kind == "change":
        return tuple(mem.link_list("change_targets"))
    if kind == "fact" and mem.links.get("supersedes"):
        return tuple(mem.link_list("supersedes"))
    return ()


def _event_target(ev: Event) -> str | None:
    """The memory whose derived state the event takes part in deciding (None: no effect)."""
    if ev.type in ("archive", "utility_vote") and ev.memory:
        return ev.memory if ev.type == "archive" or ev.vote is not None else None
    if ev.type == "fact_update_link" and ev.old_fact and ev.new_fact:
        return ev.old_fact
    if ev.type == "link" and ev.memory and ev.target and ev.relation in RELATION_TYPES:
        return ev.memory
    return None


def _names(ev: Event) -> tuple[str | None, ...]:
    """The other memories an event names, whose coming and going can change what it does."""
    if ev.type == "fact_update_link":
        return (ev.new_fact, ev.change)
    return (ev.target,) if ev.type == "link" else ()


def acts_on(ev: Event, mid: str, memories: Mapping[str, Memory]) -> bool:
    """Does ``ev`` act on memory ``mid``? An event acts only within its own store: a repo's
    events/ (which any clone or pull request brings) never archive, vote on or supersede a
    global memory, and a global or shared event never reaches into another store."""
    if not ev.scope:
        return True
    mem = memories.get(mid)
    if mem is not None and mem.scope != ev.scope:
        return False
    if ev.scope != "repo" and ev.type in ("fact_update_link", "link"):
        return all((m := memories.get(name or "")) is None or m.scope == ev.scope for name in _names(ev))
    return True


def _place(mem: Memory) -> tuple[bool, str, str]:
    """Where a memory sits in a freshly loaded scope (repo store first, files by path): linked
    memories are listed in this order however the records were loaded or changed since."""
    return (mem.scope != "repo", mem.path, mem.id)


def _in_place(ids: list[str], memories: dict[str, Memory]) -> bool:
    """Are ``ids`` in ``_place`` order already? (They mostly are: checking is cheaper than sorting.)"""
    prev = memories[ids[0]]
    for mid in ids[1:]:
        cur = memories[mid]
        if not (prev.scope == cur.scope and prev.path < cur.path) and _place(prev) > _place(cur):
            return False
        prev = cur
    return True


class LinkIndex:
    """The ``Graph`` of a set of memories and events, kept current by deltas.

    A long-lived process sees a few files change at a time; rebuilding the graph from every
    record costs ~100 ms at 100k memories. Reverse indexes (who links to a memory, which events
    decide its state) tell which entries a changed memory or event can affect; only those are
    computed again, by the same rules, so the graph equals a full build after any change.
    """

    def __init__(self, memories: dict[str, Memory], events: Mapping[Hashable, Event], *,
                 incremental: bool = True) -> None:
        self.memories = memories  # the caller's dict: it applies changes to it, then calls ``apply``
        self.graph = Graph()
        self._incremental = incremental
        self._events: dict[Hashable, Event] = {}
        self._links: dict[str, tuple[str, ...]] = {}  # memory -> its targets, as last applied
        self._linked_from: dict[str, set[str]] = defaultdict(set)  # target -> memories naming it
        self._deciding: dict[str, set[Hashable]] = defaultdict(set)  # memory -> events on its state
        self._naming: dict[str, set[Hashable]] = defaultdict(set)  # memory -> fact/typed links naming it
        self._build(events)

    def _build(self, events: Mapping[Hashable, Event]) -> None:
        g, memories = self.graph, self.memories
        relations: dict[str, list[tuple[str, str]]] = {}
        for mem in memories.values():
            links = mem.links
            if links and ("relations" in links or "related" in links):
                relations[mem.id] = mem.relations()
            if mem.kind not in _LINKING:  # most of the memories: skip the call
                continue
            targets = _targets(mem)
            if not targets:
                continue
            if self._incremental:
                self._links[mem.id] = targets
                for t in targets:
                    self._linked_from[t].add(mem.id)
            if mem.kind in _ATTEMPTS:
                if targets[0] in memories:
                    g.attempts[targets[0]].append(mem.id)
            elif mem.kind == "change":
                for target in targets:
                    if target in memories:
                        g.changes_for[target].append(mem.id)
            else:
                for old in targets:
                    if old in memories and old != mem.id:
                        g.superseded_by[old] = _newer(g.superseded_by.get(old), mem.id)
        for table in (g.attempts, g.changes_for):
            for linked in table.values():
                if len(linked) > 1 and not _in_place(linked, memories):
                    linked.sort(key=lambda mid: _place(memories[mid]))
        latest_archive: dict[str, Event] = {}
        latest_vote: dict[tuple[str, str | None, str], Event] = {}
        for key in sorted(events, key=lambda k: _order(events[k], k)):
            ev = events[key]
            target = _event_target(ev)
            if target is None:
                continue
            if self._incremental:
                self._add_event(key, ev, target)
            if not acts_on(ev, target, memories):
                continue
            if ev.type == "archive":
                latest_archive[target] = ev
            elif ev.type == "utility_vote":
                # Only the latest vote per (memory, problem, author/episode) counts.
                latest_vote[(target, ev.problem, ev.episode or ev.author)] = ev
            elif ev.type == "link":
                if target in memories:
                    relations.setdefault(target, []).append((ev.relation or "", ev.target or ""))
            else:
                assert ev.new_fact is not None
                if target in memories and ev.new_fact in memories and target != ev.new_fact:
                    g.superseded_by[target] = _newer(g.superseded_by.get(target), ev.new_fact)
                if ev.change and ev.change in memories and ev.change not in g.changes_for.get(target, ()):
                    g.changes_for[target].append(ev.change)
        g.archived = {mid for mid, ev in latest_archive.items() if ev.archived}
        for (mid, problem, author), ev in latest_vote.items():
            g.votes[mid].append(_vote(mid, problem, author, ev))
        incoming: dict[str, set[tuple[str, str]]] = defaultdict(set)
        for mid, rels in relations.items():
            rels = list(dict.fromkeys(rels))
            if rels:
                g.relations[mid] = rels
                for kind, other in rels:
                    incoming[other].add((kind, mid))
        g.related_from = {other: sorted(pairs, key=_by_source) for other, pairs in incoming.items()}

    def _add_event(self, key: Hashable, ev: Event, target: str) -> None:
        self._events[key] = ev
        self._deciding[target].add(key)
        for name in _names(ev):
            if name:
                self._naming[name].add(key)

    def _drop_event(self, key: Hashable) -> str | None:
        ev = self._events.pop(key, None)
        target = _event_target(ev) if ev is not None else None
        if ev is None or target is None:
            return None
        self._deciding[target].discard(key)
        for name in _names(ev):
            if name:
                self._naming[name].discard(key)
        return target

    def apply(self, memory_ids: Iterable[str], events: Mapping[Hashable, Event | None]) -> set[str]:
        """Follow changes: ``memory_ids`` were added, changed or removed in ``memories`` (already
        applied there), ``events`` maps each changed event's key to its new record (None: gone).
        Returns the memories whose links, utility or archived state may have changed."""
        assert self._incremental, "built without the indexes apply needs"
        affected: set[str] = set()
        for mid in memory_ids:
            affected.add(mid)
            for t in self._links.pop(mid, ()):
                self._linked_from[t].discard(mid)
                affected.add(t)
            mem = self.memories.get(mid)
            targets = _targets(mem) if mem is not None else ()
            if targets:
                self._links[mid] = targets
                for t in targets:
                    self._linked_from[t].add(mid)
                affected.update(targets)
            # Fact links naming it count only while it exists.
            affected.update(t for k in self._naming.get(mid, ()) if (t := _event_target(self._events[k])))
        for key, ev in events.items():
            old_target = self._drop_event(key)
            if old_target is not None:
                affected.add(old_target)
            target = _event_target(ev) if ev is not None else None
            if ev is not None and target is not None:
                self._add_event(key, ev, target)
                affected.add(target)
        for mid in affected:
            self._recompute(mid)
        return affected

    @contextlib.contextmanager
    def trying(self, ev: Event) -> Iterator[Graph]:
        """The graph as it would be with ``ev`` added (an update's preview), restored on exit."""
        key = (-1, ev.id)  # no input has it: keys are the inputs' places, or (store, event id)
        self.apply((), {key: ev})
        try:
            yield self.graph
        finally:
            self.apply((), {key: None})

    @contextlib.contextmanager
    def without(self, event_id: str) -> Iterator[Graph]:
        """The graph as it was before the event ``event_id`` (a retried update answers with the
        effect its first attempt had), restored on exit."""
        held = {k: e for k, e in self._events.items() if e.id == event_id}
        self.apply((), dict.fromkeys(held))
        try:
            yield self.graph
        finally:
            self.apply((), held)

    def _recompute(self, mid: str) -> None:
        """Everything the graph says about ``mid``, by the rules ``_build`` follows."""
        g, memories = self.graph, self.memories
        attempts: list[str] = []
        changes: list[str] = []
        successor: str | None = None
        if mid in memories:
            for other in sorted(self._linked_from.get(mid, ()), key=lambda m: _place(memories[m])):
                mem = memories[other]
                if mem.kind in _ATTEMPTS:
                    attempts.append(other)
                elif mem.kind == "change":
                    changes += [other] * self._links[other].count(mid)
                elif other != mid:
                    successor = _newer(successor, other)
        archive: Event | None = None
        votes: dict[tuple[str | None, str], Event] = {}
        relations = memories[mid].relations() if mid in memories else []
        events = self._events
        for key in sorted(self._deciding.get(mid, ()), key=lambda k: _order(events[k], k)):
            ev = events[key]
            if not acts_on(ev, mid, memories):
                continue
            if ev.type == "archive":
                archive = ev
            elif ev.type == "utility_vote":
                votes[(ev.problem, ev.episode or ev.author)] = ev
            elif ev.type == "link":
                if mid in memories:
                    relations.append((ev.relation or "", ev.target or ""))
            else:
                assert ev.new_fact is not None
                if mid in memories and ev.new_fact in memories and mid != ev.new_fact:
                    successor = _newer(successor, ev.new_fact)
                if ev.change and ev.change in memories and ev.change not in changes:
                    changes.append(ev.change)
        _put(g.attempts, mid, attempts)
        _put(g.changes_for, mid, changes)
        _put(g.superseded_by, mid, successor)
        _put(g.votes, mid, [_vote(mid, problem, author, ev) for (problem, author), ev in votes.items()])
        if archive is not None and archive.archived:
            g.archived.add(mid)
        else:
            g.archived.discard(mid)
        self._set_relations(mid, list(dict.fromkeys(relations)))

    def _set_relations(self, mid: str, relations: list[tuple[str, str]]) -> None:
        g = self.graph
        old = g.relations.get(mid, [])
        if old == relations:
            return
        for kind, other in old:
            pairs = [p for p in g.related_from.get(other, []) if p != (kind, mid)]
            _put(g.related_from, other, pairs)
        for kind, other in relations:
            g.related_from[other] = sorted({*g.related_from.get(other, []), (kind, mid)}, key=_by_source)
        _put(g.relations, mid, relations)


def _by_source(pair: tuple[str, str]) -> tuple[str, str]:
    """Incoming typed links by their source's id (its age), then type."""
    return pair[1], pair[0]


def _put(table: dict[str, Any], key: str, value: Any) -> None:
    if value:
        table[key] = value
    else:
        table.pop(key, None)


def _vote(mid: str, problem: str | None, author: str, ev: Event) -> Vote:
    weight = 1.0 if ev.evidence else UNEVIDENCED_WEIGHT
    value = max(-1.0, min(1.0, float(ev.vote or 0.0)))
    return Vote(mid, problem, value, weight, author, ev.created, epoch(ev.created))


def build_graph(memories: dict[str, Memory], events: Iterable[Event]) -> Graph:
    return LinkIndex(memories, dict(enumerate(events)), incremental=False).graph


def _newer(current: str | None, candidate: str) -> str:
    """Two facts superseding the same one: the newer (by id, i.e. time) is the successor."""
    if current is None:
        return candidate
    return max(current, candidate)
