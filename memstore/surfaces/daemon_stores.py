"""The workspaces the daemon keeps warm: which one a request belongs to, the locks that let one
request at a time use a store, keeping them fresh as the watcher reports changes, and dropping
the ones unused too long.

A daemon lives for hours and serves every repo the user opens, so this is where its memory goes:
each kept store holds its catalog and vectors. Workspaces share a store's catalog and index
(every repo's workspace reads the global store), so the sharing, the locking and the eviction
are decided here, in one place, whichever request or background thread comes through.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..store.config import ENV_KEYS
from ..store.disk import STORE_DIRNAME

if TYPE_CHECKING:
    from ..store.watch import Watcher
    from .loadgc import LoadGC

log = logging.getLogger("memstore.surfaces.daemon")

GIT_CACHE_SECONDS = 30.0  # `git init` in a directory seen before becomes visible this fast

# (repo store root, global root, effective config): what makes two requests one workspace
Key = tuple[str, str, str]


def entry_roots(ws: Any) -> list[Path]:
    return [s.root for s in (ws.repo, *ws.shared_stores.values(), ws.global_) if s is not None]


class StoresLock:
    """The locks of a workspace's stores, taken in one order. Workspaces share each store's
    catalog and index (every repo's workspace reads the global store; an edited config or
    another shell's settings make a second workspace of the same repo), so one request at a
    time may use a store, whichever workspace it came through."""

    def __init__(self, locks: list[threading.Lock]) -> None:
        self._locks = locks

    def acquire(self, blocking: bool = True) -> bool:
        taken: list[threading.Lock] = []
        for lock in self._locks:
            if not lock.acquire(blocking):
                for held in reversed(taken):
                    held.release()
                return False
            taken.append(lock)
        return True

    def release(self) -> None:
        for lock in reversed(self._locks):
            lock.release()

    def __enter__(self) -> StoresLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass
class Entry:
    """One Workspace kept warm, keyed by (repo store root, global root, effective config)."""

    ws: Any
    lock: Any = field(default_factory=threading.Lock)  # a StoresLock in the daemon
    last_used: float = field(default_factory=time.monotonic)
    evicted: bool = False  # set under ``lock``: background work that still holds it skips it
    embedding: bool = False  # a thread embeds this workspace's memories that have no vector yet
    read_wait: float = 1.0  # daemon.read_wait_seconds of its config
    loaded: bool = False  # its first request (the catalog parsed, the indexes opened) has run
    env: tuple[tuple[str, str], ...] = ()  # the settings' variables (config.ENV_KEYS) of its requests
    let_go_count: int = 0  # requests that let go of ``lock`` for a while and take it again (let_go)

    def roots(self) -> list[Path]:
        return entry_roots(self.ws)

    @contextlib.contextmanager
    def let_go(self) -> Iterator[None]:
        """Inside ``using``: release the workspace's stores for a wait on something outside the
        daemon (another process's write lock), so no other request waits on that too; taken
        again after. Meanwhile the workspace counts as in use: never evicted under the request."""
        self.let_go_count += 1
        self.lock.release()
        try:
            yield
        finally:
            self.lock.acquire()
            self.let_go_count -= 1

    @contextlib.contextmanager
    def using(self) -> Iterator[None]:
        """Hold the workspace for a request; its idle time counts from when the request ends."""
        with self.lock:
            try:
                yield
            finally:
                self.last_used = time.monotonic()


def request_env(env: dict[str, str]) -> dict[str, str]:
    """The client's environment as open_workspace should see it. The global store defaults to
    ``$HOME/.memory`` of the *client*: the daemon's own HOME may differ (tests, sudo -u)."""
    env = {str(k): str(v) for k, v in env.items()}
    if not env.get("MEMSTORE_HOME") and env.get("HOME"):
        env["MEMSTORE_HOME"] = str(Path(env["HOME"]) / STORE_DIRNAME)
    return env


class Workspaces:
    """Every workspace the daemon keeps warm, the projections (catalog, index) they share per
    store, and the stores' locks. ``watcher`` watches their stores; ``gc`` is the daemon's
    collector pause, thawed when a workspace goes so what it held can be freed."""

    def __init__(self, watcher: Watcher, gc: LoadGC, evict_seconds: float = 600.0,
                 progress: Callable[[Any, int, int], None] | None = None) -> None:
        self.watcher = watcher
        self.progress = progress  # an embedding progress bar, when run in the foreground on a terminal
        # A workspace unused this long is dropped with its indexes: the daemon lives for hours
        # and serves every repo the user opens, and each kept store holds its vectors in memory.
        self.evict_seconds = evict_seconds
        self.evicted = 0
        self.entries: dict[Key, Entry] = {}
        self.lock = threading.Lock()  # guards ``entries``
        # (cwd, --store, environment) -> (entry key, the paths that decided it, their marks then)
        self._resolved: dict[tuple[object, ...], tuple[Key, tuple[Path, ...], tuple[object, ...]]] = {}
        # One catalog and one index per store for every workspace (Workspace.projections), and
        # the lock that lets one request at a time use each store (StoresLock; never dropped, so
        # a store has one lock however its workspaces come and go).
        self._projections: dict[tuple[Any, ...], Any] = {}
        self._store_locks: dict[str, threading.Lock] = {}
        self._gc = gc
        self._git_cache_at = time.monotonic()

    def all(self) -> list[Entry]:
        with self.lock:
            return list(self.entries.values())

    def _counter(self, store: Any) -> int | None:
        return self.watcher.counter(store.root)

    def entry_for(self, msg: dict[str, Any]) -> Entry:
        """The warm workspace for a request's cwd, ``--store`` and environment, opened if new."""
        from .. import gitops
        from ..store.workspace import open_workspace, shared_root

        if time.monotonic() - self._git_cache_at > GIT_CACHE_SECONDS or len(self._resolved) > 256:
            gitops.toplevel.cache_clear()
            self._resolved.clear()  # resolved through the toplevel cache: no older than it
            self._git_cache_at = time.monotonic()
        env = request_env(msg.get("env") or {})
        asked = (str(msg.get("cwd") or "/"), str(msg.get("store") or ""), tuple(sorted(env.items())))
        known = self._resolved.get(asked)
        if known is not None and self._marks(known[1]) == known[2]:
            # Nothing that decides this workspace changed since it was resolved for the same
            # request: no opening (config files read and parsed, paths resolved) just to key it.
            with self.lock:
                entry = self.entries.get(known[0])
                if entry is not None:
                    entry.last_used = time.monotonic()
            if entry is not None:
                for root in entry.roots():
                    self.watcher.watch(root)
                return entry
        ws = open_workspace(cwd=Path(msg.get("cwd") or "/"), store_dir=msg.get("store") or None, env=env)
        # The settings in force, and what the config files held that could not be used (the
        # read warnings name it): an edit that only adds or fixes a bad value changes no setting.
        key = (str(ws.repo.root) if ws.repo else "", str(ws.global_.root),
               json.dumps([ws.config.data, ws.config.problems, sorted(ws.shared_stores), sorted(ws.checkouts.items())],
                          sort_keys=True, default=str))
        stale = False
        with self.lock:
            entry = self.entries.get(key)
            if entry is None:
                ws.change_counter = self._counter
                ws.change_paths = lambda store, n: self.watcher.changes_since(store.root, n)
                ws.defer_saves = True  # saved by the idle flush when quiet, not after every write
                ws.progress = self.progress
                ws.projections = self._projections
                # A shared store is one store whichever repos read it: its lock, like its index, is one.
                roots = sorted({str(root) for root in entry_roots(ws)})
                locks = StoresLock([self._store_locks.setdefault(r, threading.Lock()) for r in roots])
                entry = Entry(ws, lock=locks, env=tuple(sorted((k, v) for k, v in env.items() if k in ENV_KEYS)))
                entry.read_wait = ws.config.read_wait
                ws.embed_wait = entry.read_wait
                ws.write_wait = entry.let_go
                # The same stores and variables with another config: a config.yaml was edited.
                # The old workspace must go now, not when it has idled out: both would keep
                # the same .index/ current, each taking the other's writes for damage.
                stale = any(k[:2] == key[:2] and e.env == entry.env for k, e in self.entries.items())
                self.entries[key] = entry
                log.info("workspace opened: repo=%s global=%s", key[0] or "-", key[1])
            entry.last_used = time.monotonic()  # under the lock eviction takes: never evicted in use
        if stale:
            self.retire(lambda k, e: "as its config.yaml changed"
                        if k != key and k[:2] == key[:2] and e.env == entry.env else None)
        for root in entry.roots():
            self.watcher.watch(root)
        # .shared/ changes when a store is attached or detached (a new workspace sees it).
        decisive = (*(p for s in (ws.repo, ws.global_) if s is not None for p in (s.root, s.root / "config.yaml")),
                    shared_root(ws.global_.root))
        self._resolved[asked] = (key, decisive, self._marks(decisive))
        return entry

    def _marks(self, paths: tuple[Path, ...]) -> tuple[object, ...]:
        """What open_workspace's answer rests on besides the request and git's toplevel: each
        store root and config file as it is now (lstat: created, removed, replaced by a link,
        edited) and the watcher's count of changes in the watched roots."""
        marks: list[object] = []
        for path in paths:
            try:
                st = os.lstat(path)
            except OSError:
                marks.append(None)
            else:
                marks.append((st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
            marks.append(self.watcher.counter(path))
        return tuple(marks)

    def refresh(self, roots: set[Path], then: Callable[[Entry], None]) -> None:
        """Refresh the catalog and indexes of every workspace that holds a changed store, so the
        next read finds nothing to do; ``then`` runs for each workspace once it is refreshed
        (the daemon embeds what a pull brought)."""
        from ..read.indexes import store_index
        from ..read.tuning import params_from_config

        for entry in self.all():
            ws = entry.ws
            for store in ws.stores(include_shared=True):
                if store.root not in roots:
                    continue
                self.watcher.watch(store.root)  # a store re-created by a checkout is watched again
                t0 = time.perf_counter()
                with entry.lock:
                    if entry.evicted:
                        continue
                    ws.catalog(store.scope)
                    if store.scope in ws.indexes:  # only stores that were read have indexes to keep hot
                        store_index(ws, store.scope, params_from_config(ws.config)).refresh(walk=False)
                log.info("refreshed %s in %.0f ms", store.root, (time.perf_counter() - t0) * 1000)
            then(entry)

    def evict_idle(self, now: float) -> int:
        """Forget the workspaces unused for ``evict_seconds``: their projections are saved, their
        indexes closed, and stores no kept workspace holds are no longer watched. The next
        request for one opens it again from disk, as after a restart. Returns how many went."""
        return self.retire(lambda k, e: f"after {now - e.last_used:.0f} s unused"
                           if now - e.last_used > self.evict_seconds else None)

    def retire(self, why_gone: Callable[[Any, Entry], str | None]) -> int:
        """Forget the workspaces ``why_gone`` gives a reason for (it is asked under the lock
        ``entry_for`` takes, so a workspace a request just picked is never among them), as
        ``evict_idle`` describes. One in use (its lock held) stays, marked unused, and goes with
        the next idle eviction."""
        with self.lock:
            gone: list[tuple[Entry, str]] = []
            for key, entry in list(self.entries.items()):
                why = why_gone(key, entry)
                if why is None:
                    continue
                # A workspace in use (its lock held, or let go for a wait: a request counts
                # itself before it lets go) stays; entry_for refreshes last_used first.
                taken = entry.lock.acquire(blocking=False)
                if taken and entry.let_go_count:
                    entry.lock.release()
                    taken = False
                if taken:
                    del self.entries[key]
                    entry.evicted = True
                    gone.append((entry, why))
                else:
                    entry.last_used = float("-inf")
            kept = {root for entry in self.entries.values() for root in entry.roots()}
        for entry, why in gone:
            try:
                saves = entry.ws.flush_later()
                for save in saves:
                    save()
            except Exception:  # an unsaved projection is rebuilt by the next reader
                log.exception("saving an evicted workspace failed")
            # The projections of stores no kept workspace reads go with it; the rest stay shared.
            # Decided under the lock entry_for takes, while this workspace's stores are held.
            with self.lock:
                live = {str(r) for e in self.entries.values() for r in e.roots()}
                dropped = [self._projections.pop(k) for k in list(self._projections) if k[1] not in live]
            for obj in dropped:
                if hasattr(obj, "close"):
                    with contextlib.suppress(Exception):
                        obj.close()
            entry.ws.indexes.clear()
            entry.lock.release()
            for root in set(entry.roots()) - kept:
                self.watcher.unwatch(root)
            log.info("workspace evicted %s: %s", why, ", ".join(str(r) for r in entry.roots()))
        if gone:
            self._gc.thaw()  # what the evicted workspaces held in cycles can be freed again
        self.evicted += len(gone)
        return len(gone)

    def close_indexes(self) -> None:
        """Close every kept index (once each: workspaces share them), at the daemon's exit."""
        with self.lock:
            indexes = {id(si): si for entry in self.entries.values() for si in entry.ws.indexes.values()}
        for si in indexes.values():
            with contextlib.suppress(Exception):
                si.close()
