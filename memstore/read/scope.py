"""What one read looks at, taken from the workspace once.

``open_scope`` is the one place a read reaches into the workspace: it brings the stores in scope,
their catalogs and indexes up to date, merges them into one view, and hands the pipeline a
``Scope``. From there the read flows down: lanes, links, utility and selection see the scope
alone, never the workspace (the stale check and the episode log are the verb's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..index.store_index import StoreIndex
from ..store.catalog import Catalog, Wanted, find
from ..store.disk import Store
from ..store.graph import Graph
from ..store.model import Memory
from ..store.workspace import Workspace, view_order
from .indexes import store_index
from .scopeview import ScopeView, scope_view
from .tuning import ReadParams, read_settings


@dataclass(frozen=True)
class Scope:
    """Everything one read looks at, across the stores in scope."""

    stores: Mapping[str, Store]  # scope name -> store, repo first (display paths, the stale check)
    indexes: list[StoreIndex]  # one per store, in the same order
    view: ScopeView  # the catalogs merged: memories and the link/utility graph
    params: ReadParams
    warnings: list[str]  # settings memstore could not use, then the indexes' own
    cache: dict[str, Any]  # the workspace's read cache: what a read keeps for the next one
    # Stores the read leaves out but whose ids it may be given (a repo vote's problem may be
    # global, and a --no-global read still weighs votes by it): looked up, never read.
    elsewhere: tuple[Catalog, ...] = ()
    # The user's checkouts of other repositories (``repos:``), for ``repo:`` evidence, and where
    # their answers are cached (the global store's .index/; None: not kept).
    checkouts: Mapping[str, Path] = field(default_factory=dict)
    checkout_cache: Path | None = None
    # Memory files of the stores in scope that a first load left unread (``Catalog.partial``):
    # the answer is partial, and says so.
    unread: int = 0

    @property
    def memories(self) -> dict[str, Memory]:
        return self.view.memories

    @property
    def graph(self) -> Graph:
        return self.view.graph

    @property
    def catalogs(self) -> list[Catalog]:
        return self.view.catalogs

    def find(self, prefix: str, *, field_name: str | None = None) -> Memory:
        """The memory a full id or unique prefix names in the stores in scope (as
        ``Workspace.find``, with the same errors)."""
        return find([*self.catalogs, *self.elsewhere], prefix, field_name=field_name)


def open_scope(ws: Workspace, include_global: bool = True, params: ReadParams | None = None, *,
               find_anywhere: bool = False, include_shared: bool = True, wanted: Wanted | None = None) -> Scope:
    """The stores ``ws`` reads (the global one unless ``include_global`` is false, the shared
    ones attached for it unless ``include_shared`` is false) with their
    catalogs and indexes brought up to date, under ``params`` (None: the read settings of
    ``ws.config``, whose unusable entries become warnings). ``find_anywhere``: ``Scope.find``
    also resolves ids in the stores left out. ``wanted``: what the read looks for, when it may
    answer from part of a store whose first load has many files to parse (``Catalog.refresh``;
    ``Scope.unread`` then counts the files left unread)."""
    p, unusable = (params, []) if params is not None else read_settings(ws.config)
    # Settings config.yaml holds that memstore could not use: a read is where someone looks.
    warnings = [msg for _, msg in (*ws.config.problems, *unusable)]
    stores = {store.scope: store for store in ws.stores(include_global, include_shared)}
    indexes: list[StoreIndex] = []
    for scope in stores:
        si = store_index(ws, scope, p)
        ws.catalog(scope, wanted=wanted)  # the stat walk; skipped while the daemon's watcher vouches nothing changed
        si.refresh(walk=False)
        warnings += si.warnings
        si.warnings.clear()
        indexes.append(si)
    # A long-lived process reads far more often than the files change, and they change a few
    # at a time: the merged records and the link/utility graph follow the catalogs' deltas.
    merged = {si.store.scope: si.catalog for si in indexes}
    view = scope_view(ws.read_cache, [merged[s] for s in view_order(list(merged))]) if indexes else ScopeView([])
    elsewhere = (tuple(ws.catalog(s) for s in ws.scopes(include_shared=True) if s not in stores)
                 if find_anywhere else ())
    unread = sum(si.catalog.unread for si in indexes)
    return Scope(stores, indexes, view, p, warnings, ws.read_cache, elsewhere, ws.checkouts, checkout_cache(ws),
                 unread)


def checkout_cache(ws: Workspace) -> Path | None:
    """Where answers about the user's checkouts are kept: the global store's ``.index/``, when
    it is there (a read never creates a store)."""
    folder = ws.global_.index_dir
    return folder if folder.is_dir() and not folder.is_symlink() else None
