"""This user's secret for the projections memstore writes: `.index/` is gitignored, but nothing
stops a clone or a pull from bringing one (``git add -f`` commits it, and git overwrites ignored
files without asking). What memstore loads from `.index/` must therefore prove it was written
here, by this user: the index metadata carries an HMAC under this key (``seal``), and the
embedding cache files its rows under keyed hashes, so a forged file matches nothing.

The key lives outside every repository, in ``$XDG_STATE_HOME/memstore/projection.key``
(``~/.local/state`` when unset): 32 random bytes, created on first use, 0600 in a 0700 folder.
A key another user could read is replaced. Without a usable place for it (a read-only home),
a process keeps a key of its own: its projections are then rebuilt by the next process, which
costs time but trusts nothing it cannot check.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from .files import private_dir

log = logging.getLogger("memstore.store.userkey")

_KEY_BYTES = 32
_cache: dict[str, bytes] = {}


def key_path(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(base):  # the XDG spec: a relative value is ignored
        base = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return Path(base) / "memstore" / "projection.key"


def projection_key(env: Mapping[str, str] | None = None) -> bytes:
    """The key for ``env``'s user (read once per process and path)."""
    path = key_path(os.environ if env is None else env)
    got = _cache.get(str(path))
    if got is None:
        try:
            got = _read(path) or _create(path)
        except OSError as exc:
            log.warning("no place for the projection key (%s): this process uses one of its own", exc)
            got = secrets.token_bytes(_KEY_BYTES)
        _cache[str(path)] = got
    return got


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:  # a symlink (ELOOP) or unreadable: not ours to trust
        _discard(path)
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        data = fh.read(4 * _KEY_BYTES)
    key = bytes.fromhex(data.decode("ascii", "replace").strip()) if _hex(data) else b""
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077 or len(key) != _KEY_BYTES:
        _discard(path)  # someone else's, readable by others, or damaged: a new key replaces it
        return None
    return key


def _hex(data: bytes) -> bool:
    text = data.strip()
    return len(text) == 2 * _KEY_BYTES and all(c in b"0123456789abcdef" for c in text)


def _discard(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _create(path: Path) -> bytes:
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    key = secrets.token_bytes(_KEY_BYTES)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(key.hex() + "\n")
        try:
            os.link(tmp, path)  # whole or not at all, and never over another process's key
        except FileExistsError:
            theirs = _read(path)
            if theirs is not None:
                return theirs
            os.replace(tmp, path)
    finally:
        _discard(tmp)
    return key


def seal(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def sealed_by(key: bytes, data: bytes, mac: str) -> bool:
    return hmac.compare_digest(seal(key, data), mac)


# A sealed JSON object ends with its HMAC as a last member: ``{...,"seal":"<64 hex>"}``. It stays
# JSON for people and tools; the HMAC covers the object as written without that member.
_SEAL = re.compile(rb',"seal":"([0-9a-f]{64})"\}\s*\Z')


def sealed_json(body: str, key: bytes) -> str:
    """``body`` (a JSON object) with its seal."""
    return "".join(sealing([body], key))


def sealing(chunks: Iterable[str], key: bytes) -> Iterator[str]:
    """A JSON object written in ``chunks``, with its seal (streamed: never held whole)."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    last = None
    for chunk in chunks:
        if last is not None:
            yield last
        if chunk:
            mac.update(chunk.encode("utf-8"))
            last = chunk
    if last is None:
        raise ValueError("nothing to seal")
    yield f'{last[:-1]},"seal":"{mac.hexdigest()}"}}'


def looks_sealed(tail: bytes) -> bool:
    """Whether the last bytes of a file end as a sealed object does: checked before the file is
    read whole, so a large file of junk costs one short read."""
    return _SEAL.search(tail) is not None


def unseal(raw: bytes, key: bytes) -> bytes | None:
    """The JSON object ``raw`` holds, if its seal was made with ``key``; else None."""
    m = _SEAL.search(raw)
    if m is None:
        return None
    body = raw[: m.start()] + b"}"
    return body if sealed_by(key, body, m.group(1).decode("ascii")) else None
