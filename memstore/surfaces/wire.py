"""The daemon's wire, shared by every side that speaks it (``entry``, ``client``, ``cli``,
``daemon``): the runtime dir and its ownership checks, one JSON-line exchange, the code version,
the environment forwarded. A leaf: the standard library's os/sys/stat and the C halves of
socket and json only, because ``entry`` imports it before it forwards a call.
"""

from __future__ import annotations

import _socket
import os
import stat
import sys

# The C socket type: `import socket` (the wrapper module) costs ~4 ms here, a tenth of a call
# through the daemon, and this module needs only connect/sendall/recv.
from _socket import AF_UNIX, SOCK_STREAM, SOL_SOCKET
from _socket import socket as _Socket

# macOS has no SO_PEERCRED: getsockopt(SOL_LOCAL, LOCAL_PEERCRED) answers a struct xucred
# {u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16]} (<sys/ucred.h>,
# <sys/un.h>); Python names neither constant, so their values are spelled here.
_SOL_LOCAL = 0
_LOCAL_PEERCRED = 1
_XUCRED_SIZE = 76
_XUCRED_VERSION = 0

# The C encoder and scanner that json.dumps and json.loads run: `import json` also imports `re`
# (patterns its Python fallbacks use), ~6 ms of a CLI call whose whole budget above the
# interpreter's start is ~15. An interpreter without them gets the json module itself.
try:
    from _json import encode_basestring_ascii as _ascii
    from _json import make_encoder as _make_encoder
    from _json import make_scanner as _make_scanner
except ImportError:  # pragma: no cover - not CPython
    _ascii = _make_encoder = _make_scanner = None

SOCKET_NAME = "sock"
# Reads are idempotent: a slow daemon means answering in-process. A write that was sent may
# already have happened, so it waits longer; one the daemon dropped unanswered is retried
# in-process under the id the client fixed (``fresh_id``), which makes it the same write.
READ_TIMEOUT = 30.0
WRITE_TIMEOUT = 120.0
CONNECT_TIMEOUT = 1.0
MAX_LINE = 64 * 1024 * 1024
# The most a request file or stdin may hold (``--json FILE``, ``--text -``): a memory's text is
# capped at 16,000 characters, so a real request is a few KB. Past it: ``too_large``.
MAX_REQUEST_BYTES = 4 * 1024 * 1024
# Environment the daemon needs to resolve stores and config exactly like this process would.
ENV_NAMES = ("HOME", "XDG_CONFIG_HOME")


def runtime_dir(env: dict[str, str] | os._Environ[str] | None = None) -> str:
    env = os.environ if env is None else env
    if env.get("MEMSTORE_RUNTIME_DIR"):
        return env["MEMSTORE_RUNTIME_DIR"]
    if env.get("XDG_RUNTIME_DIR"):
        return os.path.join(env["XDG_RUNTIME_DIR"], "memstore")
    return f"/tmp/memstore-{os.getuid()}"


def code_version() -> str:
    """The package version plus a digest of its source files (path, size, mtime), so a daemon
    started from an edited checkout is noticed and replaced, not only a new release."""
    if os.environ.get("MEMSTORE_CODE_VERSION"):
        # Pinned by benchmarks that run on a checkout other people are editing meanwhile.
        return os.environ["MEMSTORE_CODE_VERSION"]
    import zlib

    from .. import __version__

    base = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the package root
    parts: list[str] = []
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(folder, base)
        for name in sorted(files):
            if name.endswith((".py", ".json")):
                st = os.stat(os.path.join(folder, name))
                parts.append(f"{rel}/{name}:{st.st_size}:{st.st_mtime_ns}")
    return f"{__version__}+{zlib.crc32(chr(10).join(parts).encode()):08x}"


_ULID_CHARS = "0123456789abcdefghjkmnpqrstvwxyz"


def fresh_id() -> str:
    """A new ULID, the format of ``store.ids.new_id`` (48-bit ms time, 80 random bits), made here
    because that module imports ``re``. A write fixes its id with this before its first attempt,
    so the in-process retry after a daemon that died unanswered is the same write, not a second."""
    import time

    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    return "".join(_ULID_CHARS[(value >> shift) & 31] for shift in range(125, -1, -5))


def forwarded_env(env: dict[str, str] | os._Environ[str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    out = {k: v for k, v in env.items() if k.startswith("MEMSTORE_")}
    out.update({k: env[k] for k in ENV_NAMES if k in env})
    return out


def disabled(env: dict[str, str] | os._Environ[str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get("MEMSTORE_DAEMON", "").strip().lower() in ("0", "false", "no", "off")


def verb_of(argv: list[str]) -> str | None:
    """The subcommand named in ``argv`` (skipping the global options before it), if any."""
    it = iter(argv)
    for tok in it:
        if tok == "--store":
            next(it, None)
        elif not tok.startswith("-"):
            return tok
        elif tok in ("-h", "--help", "--version"):
            return None
    return None


def _unencodable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _Decoding:
    """What the C scanner reads from a ``json.JSONDecoder``: json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


_JSON_SPACE = " \t\n\r"
try:
    # markers None: json.dumps's check for circular containers, which a message never has
    _encode = _make_encoder(None, _unencodable, _ascii, None, ":", ",", False, False, True)
    _scan = _make_scanner(_Decoding())
except TypeError:  # pragma: no cover - not CPython, or another signature: the json module
    _encode = _scan = None


def dumps(value: object) -> str:
    """``json.dumps(value, separators=(",", ":"))``: compact, ASCII, the same text."""
    if _encode is None:  # pragma: no cover - not CPython
        import json

        return json.dumps(value, separators=(",", ":"))
    return "".join(_encode(value, 0))


def loads(text: str) -> object:
    """``json.loads(text)``; ValueError for anything that is not one JSON value."""
    if _scan is None:  # pragma: no cover - not CPython
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(_JSON_SPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"expecting a JSON value at character {exc.value}") from None
    if text[end:].strip(_JSON_SPACE):
        raise ValueError(f"extra data at character {end}")
    return value


class Unavailable(Exception):
    """No daemon answered: the caller answers in-process."""


class Untrusted(Unavailable):
    """The runtime dir, its socket or the process listening on it is not provably this user's:
    another local user could have planted it to read our requests and answer with its own
    "memories". Nothing was sent; the caller answers in-process."""


_warned: list[str] = []


def warn_untrusted(exc: Untrusted) -> None:
    """One stderr line per process, so a planted runtime dir is noticed, not silently slow."""
    if _warned:
        return
    _warned.append(str(exc))
    write_stream(sys.stderr, f"memstore: not using the daemon: {exc}; answering in-process "
                       "(remove it, or set MEMSTORE_RUNTIME_DIR to a directory of yours)\n")


def not_ours(path: str, st: os.stat_result) -> str | None:
    """Why the runtime directory ``path`` (its ``lstat``) is not this user's own, or None. The
    client refuses such a dir before connecting; ``memstore serve`` refuses to start in it."""
    if not stat.S_ISDIR(st.st_mode):
        return f"the runtime directory {path} is not a directory (a symlink or a file)"
    if st.st_uid != os.getuid():
        return f"the runtime directory {path} belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
    return None


def check_runtime_dir(path: str) -> None:
    """Raise Untrusted unless ``path`` is a real directory (not a symlink) of this user that no
    other user can enter; Unavailable when it does not exist (no daemon ever ran)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError as exc:
        raise Unavailable(f"no runtime directory {path}") from exc
    foreign = not_ours(path, st)
    if foreign:
        raise Untrusted(foreign)
    if st.st_mode & 0o077:
        raise Untrusted(f"the runtime directory {path} is open to other users (mode {st.st_mode & 0o777:o})")


def check_socket(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError as exc:
        raise Unavailable(f"no daemon socket {path}") from exc
    if not stat.S_ISSOCK(st.st_mode):
        raise Untrusted(f"{path} is not a socket")
    if st.st_uid != os.getuid():
        raise Untrusted(f"the daemon socket {path} belongs to uid {st.st_uid}, not to this user")


def peer_uid(sock: _Socket) -> int | None:
    """The uid of the process at the other end of a connected AF_UNIX socket: SO_PEERCRED on
    Linux, LOCAL_PEERCRED on macOS; None where the platform does not say (then the 0600 socket
    in a 0700 directory is the guard). Looked up per call, never cached at import."""
    so_peercred = getattr(_socket, "SO_PEERCRED", None)
    try:
        if so_peercred is not None:
            creds = sock.getsockopt(SOL_SOCKET, so_peercred, 12)  # struct ucred: pid, uid, gid (3 x int32)
            return int.from_bytes(creds[4:8], sys.byteorder)
        if sys.platform == "darwin":
            creds = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, _XUCRED_SIZE)
            if len(creds) < 8 or int.from_bytes(creds[0:4], sys.byteorder) != _XUCRED_VERSION:
                return None
            return int.from_bytes(creds[4:8], sys.byteorder)
    except OSError:
        return None
    return None


def check_peer(sock: _Socket, path: str) -> None:
    """The listening process must run as this user (the daemon checks its clients the same way)."""
    uid = peer_uid(sock)
    if uid is not None and uid != os.getuid():
        raise Untrusted(f"the process listening on {path} runs as uid {uid}, not as this user")


def connect(path: str, timeout: float) -> _Socket:
    """A connection to the daemon socket at ``path``, once the runtime dir, the socket file and
    the listening peer are all this user's; nothing is sent to anything else."""
    check_runtime_dir(os.path.dirname(path))
    check_socket(path)
    sock = _Socket(AF_UNIX, SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        check_peer(sock, path)
    except Untrusted:
        sock.close()
        raise
    except OSError as exc:
        sock.close()
        raise Unavailable(str(exc)) from exc
    return sock


def recv_line(sock: _Socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n") or size > MAX_LINE:
            break
    return b"".join(chunks)


def exchange(message: dict[str, object], *, timeout: float, env: dict[str, str] | None = None) -> dict[str, object]:
    """Send one message, return the daemon's answer object. Raises Unavailable when no daemon
    listens or it hangs up without answering, TimeoutError when it does not answer in time."""
    sock = connect(os.path.join(runtime_dir(env), SOCKET_NAME), CONNECT_TIMEOUT)
    try:
        sock.settimeout(timeout)
        sock.sendall(dumps(message).encode() + b"\n")
        raw = recv_line(sock)
    finally:
        sock.close()
    if not raw:
        raise Unavailable("the daemon closed the connection without answering")
    try:
        answer = loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise Unavailable("the daemon sent something that is not JSON") from exc
    if not isinstance(answer, dict):
        raise Unavailable("the daemon sent something that is not a JSON object")
    return answer


def timeout_error(timeout: float) -> dict[str, object]:
    return {"ok": False, "error": {
        "code": "daemon_timeout", "message": f"the daemon did not answer within {timeout:.0f} s; "
        "the write may or may not have happened",
        "hint": "check with `memstore list`; `memstore daemon restart` replaces a stuck daemon"}}


def write_stream(stream: object, text: str) -> None:
    if not text:
        return
    try:
        stream.write(text)  # type: ignore[attr-defined]
        stream.flush()  # type: ignore[attr-defined]
    except BrokenPipeError:
        # `memstore list | head`: the reader left. Point the stream at /dev/null so the
        # interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())  # type: ignore[attr-defined]
