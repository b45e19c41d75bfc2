"""Which stores a call sees: the repo store, the shared stores attached for it and the global
store, with their catalogs.

Resolved once at the edge from the working directory, ``--store`` and the environment.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .. import gitops
from ..errors import NoStore
from .catalog import Catalog, Wanted, find
from .config import Config, load_config, own_settings, repo_checkouts, shared_settings
from .disk import SHARED_PREFIX, STORE_DIRNAME, Store
from .model import Memory
from .paths import check_path
from .userkey import projection_key

T = TypeVar("T")

# Where attached shared stores are cloned, inside the global store's folder (never committed
# there: attach excludes it in the global store's .git/info/exclude).
SHARED_DIRNAME = ".shared"
# A shared store's name becomes a folder and part of a scope ("shared:NAME"): plain, short, no
# dots first (nothing hidden, no "..").
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")


def valid_shared_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name))


@dataclass
class Workspace:
    repo: Store | None
    global_: Store
    config: Config
    _catalogs: dict[str, Catalog] = field(default_factory=dict)
    # write_mode as the user's own settings say (the global config.yaml, MEMSTORE_WRITE_MODE):
    # whether a global memory waits for approval. A repo's config comes with a clone and may
    # not waive the approval of what reaches every other repo of this user.
    global_write_mode: str = "review"
    # Index projections per store (memstore.read.indexes owns them; kept here so a long-lived
    # process such as the daemon reuses them across calls).
    indexes: dict[str, Any] = field(default_factory=dict)
    read_cache: dict[str, Any] = field(default_factory=dict)  # what a read keeps for the next (read.scope)
    # Set by a process with a file watcher (the daemon): a store's change counter, or None when
    # the store is not watched. While the counter stands where it stood at this workspace's last
    # stat walk of the store, the walk is skipped (SPEC §5: the watcher keeps the index hot so
    # the freshness check finds nothing to do). Unset: every call walks.
    change_counter: Callable[[Store], int | None] | None = None
    change_paths: Callable[[Store, int], set[str] | None] | None = None
    # Long-lived processes keep projections in memory and save them with ``flush()``; the files
    # stay the truth, so an unsaved projection only costs the next process some catching up.
    defer_saves: bool = False
    # Seconds a read may wait for memories to be embedded before it answers with the keyword
    # lane standing in for the rest (``partial``); None: it waits for all (an in-process call,
    # which has no later moment to embed them in). ``progress`` reports the embedding.
    embed_wait: float | None = None
    # Set by the daemon: entered while a write waits for its store's write lock (another process
    # writing), letting go of the stores it holds so other requests go on meanwhile.
    write_wait: Callable[[], AbstractContextManager[object]] | None = None
    progress: Callable[[Any, int, int], None] | None = None
    _walked_at: dict[str, int] = field(default_factory=dict)
    # Files this workspace created since its last look at each store: re-read at the next look
    # even when a watcher has not reported them yet (it does so a few milliseconds later).
    _written: dict[str, set[str]] = field(default_factory=dict)
    _watcher: Any = None
    # The key of the user whose environment opened the workspace (memstore.store.userkey): what
    # its indexes load from .index/ must carry its seal. The daemon opens a client's workspace
    # with the client's environment, so both seal alike.
    key: bytes = field(default_factory=projection_key, repr=False)  # a secret: never in a log line
    # A process that holds several workspaces at once (the daemon: one per repo, per settings)
    # gives them one registry, so each store has one catalog and one index whichever workspaces
    # read it: two projections of one store each took the other's saves for damage and rebuilt
    # ("keyword index was damaged"), as two repos did with the global store. The holder then
    # lets one request at a time use a store. None: this workspace's own.
    projections: dict[tuple[Any, ...], Any] | None = field(default=None, repr=False)
    # The shared stores this workspace sees (name -> store, scope "shared:NAME"): clones under
    # the global store's .shared/, filtered by the user's own ``shared:`` setting. Read-only.
    shared_stores: dict[str, Store] = field(default_factory=dict)
    # repository name -> the user's checkout of it (``repos:`` of the user's own config.yaml),
    # against which ``repo:`` evidence is checked (git/stale.check_repo_refs).
    checkouts: dict[str, Path] = field(default_factory=dict)

    def store(self, scope: str) -> Store:
        if scope == "global":
            return self.global_
        if scope.startswith(SHARED_PREFIX):
            found = self.shared_stores.get(scope.removeprefix(SHARED_PREFIX))
            if found is None:
                raise NoStore(f"no shared store {scope.removeprefix(SHARED_PREFIX)!r} is attached for this repo",
                              hint="see `memstore attached`")
            return found
        if self.repo is None:
            raise NoStore(
                "not inside a git repository, so there is no repo store",
                hint="run inside a git repository (git init), pass --store DIR, or use the global store "
                "(--global for init, --scope global for a write)",
            )
        return self.repo

    def stores(self, include_global: bool = True, include_shared: bool = False) -> list[Store]:
        """The stores that exist: repo, then shared (only when asked: a shared store is someone
        else's, so checks, episodes and write judgment never walk it), then global."""
        out = [s for s in (self.repo,) if s is not None and s.exists()]
        if include_shared:
            out += [s for s in self.shared_stores.values() if s.exists()]
        if include_global and self.global_.exists() and (self.repo is None or self.global_.root != self.repo.root):
            out.append(self.global_)
        return out

    def catalog(self, scope: str, *, refresh: bool = True, wanted: Wanted | None = None) -> Catalog:
        """The catalog of ``scope``'s store, brought up to date unless ``refresh`` is false.
        ``wanted``: a read's (``Catalog.refresh``), whose first load may leave files unread
        (and which, while some are, parses those that may hold what it looks for); any other
        call finds the catalog complete: a load a read left partial is completed first, since a
        write's judgment, ``check``, links and ids need every file."""
        store = self.store(scope)
        cat = self._catalogs.get(scope)
        if cat is None or cat.store.root != store.root:
            cat = self.shared("catalog", store, lambda: Catalog(store, self.key))
            self._catalogs[scope] = cat
            self._walked_at.pop(scope, None)
        cat.store = store  # shared, it parses under the settings of the workspace using it now
        if self.defer_saves:
            cat.hold_saves()
        if cat.partial:
            # Another read parses what it looks for and leaves the rest to the daemon's work
            # after the reply; anything else needs every file.
            cat.read_wanted(wanted) if wanted is not None else cat.complete()
        if refresh and store.exists():
            own = self._written.pop(scope, set())
            counter = self.change_counter(store) if self.change_counter is not None else None
            last = self._walked_at.get(scope)
            if counter is None or last != counter:
                # The watcher may know exactly which files changed since our last look; then
                # only those are re-read, not every file of the store.
                rels = self.change_paths(store, last) if self.change_paths and last is not None else None
                if rels is not None:
                    cat.refresh_paths(rels | own, wanted=wanted)
                else:
                    cat.refresh(wanted=wanted)
                if counter is not None:
                    self._walked_at[scope] = counter
            elif own:
                cat.refresh_paths(own)
        return cat

    def shared(self, what: str, store: Store, make: Callable[[], T]) -> T:
        """The one ``what`` (a catalog, an index) of ``store`` in ``projections``, made by ``make``
        the first time; ``make()`` alone without a registry. Kept apart only by this user's key
        (what seals ``.index/``): settings that differ between workspaces are applied by the
        caller on each use (``StoreIndex.use_bm25``; a catalog parses under the caps of the
        workspace using it)."""
        if self.projections is None:
            return make()
        key = (what, str(store.root), hashlib.sha256(self.key).hexdigest())
        obj = self.projections.get(key)
        if obj is None:
            obj = self.projections[key] = make()
        return obj

    def wrote(self, store: Store, path: Path) -> None:
        """``path`` was just created in ``store`` through this workspace."""
        try:
            rel = path.resolve().relative_to(store.root).as_posix()
        except (OSError, ValueError):
            return
        self._written.setdefault(store.scope, set()).add(rel)

    def watch(self) -> None:
        """Watch this workspace's stores (inotify, via watchdog) for as long as it lives, so
        its reads skip the stat walk of every file (~0.5-1 s at 100k memories) and re-read
        only the files that changed. For a long-lived program that imports memstore; a change
        by another process is then visible once the watcher reports it (milliseconds), not
        at the very next call. ``close()`` stops it. The daemon has its own shared watcher."""
        if self._watcher is not None:
            return
        from .watch import Watcher

        watcher = Watcher(lambda roots: None)
        self._watcher = watcher
        # A store that does not exist yet is walked until it does, then watched.
        self.change_counter = lambda store: watcher.counter(store.root) if watcher.watch(store.root) else None
        self.change_paths = lambda store, n: watcher.changes_since(store.root, n)

    def close(self) -> None:
        """Stop the watcher ``watch()`` started; reads walk the stores again."""
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
            self.change_counter = self.change_paths = None
            self._walked_at.clear()

    def flush(self) -> None:
        """Save every projection held back by ``defer_saves``."""
        for save in self.flush_later():
            save()

    def flush_later(self) -> list[Callable[[], None]]:
        """``flush`` in two steps: what to save is taken now, under the caller's lock, and the
        returned functions write it without that lock (seconds at 100k memories). Run them
        soon, in order, and not in a thread that then indexes this workspace's stores: until
        each index's function has run, its store's index lock is held."""
        # The indexes first: each holds its store's index lock until written (a read that has
        # changes to index waits for it), the catalogs hold nothing.
        saves = [si.flush_later() for si in self.indexes.values()]
        saves += [cat.flush_later() for cat in self._catalogs.values()]
        return [save for save in saves if save is not None]

    def scopes(self, include_global: bool = True, include_shared: bool = False) -> list[str]:
        return [s.scope for s in self.stores(include_global, include_shared)]

    def find(self, prefix: str, scopes: list[str] | None = None, *, field_name: str | None = None) -> Memory:
        """Resolve a full id or a unique prefix (≥ 6 chars) across the given stores (default:
        every store in scope, shared ones included)."""
        return find(self._refreshed(scopes or self.scopes(include_shared=True)), prefix, field_name=field_name)

    def _refreshed(self, scopes: list[str]) -> Iterator[Catalog]:
        """The catalogs of ``scopes`` brought up to date, one at a time (lazily: ``find`` refuses
        a short id before any store is looked at), skipping a scope with no store."""
        for scope in scopes:
            try:
                yield self.catalog(scope)
            except NoStore:
                continue


def global_store_path(env: Mapping[str, str]) -> Path:
    home = env.get("MEMSTORE_HOME")
    if home:
        check_path(home, "MEMSTORE_HOME")  # the daemon takes it from its client's request
    return Path(home).expanduser() if home else Path("~").expanduser() / STORE_DIRNAME


def require_store_dir(store_dir: Path | str | None, cwd: Path | None = None,
                      env: Mapping[str, str] | None = None) -> None:
    """Refuse a ``--store`` (or MEMSTORE_STORE) folder that does not exist: read as an empty
    store, a typo in the path would look like a memory with nothing in it."""
    env = os.environ if env is None else env
    given = store_dir or env.get("MEMSTORE_STORE") or None
    if not given:
        return
    check_path(str(given), "--store" if store_dir else "MEMSTORE_STORE")
    path = Path(given).expanduser()
    path = path if path.is_absolute() else (cwd or Path.cwd()) / path
    if not path.is_dir():
        source = "--store" if store_dir else "MEMSTORE_STORE"
        raise NoStore(f"no store at {given} ({source}): the folder does not exist", field="store",
                      hint="check the path, or create the store with `memstore --store DIR init`")


def open_workspace(
    cwd: Path | None = None,
    store_dir: Path | str | None = None,
    env: Mapping[str, str] | None = None,
) -> Workspace:
    """The stores a command at ``cwd`` sees. ``store_dir`` (or MEMSTORE_STORE) replaces the
    repo store; otherwise it is ``.memory/`` at the root of the enclosing git work tree."""
    env = os.environ if env is None else env
    # A cwd or store a request names (the daemon's clients, an agent hook's payload) is bounded
    # before it is resolved: resolving is quadratic in a path's length (store/paths.py).
    if cwd is not None:
        check_path(str(cwd), "cwd")
    cwd = (cwd or Path.cwd()).resolve()
    store_dir = store_dir or env.get("MEMSTORE_STORE") or None
    if store_dir:
        check_path(str(store_dir), "--store / MEMSTORE_STORE")
    repo_root: Path | None
    if store_dir:
        path = Path(store_dir).expanduser()
        repo_root = (path if path.is_absolute() else cwd / path).resolve()
    else:
        top = gitops.toplevel(cwd)
        repo_root = top / STORE_DIRNAME if top is not None else None
    global_root = global_store_path(env).resolve()
    # A repo's own .memory must be a real folder (an explicit --store may be a link on purpose).
    linked = store_dir is None and repo_root is not None and repo_root.is_symlink()
    config = load_config(None if linked else repo_root, global_root, env)
    repo = Store.at(repo_root, "repo", config, refuse_link=linked) if repo_root is not None else None
    if repo is not None and repo.root == global_root:
        repo = None  # --store pointing at the global store: treat it as the global store only
    own = load_config(None, global_root, env).write_mode if repo is not None else config.write_mode
    own_file = own_settings(global_root)
    return Workspace(repo=repo, global_=Store.at(global_root, "global", config), config=config,
                     key=projection_key(env), global_write_mode=own,
                     shared_stores=shared_in_scope(global_root, repo, config, own_file),
                     checkouts=repo_checkouts(own_file))


def view_order(scopes: list[str]) -> list[str]:
    """``scopes`` in the order their records are merged, a later store winning an id: shared
    stores first, so an id a shared store reuses never hides a repo or personal memory (as the
    global store's record already wins over a repo's that reuses its id)."""
    return sorted(scopes, key=lambda scope: not scope.startswith(SHARED_PREFIX))


def shared_root(global_root: Path) -> Path:
    return global_root / SHARED_DIRNAME


def attached_names(global_root: Path) -> list[str]:
    """The shared stores cloned under ``global_root``: real folders with a valid name (a link
    or anything else found there is not a store memstore made)."""
    base = shared_root(global_root)
    if base.is_symlink() or not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir()
                  if valid_shared_name(p.name) and not p.is_symlink() and p.is_dir())


def shared_in_scope(global_root: Path, repo: Store | None, config: Config,
                    own: Mapping[str, Any]) -> dict[str, Store]:
    """The attached shared stores whose ``repos`` globs (the user's own ``shared:`` setting)
    match the repo's origin URL or its work tree path; a store the setting does not name is
    seen everywhere. Each parses under the user's settings (``config``): its own config.yaml is
    never read. ``own``: the user's config.yaml as ``own_settings`` parsed it."""
    names = attached_names(global_root)
    if not names:
        return {}
    rules = shared_settings(own)
    keys: list[str] | None = None
    out: dict[str, Store] = {}
    for name in names:
        globs = rules.get(name)
        if globs is not None:
            if keys is None:
                keys = _repo_keys(repo)
            if not any(fnmatch.fnmatchcase(key, glob) for key in keys for glob in globs):
                continue
        # A clone's root is its work tree (attach made it so): no git call to find it, on every call.
        root = (shared_root(global_root) / name).resolve()
        out[name] = Store(root=root, scope=SHARED_PREFIX + name, config=config, worktree=root)
    return out


def _repo_keys(repo: Store | None) -> list[str]:
    """What a ``repos`` glob is matched against: the repo's origin URL and its work tree path."""
    if repo is None or repo.worktree is None:
        return []
    url = gitops.config_get("remote.origin.url", repo.worktree)
    return [str(repo.worktree), *([url] if url else [])]
