"""``memstore serve``: the per-user daemon (SPEC §6), and the server that is its front door.

It keeps the embedding model and every opened store's Workspace (catalogs + indexes) in memory,
watches those stores (memstore.store.watch) and refreshes their indexes in the background, and
answers CLI requests over a Unix socket (0600, in a 0700 directory) with exactly the library
functions the in-process CLI calls, so both paths give the same answers.

Life cycle: a lifetime lock (``daemon.lock``) makes it one daemon per runtime directory; the
model is loaded before the socket is bound, so a live socket always means a warm daemon; it
exits after ``idle_seconds`` without requests, on ``stop``, or when a client of another code
version asks (the client then starts a fresh one).

This module is the server: the lock, the socket, the accept loop that also schedules the idle
work, one connection served, and shutting down. The rest has a module each:
``daemon_stores`` (the workspaces kept warm and their eviction), ``daemon_requests`` (running
one request on one), ``daemon_work`` (loading the model, embedding in the background, the idle
flush and neighbour fill) and ``daemon_status`` (the figures ``daemon status`` reports).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import MemstoreError, StoreError
from . import client, daemon_status
from .daemon_requests import Requests
from .daemon_stores import Workspaces
from .daemon_work import Background, replying, warm_up
from .loadgc import LoadGC, tune_heap
from .wire import peer_uid

log = logging.getLogger("memstore.surfaces.daemon")

LOCK_WAIT = 15.0  # a replaced daemon may take a moment to exit and release the lock
RECV_TIMEOUT = 30.0  # a client that connects and never finishes its request is dropped
RESYNC_SECONDS = 120.0  # safety net: re-walk watched stores even if inotify lost events
FLUSH_SECONDS = 5.0  # save projections held in memory this long after the last check


class Daemon:
    """The server. It holds the workspaces (``stores``), the background work over them
    (``work``) and what runs a request on them (``runner``), and the counters the idle exit
    and the idle work go by."""

    def __init__(self, rdir: Path, idle_seconds: float, evict_seconds: float = 600.0,
                 progress: Callable[[Any, int, int], None] | None = None, warm: str | None = None) -> None:
        from ..store.watch import Watcher

        self.rdir = rdir
        self.warm = warm  # a directory whose stores are opened at start and embedded (``serve --warm``)
        self.sock_path = rdir / client.SOCKET_NAME
        self.idle_seconds = idle_seconds
        self.version = client.code_version()
        self.started = time.time()
        self.last_activity = time.monotonic()
        self.active = 0
        self.requests = 0
        self._stop = threading.Event()
        self._state = threading.Lock()  # guards active, last_activity, requests
        tune_heap()  # before the first thread starts: the watcher's, below
        self._gc = LoadGC()
        self._lock_fd: int | None = None
        self._sock: socket.socket | None = None
        self._sock_ino: int | None = None
        self.watcher = Watcher(self._on_change)
        self.stores = Workspaces(self.watcher, self._gc, evict_seconds, progress)
        self.work = Background(self.stores, self._stop, self._activity)
        self.runner = Requests(self.stores, self.work, self._gc)

    def _activity(self) -> tuple[int, float]:
        """(requests under way, when the last one ended): idle work stops when either moves."""
        with self._state:
            return self.active, self.last_activity

    def _on_change(self, roots: set[Path]) -> None:
        """Watcher callback (debounced): refresh the workspaces that hold a changed store, and
        embed in slices what a pull brought."""
        self.stores.refresh(roots, then=self.work.embed_behind)

    def warm_up(self) -> None:
        """Load the model and the heavy modules now, so the first answer is as fast as the rest."""
        warm_up()

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
            return self.runner.cli(msg)
        return self.runner.verb(verb, msg)

    def status(self) -> dict[str, Any]:
        workspaces = daemon_status.workspaces(self.stores)
        return {"ok": True, "running": True, "pid": os.getpid(), "version": self.version,
                "socket": str(self.sock_path), "uptime_s": round(time.time() - self.started, 1),
                "idle_seconds": self.idle_seconds, "evict_seconds": self.stores.evict_seconds,
                "evicted": self.stores.evicted, "requests": self.requests, "workspaces": workspaces,
                "watched": [str(p) for p in self.watcher.watched()], **daemon_status.memory_mb(),
                "gc": daemon_status.gc_state()}

    # -- the socket --------------------------------------------------------------------------------
    def _serve_conn(self, conn: socket.socket) -> None:
        with self._state:
            self.active += 1
        try:
            # The connection closes first; then what the request deferred runs (the answer is sent).
            with replying(), conn:
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
                threading.Thread(target=self.work.warm_stores, args=(self.warm,), daemon=True).start()
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
                embedding = any(e.embedding for e in self.stores.all())
                with self._state:
                    quiet = self.active == 0 and now - self.last_activity > FLUSH_SECONDS and not embedding
                if quiet and now - last_flush > FLUSH_SECONDS and not self.work.flushing():
                    # Only in a pause: saving a large store's projections takes seconds (written
                    # without the workspace lock, but competing for the CPU), and the idle work
                    # after it (the neighbour lists) yields to the first request.
                    last_flush = now
                    threading.Thread(target=self.work.idle_work, daemon=True).start()
                self.stores.evict_idle(now)
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
        self.work.flush_all()
        self.stores.close_indexes()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lifetime lock
            self._lock_fd = None
        log.info("stopped")


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
