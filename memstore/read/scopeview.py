"""The records and the link graph of the stores a read looks at, kept current by deltas.

A long-lived process (the daemon) writes and reads in turns. Merging the stores' records and
building their graph from scratch costs ~150 ms at 100k memories; the view remembers the
catalog generations it reflects and applies only what the catalogs changed since, with the
result a rebuild from the same records would give (the tests compare the two).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ..store.catalog import LOG_LIMIT, Catalog
from ..store.changelog import ChangeLog
from ..store.graph import Graph, LinkIndex
from ..store.model import Event, Memory


class ScopeView:
    """The memories of several stores merged (a later store's record wins an id, as
    ``dict.update`` does) and the graph over them and all their events."""

    def __init__(self, catalogs: list[Catalog]) -> None:
        self.catalogs = catalogs
        self.seen = [cat.generation for cat in catalogs]
        self.memories: dict[str, Memory] = {}
        events: dict[Hashable, Event] = {}
        for i, cat in enumerate(catalogs):
            self.memories.update(cat.memories)
            events.update(((i, eid), ev) for eid, ev in cat.events.items())
        # An event acts only on its own store's memories (graph.acts_on), but a repo event's
        # context (a vote's problem, a fact link's new fact) may be global: one graph for all.
        self.links = LinkIndex(self.memories, events)
        self.generation = 0
        self._log = ChangeLog(LOG_LIMIT)  # the memories each generation may have changed

    @property
    def graph(self) -> Graph:
        return self.links.graph

    def catch_up(self) -> bool:
        """Apply what the catalogs changed since this view last looked. False when a catalog
        cannot tell (it rebuilt its records, or the view fell too far behind): build anew."""
        changed: set[str] = set()
        events: dict[Hashable, Event | None] = {}
        for i, cat in enumerate(self.catalogs):
            since = cat.changes_since(self.seen[i])
            if since is None:
                return False
            changed |= since[0]
            events.update(((i, eid), cat.events.get(eid)) for eid in since[1])
        self.seen = [cat.generation for cat in self.catalogs]
        if not changed and not events:
            return True
        for mid in changed:
            mem = None
            for cat in self.catalogs:
                mem = cat.memories.get(mid, mem)
            if mem is None:
                self.memories.pop(mid, None)
            else:
                self.memories[mid] = mem
        affected = self.links.apply(changed, events)
        self.generation += 1
        self._log.note(self.generation, affected)
        return True

    def changes_since(self, generation: int) -> set[str] | None:
        """Memories whose record, links, utility or archived state may have changed after
        ``generation``; None when the log does not reach back that far."""
        since = self._log.since(generation)
        return None if since is None else since[0]


def scope_view(cache: dict[str, Any], catalogs: list[Catalog]) -> ScopeView:
    """The view of ``catalogs`` kept in ``cache`` (a workspace's ``read_cache``), brought up to
    date; a new one when the cached view is of other catalogs or cannot catch up."""
    cached = cache.get("scope")
    if cached is not None and cached.catalogs == catalogs and cached.catch_up():
        return cached
    view = cache["scope"] = ScopeView(catalogs)
    return view
