"""``memstore serve``: the per-user daemon (SPEC §6).

It keeps the embedding model and every opened store's Workspace (catalogs + indexes) in memory,
watches those stores (memstore.store.watch) and refreshes their indexes in the background, and
answers CLI requests over a Unix socket (0600, in a 0700 directory) with exactly the library
functions the in-process CLI calls, so both paths give the same answers.

Life cycle: a lifetime lock (``daemon.lock``) makes it one daemon per runtime directory; the
model is loaded before the socket is bound, so a live socket always means a warm daemon; it
exits after ``idle_seconds`` without requests, on ``stop``, or when a client of another code
version asks (the client then starts a fresh one).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import gc
import json
import logging
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MemstoreError, StoreError, error_answer
from ..store.config import ENV_KEYS
from ..store.disk import STORE_DIRNAME
from . import client
from .cliargs import ArgvError
from .loadgc import LoadGC
from .wire import peer_uid

log = logging.getLogger("memstore.surfaces.daemon")

LOCK_WAIT = 15.0  # a replaced daemon may take a moment to exit and release the lock
RECV_TIMEOUT = 30.0  # a client that connects and never finishes its request is dropped
GIT_CACHE_SECONDS = 30.0  # `git init` in a directory seen before becomes visible this fast
RESYNC_SECONDS = 120.0  # safety net: re-walk watched stores even if inotify lost events
FLUSH_SECONDS = 5.0  # save projections held in memory this long after the last check
FILL_SLICE = 32  # neighbour lists filled per step when idle: ~10 ms at 100k memories, then a look for requests
# Embedding in the background after a clone or a big pull goes in slices of this many seconds,
# each under the workspace lock: a request waits at most one slice for it.
EMBED_SLICE = 0.25


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

    def roots(self) -> list[Path]:
        return [s.root for s in (self.ws.repo, self.ws.global_) if s is not None]

    @contextlib.contextmanager
    def using(self) -> Iterator[None]:
        """Hold the workspace for a request; its idle time counts from when the request ends."""
        with self.lock:
            try:
                yield
            finally:
                self.last_used = time.monotonic()


def _rss_mb() -> dict[str, float]:
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out["rss_mb" if line.startswith("VmRSS") else "peak_rss_mb"] = round(int(line.split()[1]) / 1024, 1)
    return out


def request_env(env: dict[str, str]) -> dict[str, str]:
    """The client's environment as open_workspace should see it. The global store defaults to
    ``$HOME/.memory`` of the *client*: the daemon's own HOME may differ (tests, sudo -u)."""
    env = {str(k): str(v) for k, v in env.items()}
    if not env.get("MEMSTORE_HOME") and env.get("HOME"):
        env["MEMSTORE_HOME"] = str(Path(env["HOME"]) / STORE_DIRNAME)
    return env


class Daemon:
    def __init__(self, rdir: Path, idle_seconds: float, evict_seconds: float = 600.0,
                 progress: Callable[[Any, int, int], None] | None = None, warm: str | None = None) -> None:
        self.rdir = rdir
        self.warm = warm  # a directory whose stores are opened at start and embedded (``serve --warm``)
        self.progress = progress  # an embedding progress bar, when run in the foreground on a terminal
        self.sock_path = rdir / client.SOCKET_NAME
        self.idle_seconds = idle_seconds
        # A workspace unused this long is dropped with its indexes: the daemon lives for hours
        # and serves every repo the user opens, and each kept store holds its vectors in memory.
        self.evict_seconds = evict_seconds
        self.evicted = 0
        self.version = client.code_version()
        self.started = time.time()
        self.last_activity = time.monotonic()
        self.active = 0
        self.requests = 0
        self.entries: dict[tuple[str, str, str], Entry] = {}
        # (cwd, --store, environment) -> (entry key, the paths that decided it, their marks then)
        self._resolved: dict[tuple[object, ...], tuple[tuple[str, str, str], tuple[Path, ...], tuple[object, ...]]] = {}
        self._entries_lock = threading.Lock()
        # One catalog and one index per store for every workspace (Workspace.projections), and
        # the lock that lets one request at a time use each store (StoresLock; never dropped, so
        # a store has one lock however its workspaces come and go).
        self._projections: dict[tuple[Any, ...], Any] = {}
        self._store_locks: dict[str, threading.Lock] = {}
        # The shared indexes a background thread embeds now (ids, under ``_state``): every repo's
        # workspace holds the global store's one index, and two threads must not embed it twice.
        self._embedding_ids: set[int] = set()
        self._stop = threading.Event()
        self._state = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time
        self._filling = threading.Lock()  # one idle fill at a time
        self._gc = LoadGC()
        self._lock_fd: int | None = None
        self._sock: socket.socket | None = None
        self._sock_ino: int | None = None
        self._git_cache_at = time.monotonic()
        from ..store.watch import Watcher

        self.watcher = Watcher(self._on_change)

    # -- workspaces ------------------------------------------------------------------------------
    def _counter(self, store: Any) -> int | None:
        return self.watcher.counter(store.root)

    def entry_for(self, msg: dict[str, Any]) -> Entry:
        from .. import gitops
        from ..store.workspace import open_workspace

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
            with self._entries_lock:
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
               json.dumps([ws.config.data, ws.config.problems], sort_keys=True, default=str))
        stale = False
        with self._entries_lock:
            entry = self.entries.get(key)
            if entry is None:
                ws.change_counter = self._counter
                ws.change_paths = lambda store, n: self.watcher.changes_since(store.root, n)
                ws.defer_saves = True  # saved by flush_all() when quiet, not after every write
                ws.progress = self.progress
                ws.projections = self._projections
                roots = sorted({str(s.root) for s in (ws.repo, ws.global_) if s is not None})
                locks = StoresLock([self._store_locks.setdefault(r, threading.Lock()) for r in roots])
                entry = Entry(ws, lock=locks, env=tuple(sorted((k, v) for k, v in env.items() if k in ENV_KEYS)))
                entry.read_wait = ws.config.read_wait
                ws.embed_wait = entry.read_wait
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
        decisive = tuple(p for s in (ws.repo, ws.global_) if s is not None for p in (s.root, s.root / "config.yaml"))
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

    def _on_change(self, roots: set[Path]) -> None:
        """Watcher callback (debounced): refresh the catalog and indexes of every workspace that
        holds a changed store, so the next read finds nothing to do."""
        from ..read.indexes import store_index
        from ..read.tuning import params_from_config

        with self._entries_lock:
            entries = list(self.entries.values())
        for entry in entries:
            ws = entry.ws
            for store in ws.stores():
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
            self.embed_behind(entry)  # a pull that brought many memories: their vectors, in slices

    # -- requests --------------------------------------------------------------------------------
    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        verb = msg.get("verb")
        if verb == "ping":
            return {"ok": True, "pid": os.getpid(), "version": self.version}
        if verb == "status":
            return self.status()
        if verb == "stop":
            log.info("stop requested")
            self._stop.set()
            return {"ok": True, "stopping": True, "pid": os.getpid()}
        if verb not in client.FORWARDED_VERBS and verb != "cli":
            return {"answer": {"ok": False, "error": {"code": "usage", "message": f"unknown verb {verb!r}"}},
                    "exit_code": 2}
        if msg.get("version") != self.version:
            # The client runs other code (an upgrade or an edited checkout): answers could differ.
            log.info("client version %s != %s: exiting so a fresh daemon starts", msg.get("version"), self.version)
            self._stop.set()
            return {"restart": True, "version": self.version}
        if verb == "cli":
            return self._cli(msg)
        answer, code = self._answer(verb, lambda: self._run(verb, msg))
        return {"answer": answer, "exit_code": code}

    def _answer(self, what: object, run: Callable[[], tuple[dict[str, Any], int]]) -> tuple[dict[str, Any], int]:
        """The daemon's one error boundary: a MemstoreError keeps its code, anything else is
        logged and answered as ``unexpected``; the daemon lives on."""
        try:
            return run()
        except ArgvError:
            raise  # not a failure: the client runs these arguments in-process
        except Exception as exc:
            if not isinstance(exc, MemstoreError):
                log.error("unexpected error on %s:\n%s", what, traceback.format_exc())
            return error_answer(exc)

    def _cli(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Run a client's argv (``memstore.surfaces.entry``) and answer with the exact output the CLI
        would print in-process."""
        from ..store.workspace import require_store_dir
        from . import cliargs, output

        argv, stdin = msg.get("argv"), msg.get("stdin")
        if not isinstance(argv, list) or not all(isinstance(x, str) for x in argv):
            return {"fallback": True}
        src = cliargs.Inputs(cwd=Path(msg.get("cwd") or "/"), stdin=stdin if isinstance(stdin, str) else None)
        calls: list[cliargs.RemoteCall] = []

        def run() -> tuple[dict[str, Any], int]:
            call = cliargs.remote_call(argv, src)
            calls.append(call)
            require_store_dir(call.store, src.cwd, msg.get("env") or {})
            return self._run(call.verb, {**msg, "request": call.request, "args": call.args, "store": call.store})

        try:
            answer, code = self._answer(argv[:1], run)
        except ArgvError:
            return {"fallback": True}
        as_json = (calls[0].json_out if calls else "--json-out" in argv) or not msg.get("tty")
        if code:
            err, out = output.format_error(answer, as_json=as_json)
            return {"stdout": out, "stderr": err, "exit_code": code}
        render: output.Render = calls[0].render
        if calls[0].verb == "context":
            from . import render as renders

            render = renders.context
        text = output.format_answer(answer, as_json=as_json, render=render, tty=bool(msg.get("tty")))
        return {"stdout": text, "stderr": "", "exit_code": 0}

    def _run(self, verb: str, msg: dict[str, Any]) -> tuple[dict[str, Any], int]:
        entry = self.entry_for(msg)
        if entry.loaded:
            return self._run_on(entry, verb, msg)
        self._gc.pause()
        try:
            return self._run_on(entry, verb, msg)
        finally:
            entry.loaded = True
            # Ahead of the background embedding this request may have asked for.
            self._after_reply(self._gc.settle, first=True)

    def _run_on(self, entry: Entry, verb: str, msg: dict[str, Any]) -> tuple[dict[str, Any], int]:
        from ..read.retrieve import read
        from ..verbs import api

        ws = entry.ws
        args = msg.get("args") or {}
        request = msg.get("request")
        env = msg.get("env") or {}
        episode = env.get("MEMSTORE_EPISODE") or None  # the client's, like MEMSTORE_AUTHOR
        with entry.using():
            if verb in ("read", "context"):
                # While the background embeds, a read answers at once (partial) rather than
                # spending its own second on a backlog it cannot finish.
                ws.embed_wait = 0.0 if self._embedding(entry) else entry.read_wait
                try:
                    if verb == "read":
                        return read(ws, request if isinstance(request, dict) else {}, episode=episode), 0
                    from ..verbs.guide import context

                    return context(ws, task=args.get("task"), limit=args.get("limit"), episode=episode), 0
                finally:
                    self._embed_after_reply(entry)
            if verb == "recall":  # an agent hook's per-prompt or per-file injection (agenthooks)
                from ..verbs.recall import hook
                from .agenthooks import session_context

                ws.embed_wait = 0.0 if self._embedding(entry) else entry.read_wait
                try:
                    payload = args.get("payload")
                    return hook(ws, str(args.get("event")), payload if isinstance(payload, dict) else {},
                                str(args.get("agent") or "claude"), context_text=session_context), 0
                finally:
                    self._embed_after_reply(entry)
            if verb == "show":
                return api.show(ws, args.get("id")), 0
            if verb == "list":
                return api.list_memories(ws, kind=args.get("kind"), scope=args.get("scope"),
                                         include_archived=bool(args.get("all")), limit=args.get("limit")), 0
            from ..store.episodes import default_author

            author = env.get("MEMSTORE_AUTHOR") or default_author(ws, episode)
            try:
                if verb == "write":
                    answer = api.write(ws, request if isinstance(request, dict) else {}, author=author)
                else:
                    answer = api.update(ws, request if isinstance(request, dict) else {}, author=author)
            except BaseException:
                self.watcher.bump(entry.roots())  # whatever happened, the next read walks
                raise
            finally:
                for root in entry.roots():
                    self.watcher.watch(root)
            # Our own write must be visible to the very next read, before inotify reports it:
            # by path, so that read re-reads one file rather than walking the store.
            written = _written(ws, answer)
            if written is None:
                self.watcher.bump(entry.roots())
            else:
                self.watcher.note(*written)
            return answer, 0

    # -- embedding in the background --------------------------------------------------------------
    def warm_stores(self, cwd: str) -> None:
        """Open the workspace a client read from (with the client's environment, which this
        process inherited, so its requests find this entry) and embed what has no vector yet:
        the in-process read that started this daemon answered partially and left it to us."""
        from ..read.scope import open_scope
        from ..read.tuning import params_from_config

        try:
            entry = self.entry_for({"cwd": cwd, "env": client.forwarded_env()})
            with entry.using():
                entry.ws.embed_wait = 0.0  # the catalogs and keyword indexes now; vectors in slices
                open_scope(entry.ws, True, params_from_config(entry.ws.config))
            self.embed_behind(entry)
        except Exception:  # only a head start: the first request opens the workspace anyway
            log.exception("opening %s at start failed", cwd)

    def _embed_after_reply(self, entry: Entry) -> None:
        """``embed_behind`` once this connection's answer is sent: started earlier, the encoder
        (starting its worker processes, the GIL) competes with rendering the answer the agent
        waits for."""
        self._after_reply(functools.partial(self.embed_behind, entry))  # a second start finds it under way

    def _after_reply(self, work: Callable[[], None], *, first: bool = False) -> None:
        """Run ``work`` once this connection's answer is sent (now, when not serving one)."""
        deferred: list[Callable[[], None]] | None = getattr(_serving, "after_reply", None)
        if deferred is None:
            work()
        elif first:
            deferred.insert(0, work)
        else:
            deferred.append(work)

    def _embedding(self, entry: Entry) -> bool:
        """Is any of the workspace's indexes being embedded in the background (by any thread)?"""
        with self._state:
            return entry.embedding or any(id(si) in self._embedding_ids for si in list(entry.ws.indexes.values()))

    def embed_behind(self, entry: Entry) -> None:
        """Start embedding the workspace's memories that have no vector yet (a read or a refresh
        ran out of its wait), unless that is under way already or nothing waits."""
        if not any(si.embedding_pending for si in list(entry.ws.indexes.values())):
            return
        with self._state:
            if entry.embedding or entry.evicted:
                return
            entry.embedding = True
        threading.Thread(target=self._embed_rest, args=(entry,), daemon=True).start()

    def _embed_rest(self, entry: Entry) -> None:
        """Embed what waits: every waiting text goes to the encoder at once (the worker
        processes, or this process's encoder, outside the workspace lock), and what comes back
        is put into the indexes every ``EMBED_SLICE`` under the lock, so a request waits at
        most one such step. The vectors reach the embedding cache on disk as they are put in,
        and the index is saved in the next pause."""
        from ..index.embedder import EmbedderUnavailable

        t0 = time.monotonic()
        claimed: set[int] = set()
        try:
            while not self._stop.is_set():
                with entry.lock:
                    if entry.evicted:
                        return
                    pending = [si for si in entry.ws.indexes.values() if si.embedding_pending]
                    with self._state:  # an index another workspace's thread embeds is left to it
                        waiting = [si for si in pending if id(si) in claimed or id(si) not in self._embedding_ids]
                        claimed.update(id(si) for si in waiting)
                        self._embedding_ids.update(claimed)
                    work = [si.waiting_texts() for si in waiting]
                if not waiting:
                    log.info("embedded the waiting memories in %.1f s", time.monotonic() - t0)
                    return
                texts = {key: text for part in work for key, text in part.items()}
                try:
                    self._stream(entry, waiting, texts)
                except EmbedderUnavailable:
                    texts = {}  # a refresh of its own meets the failure and goes keyword-only
                if not texts:
                    # What waits is in the embedding cache already (or the encoder failed): a
                    # slice of refresh takes it from there.
                    with entry.lock:
                        for si in waiting:
                            if not entry.evicted and si.embedding_pending:
                                si.refresh(walk=False, budget=EMBED_SLICE)
                while self._take_ready(entry, waiting):
                    time.sleep(0.005)  # the lock is not fair: a request waiting for it gets it now
        except Exception:  # reads embed what they meet themselves; the daemon lives on
            log.exception("embedding in the background failed")
        finally:
            with self._state:
                entry.embedding = False
                self._embedding_ids -= claimed

    def _stream(self, entry: Entry, waiting: list[Any], texts: dict[str, str]) -> None:
        if not texts:
            return
        keys, values = list(texts), list(texts.values())
        parts = waiting[0].embedder.encode_parts(values)
        put_at = time.monotonic()
        try:
            for idx, vecs in parts:
                part = [keys[i] for i in idx]
                for si in waiting:
                    si.offer(part, vecs)
                if self._stop.is_set() or entry.evicted:
                    return
                if time.monotonic() - put_at >= EMBED_SLICE:
                    self._take_ready(entry, waiting)
                    put_at = time.monotonic()
        finally:
            parts.close()

    def _take_ready(self, entry: Entry, waiting: list[Any]) -> bool:
        """One step of putting offered vectors into the indexes; False when none are left."""
        with entry.lock:
            if entry.evicted:
                return False
            more = False
            for si in waiting:
                more = si.take_ready() or more
            return more

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        with self._entries_lock:
            workspaces = [{"repo": k[0] or None, "global": k[1], "idle_s": round(now - e.last_used, 1),
                           "stores": _vector_stats(e), **_near_stats(e.ws)} for k, e in self.entries.items()]
        return {"ok": True, "running": True, "pid": os.getpid(), "version": self.version,
                "socket": str(self.sock_path), "uptime_s": round(time.time() - self.started, 1),
                "idle_seconds": self.idle_seconds, "evict_seconds": self.evict_seconds, "evicted": self.evicted,
                "requests": self.requests, "workspaces": workspaces,
                "watched": [str(p) for p in self.watcher.watched()], **_rss_mb(),
                "gc": {"enabled": gc.isenabled(), "frozen_objects": gc.get_freeze_count()}}

    # -- the socket --------------------------------------------------------------------------------
    def _serve_conn(self, conn: socket.socket) -> None:
        with self._state:
            self.active += 1
        _serving.after_reply = []
        try:
            with conn:
                if not _same_user(conn):
                    return
                conn.settimeout(RECV_TIMEOUT)
                try:
                    raw = client._recv_line(conn)
                except OSError:
                    return  # the client went away mid-request
                if not raw.endswith(b"\n"):
                    return  # incomplete request: the client died or gave up; nobody to answer
                try:
                    msg = json.loads(raw)
                    if not isinstance(msg, dict):
                        raise ValueError("not an object")
                except ValueError as exc:
                    reply: dict[str, Any] = {"answer": {"ok": False, "error": {
                        "code": "invalid_json", "message": f"bad daemon request: {exc}"}}, "exit_code": 2}
                else:
                    with self._state:
                        self.requests += 1
                    t0 = time.perf_counter()
                    reply = self.handle(msg)
                    log.debug("%s in %.1f ms", msg.get("verb"), (time.perf_counter() - t0) * 1000)
                with contextlib.suppress(OSError):  # a killed client cannot read its answer
                    conn.sendall(json.dumps(reply, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
        finally:
            deferred, _serving.after_reply = _serving.after_reply, None
            for work in deferred:
                try:
                    work()
                except Exception:  # e.g. the background embedding: the next read starts it again
                    log.exception("work after the reply failed")
            with self._state:
                self.active -= 1
                self.last_activity = time.monotonic()

    def _acquire_lock(self) -> bool:
        fd = os.open(self.rdir / client.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    os.close(fd)
                    return False
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd
        return True

    def _bind(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            # We hold the lifetime lock, so whatever socket file is here belongs to a dead daemon.
            self.sock_path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(self.sock_path))
        finally:
            os.umask(old)
        os.chmod(self.sock_path, 0o600)
        sock.listen(64)
        sock.settimeout(0.5)
        self._sock = sock
        self._sock_ino = self.sock_path.stat().st_ino

    def warm_up(self) -> None:
        """Load the model and the heavy modules now, so the first answer is as fast as the rest."""
        from ..index.embedder import EmbedderUnavailable, get_embedder
        from ..read import retrieve  # noqa: F401
        from ..store import schemas
        from ..verbs import api  # noqa: F401

        one_blas_thread()
        schemas.warm()
        t0 = time.perf_counter()
        try:
            get_embedder().encode(["warm up"])
        except EmbedderUnavailable as exc:
            log.warning("no embedder: reads will be keyword-only (%s)", exc)
        log.info("model loaded in %.1f s", time.perf_counter() - t0)

    def run(self) -> int:
        if not self._acquire_lock():
            log.info("another daemon holds %s; exiting", self.rdir / client.LOCK_NAME)
            return 0
        try:
            self.warm_up()
            self._bind()
            with contextlib.suppress(OSError):
                (self.rdir / "spawning").unlink()
            log.info("pid %d serving on %s (version %s, idle exit after %ss)", os.getpid(), self.sock_path,
                     self.version, self.idle_seconds)
            if self.warm:
                threading.Thread(target=self.warm_stores, args=(self.warm,), daemon=True).start()
            self._loop()
        finally:
            self.shutdown()
        return 0

    def _loop(self) -> None:
        assert self._sock is not None
        last_resync = last_flush = time.monotonic()
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                now = time.monotonic()
                with self._state:
                    idle = self.active == 0 and now - self.last_activity > self.idle_seconds
                if idle:
                    log.info("idle for %ss: exiting", self.idle_seconds)
                    return
                if not self._socket_is_ours():
                    log.info("socket file replaced or removed: exiting")
                    return
                # Not while embedding: a flush at 10k+ memories holds the GIL for a JSON dump,
                # the neighbour fill competes for the workspace lock and a core, and either
                # slows the embedding; the flush comes in the first pause after it.
                with self._entries_lock:
                    embedding = any(e.embedding for e in self.entries.values())
                with self._state:
                    quiet = self.active == 0 and now - self.last_activity > FLUSH_SECONDS and not embedding
                if quiet and now - last_flush > FLUSH_SECONDS and not self._flushing.locked():
                    # Only in a pause: saving a large store's projections takes seconds (written
                    # without the workspace lock, but competing for the CPU), and the idle work
                    # after it (the neighbour lists) yields to the first request.
                    last_flush = now
                    threading.Thread(target=self._idle_work, daemon=True).start()
                self.evict_idle(now)
                if now - last_resync > RESYNC_SECONDS:
                    last_resync = now
                    # inotify can drop events (queue overflow): re-walk what we watch, in the background.
                    roots = set(self.watcher.watched())
                    self.watcher.bump(roots)
                    threading.Thread(target=self._on_change, args=(roots,), daemon=True).start()
                continue
            except OSError:
                if self._stop.is_set():
                    return
                raise
            with self._state:
                self.last_activity = time.monotonic()
            threading.Thread(target=self._serve_conn, args=(conn,), daemon=True).start()

    def flush_all(self) -> None:
        """Save the projections held in memory, so a process without the daemon starts warm."""
        with self._flushing:
            with self._entries_lock:
                entries = list(self.entries.values())
            for entry in entries:
                # What to save is taken under the workspace lock; the writing (seconds at 100k
                # memories) happens without it, so a request arriving meanwhile is not held up.
                with entry.lock:
                    try:
                        saves = entry.ws.flush_later()
                    except Exception:  # a projection that fails to save is rebuilt by the next reader
                        log.exception("flush failed")
                        continue
                for save in saves:
                    try:
                        save()
                    except Exception:
                        log.exception("flush failed")

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
        with self._entries_lock:
            gone: list[tuple[Entry, str]] = []
            for key, entry in list(self.entries.items()):
                why = why_gone(key, entry)
                if why is None:
                    continue
                # A workspace in use (its lock held) stays; entry_for refreshes last_used first.
                if entry.lock.acquire(blocking=False):
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
            with self._entries_lock:
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

    def _idle_work(self) -> None:
        self.flush_all()
        self.fill_all()

    def fill_all(self) -> None:
        """Idle work: fill the association chain's neighbour lists of every workspace a slice at
        a time, stopping as soon as a request comes (it waits at most one slice). Reads then
        find every hop kept: at 100k memories a read whose seeds were never met costs ~10 ms
        more without it. Filling 100k rows takes ~40 s of CPU, once per daemon."""
        from ..read.indexes import fill_neighbours

        if not self._filling.acquire(blocking=False):
            return
        done, t0 = 0, time.monotonic()
        try:
            with self._state:
                since = self.last_activity
            with self._entries_lock:
                entries = list(self.entries.values())
            for entry in entries:
                while True:
                    with self._state:
                        if self.active or self.last_activity != since or self._stop.is_set():
                            return
                    with entry.lock:
                        n = 0 if entry.evicted else fill_neighbours(entry.ws, FILL_SLICE)
                    if not n:
                        break
                    done += n
        except Exception:  # idle work must never take the daemon down; reads fill lists themselves
            log.exception("filling neighbour lists failed")
        finally:
            self._filling.release()
            if done:
                log.info("filled %d neighbour lists in %.1f s", done, time.monotonic() - t0)

    def _socket_is_ours(self) -> bool:
        try:
            return self.sock_path.stat().st_ino == self._sock_ino
        except OSError:
            return False

    def shutdown(self) -> None:
        self._stop.set()  # idle work (a neighbour fill) ends at its next slice
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            if self._socket_is_ours():
                with contextlib.suppress(OSError):
                    self.sock_path.unlink()
            self._sock = None
        self.watcher.stop()
        from ..index.embedder import close_shared

        close_shared()  # the embedding workers exit now, not at their stdin's EOF
        self.flush_all()
        with self._entries_lock:
            indexes = {id(si): si for entry in self.entries.values() for si in entry.ws.indexes.values()}
        for si in indexes.values():
            with contextlib.suppress(Exception):
                si.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lifetime lock
            self._lock_fd = None
        log.info("stopped")


# Per connection thread: workspaces whose background embedding starts once the answer is sent.
_serving = threading.local()


def one_blas_thread() -> None:
    """Run the BLAS libraries loaded so far (numpy's, faiss's) on one thread. A read's matrix
    passes are one query against the rows (10k x 384: ~0.7 ms on one core); split over two
    threads, each waits for its worker, which on a busy 2-core machine is often not running:
    16 ms at the median under load 6 (0.7 ms on one thread), and idle workers spin against
    the rest of the request. Memory bandwidth bounds the pass at 100k, so a second thread
    buys nothing there either."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")


def _vector_stats(entry: Entry) -> list[dict[str, Any]]:
    """Per store the workspace has read: memories with a vector, memories, and whether the rest
    is being embedded now (``daemon status``). A store whose first sync is under way is left
    out: its catalog may not be loaded yet, and 0 of 0 would read as done."""
    out: list[dict[str, Any]] = []
    for scope, si in list(entry.ws.indexes.items()):
        if not si.synced:
            continue
        embedded, total = si.vector_counts()
        out.append({"scope": scope, "root": str(si.store.root), "embedded": embedded, "total": total,
                    "embedding": entry.embedding and si.embedding_pending})
    return out


def _near_stats(ws: Any) -> dict[str, Any]:
    """How far the association chain's neighbour lists are filled (``daemon status``)."""
    near = ws.read_cache.get("near")
    return {"neighbour_lists": {"rows": len(near), "filled": near.known()}} if near is not None else {}


def _written(ws: Any, answer: dict[str, Any]) -> tuple[Path, list[str]] | None:
    """(store root, [store-relative path]) of the file a committed write or update created."""
    if not answer.get("ok") or answer.get("mode") != "commit" or not answer.get("path"):
        return None
    try:
        store = ws.store(answer["scope"])
        path = Path(answer["path"])
        if not path.is_absolute():
            if store.worktree is None:
                return None
            path = store.worktree / path
        return store.root, [path.resolve().relative_to(store.root).as_posix()]
    except (ValueError, KeyError, OSError, MemstoreError):
        return None


def _same_user(conn: socket.socket) -> bool:
    """The socket is 0600 in a 0700 directory already; where the platform names the peer's uid
    (SO_PEERCRED on Linux, LOCAL_PEERCRED on macOS) a peer of another uid is refused too."""
    uid = peer_uid(conn)
    return uid is None or uid == os.getuid()


def default_idle_seconds(env: dict[str, str] | None = None) -> int:
    return int(_daemon_setting("idle_seconds", 1800, env))


def _daemon_setting(name: str, default: float, env: dict[str, str] | None = None) -> float:
    """``daemon.<name>`` from the user's config (global store, environment)."""
    from ..store.config import load_config
    from ..store.workspace import global_store_path

    env = dict(os.environ if env is None else env)
    try:
        config = load_config(None, global_store_path(env), env)
    except MemstoreError:
        return default
    return float(config.get("daemon", name, default))


def serve(idle_seconds: float | None = None, warm: str | None = None) -> int:
    """Run the daemon in the foreground until idle, stopped or replaced."""
    try:
        rdir = client.ensure_runtime_dir()
    except client.RuntimeDirRefused as exc:
        raise StoreError(str(exc), code="runtime_dir_refused",
                         hint="remove it, or set MEMSTORE_RUNTIME_DIR to a directory of yours") from exc
    handler = logging.FileHandler(rdir / client.LOG_NAME)
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(message)s"))
    root = logging.getLogger("memstore")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if os.environ.get("MEMSTORE_DEBUG") else logging.INFO)
    idle = float(idle_seconds) if idle_seconds is not None else float(default_idle_seconds())
    from .progress import embed_progress

    daemon = Daemon(rdir, idle, _daemon_setting("evict_seconds", 600.0), embed_progress(sys.stderr), warm)
    try:
        return daemon.run()
    finally:
        root.removeHandler(handler)
        handler.close()
