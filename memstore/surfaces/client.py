"""The thin client: forward a CLI verb to the per-user daemon over its Unix socket.

Importing this module must stay cheap (json/os/socket only): the point of the daemon is that a
CLI call costs a Python start-up plus a round trip, not an import of torch, faiss or whoosh.
Anything that goes wrong here returns ``None`` and the CLI answers in-process instead; the
daemon is an accelerator, never a dependency.

Protocol (JSON lines): one request object -> one answer object per connection.
    request: {"verb", "version", "cwd", "store", "env", "request"?, "args"?}
    answer:  {"answer": {...}, "exit_code": n}  |  {"restart": true, "version": ...}
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import wire

if TYPE_CHECKING:
    from ..store.config import Config
from .wire import CONNECT_TIMEOUT, READ_TIMEOUT, WRITE_TIMEOUT, code_version, disabled, forwarded_env

__all__ = ["CONNECT_TIMEOUT", "READ_TIMEOUT", "WRITE_TIMEOUT", "code_version", "disabled", "forwarded_env"]

SOCKET_NAME = wire.SOCKET_NAME
LOCK_NAME = "daemon.lock"
LOG_NAME = "daemon.log"
FORWARDED_VERBS = ("read", "write", "update", "show", "list", "context", "recall")
DaemonUnavailable = wire.Unavailable
_recv_line = wire.recv_line


def runtime_dir(env: Any = None) -> Path:
    return Path(wire.runtime_dir(env))


def socket_path(env: Any = None) -> Path:
    return runtime_dir(env) / SOCKET_NAME


def call(message: dict[str, Any], *, timeout: float = READ_TIMEOUT, env: Any = None) -> dict[str, Any]:
    """Send one message and return the daemon's answer object. Raises DaemonUnavailable when no
    daemon listens; TimeoutError when it does not answer in time."""
    return wire.exchange(message, timeout=timeout, env=env)


def forward(verb: str, *, request: dict[str, Any] | None = None, args: dict[str, Any] | None = None,
            store: str | None = None, env: dict[str, str] | None = None,
            new_id: str | None = None) -> tuple[dict[str, Any], int] | None:
    """Answer ``verb`` through a live daemon: (answer, exit code), or None to run in-process.
    ``env`` adds to the MEMSTORE_* variables sent (an MCP session's episode); ``new_id``: the id a
    write or update takes, which the in-process run after a daemon that died unanswered gives
    it too (``api.write``).

    A daemon of another code version is asked to stop (it exits after answering) and None is
    returned, so this call runs in-process and the CLI starts a fresh daemon for the next one.
    """
    if disabled():
        return None
    message: dict[str, Any] = {
        "verb": verb, "version": code_version(), "cwd": os.getcwd(), "store": store,
        "env": {**forwarded_env(), **(env or {})},
    }
    if request is not None:
        message["request"] = request
    if args is not None:
        message["args"] = args
    if new_id is not None:
        message["new_id"] = new_id
    timeout = float(os.environ.get("MEMSTORE_CLIENT_TIMEOUT") or 0) or (
        WRITE_TIMEOUT if verb in ("write", "update") else READ_TIMEOUT)
    try:
        answer = call(message, timeout=timeout)
    except wire.Untrusted as exc:
        wire.warn_untrusted(exc)
        return None
    except DaemonUnavailable:
        _clear_stale_socket()
        return None
    except TimeoutError:
        if verb in ("write", "update"):
            return wire.timeout_error(timeout), 1
        return None
    except (OSError, ValueError):
        return None
    if answer.get("restart"):
        return None
    if "answer" not in answer:
        return None
    return answer["answer"], int(answer.get("exit_code", 0))


# -- starting and stopping ------------------------------------------------------------------------
class RuntimeDirRefused(PermissionError):
    """The runtime directory cannot be made safe without adopting or deleting another user's files."""


def ensure_runtime_dir(env: Any = None) -> Path:
    """The runtime directory, created 0700. One that is a symlink, belongs to someone else, or
    holds another user's files is refused, never adopted or cleaned: the CLI then answers
    in-process. One of ours that others could enter is closed (0700) first."""
    path = runtime_dir(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    foreign = wire.not_ours(str(path), st)
    if foreign:
        raise RuntimeDirRefused(foreign)
    uid = os.getuid()
    if st.st_mode & 0o077:
        # Closed first, then searched: nothing can slip in between the look and the close.
        os.chmod(path, 0o700)
    # The daemon replaces its socket file and writes its log here: a file someone else left
    # (while the dir was open, or as root) is neither used nor deleted.
    foreign = sorted(e.name for e in os.scandir(path) if e.stat(follow_symlinks=False).st_uid != uid)
    if foreign:
        raise RuntimeDirRefused(f"the runtime directory {path} holds files of another user: {', '.join(foreign)}")
    return path


def _unlink_own(path: Path) -> None:
    """Remove ``path`` only if it is this user's: a socket file of someone else is left alone."""
    with contextlib.suppress(OSError):
        if os.lstat(path).st_uid == os.getuid():
            path.unlink()


def daemon_running(env: Any = None) -> bool:
    """True while some daemon holds the lifetime lock (it may still be loading the model)."""
    lock = runtime_dir(env) / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return True
        raise
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _clear_stale_socket(env: Any = None) -> None:
    """A socket file nobody listens on (a killed daemon) is removed so the next daemon can bind."""
    with contextlib.suppress(OSError):
        if socket_path(env).exists() and not daemon_running(env):
            _unlink_own(socket_path(env))


def autostarts(config: Config) -> bool:
    """Whether an answer given in-process starts a daemon for the next call (``daemon.autostart``;
    MEMSTORE_DAEMON=0 turns it off)."""
    return not disabled() and bool(config.get("daemon", "autostart", True))


def autostart(config: Config, warm: str | None = None) -> bool:
    """Start the daemon ``config`` asks for; ``warm``: a folder whose memories it embeds at once."""
    return spawn(idle_seconds=config.get("daemon", "idle_seconds", None), warm=warm)


def spawn(idle_seconds: int | None = None, env: Any = None, warm: str | None = None) -> bool:
    """Start a daemon in the background unless one is running or starting. Returns True if spawned.

    The daemon takes its lifetime lock first thing, so two clients racing here start at most
    one serving daemon (the loser sees the lock and exits at once).
    """
    import subprocess

    try:
        rdir = ensure_runtime_dir(env)
        if daemon_running(env):
            return False
        _clear_stale_socket(env)
        # A spawn marker stops every CLI call during the daemon's ~5 s start-up from launching
        # another interpreter that would only find the lock taken.
        marker = rdir / "spawning"
        with contextlib.suppress(OSError):
            if time.time() - marker.stat().st_mtime < 15:
                return False
        marker.touch()
        cmd = [sys.executable, "-P", "-m", "memstore", "serve"]  # -P: never a memstore/ of the cwd (a checkout)
        if idle_seconds is not None:
            cmd += ["--idle", str(int(idle_seconds))]
        if warm is not None:
            cmd += ["--warm", warm]
        with open(os.devnull, "rb") as devnull_in, open(rdir / LOG_NAME, "ab") as log:
            subprocess.Popen(cmd, stdin=devnull_in, stdout=log, stderr=log, start_new_session=True,
                             close_fds=True, env=dict(os.environ if env is None else env))
        return True
    except OSError:
        return False


def wait_until_up(timeout: float = 60.0, env: Any = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(DaemonUnavailable, OSError, ValueError):
            if call({"verb": "ping", "version": code_version()}, timeout=2.0, env=env).get("ok"):
                return True
        time.sleep(0.05)
    return False


def status(env: Any = None) -> dict[str, Any]:
    try:
        answer = call({"verb": "status", "version": code_version()}, timeout=5.0, env=env)
    except (DaemonUnavailable, OSError, ValueError) as exc:
        starting = daemon_running(env)
        return {"ok": True, "running": False, "starting": starting, "socket": str(socket_path(env)),
                "detail": "a daemon is starting" if starting else str(exc)}
    answer.setdefault("running", True)
    return answer


def start(timeout: float = 60.0, env: Any = None) -> dict[str, Any]:
    """A daemon of this code version serving, started if none is (``memstore daemon start``).

    A daemon on its way out holds its lifetime lock after its socket is gone, while it saves
    (seconds at a large store): the lock is watched until it is free, then one is spawned. A
    daemon of another version answers a ping but would hand over at the first real request,
    paying the model load this call is meant to pay in advance: it is replaced now."""
    was_running = daemon_running(env)
    deadline = time.monotonic() + timeout
    up = False
    while not up and time.monotonic() < deadline:
        if not daemon_running(env):
            spawn(env=env)
        up = wait_until_up(min(2.0, max(0.1, deadline - time.monotonic())), env=env)
        if up and status(env).get("version") not in (None, code_version()):
            stop(env=env)
            up = False
    return {"ok": up, "was_running": was_running}


def stop(timeout: float = 10.0, env: Any = None) -> dict[str, Any]:
    """Ask the daemon to exit and wait until its lifetime lock is free."""
    try:
        call({"verb": "stop", "version": code_version()}, timeout=5.0, env=env)
        was_running = True
    except (DaemonUnavailable, OSError, ValueError):
        was_running = daemon_running(env)
    deadline = time.monotonic() + timeout
    while daemon_running(env) and time.monotonic() < deadline:
        time.sleep(0.05)
    stopped = not daemon_running(env)
    if stopped:
        _unlink_own(socket_path(env))
    return {"ok": stopped, "was_running": was_running, "stopped": stopped}
