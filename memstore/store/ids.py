"""ULIDs: 26 lowercase Crockford base32 chars, 48-bit ms timestamp + 80 random bits.

Generated monotonically within a process so ids made in the same millisecond still sort
in creation order.
"""

from __future__ import annotations

import os
import re
import threading
import time

ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
ID_RE = re.compile(r"^[0-9abcdefghjkmnpqrstvwxyz]{26}$")
MIN_PREFIX = 6

_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id(now_ms: int | None = None) -> str:
    """A new ULID; strictly increasing within this process."""
    global _last_ms, _last_rand
    with _lock:
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        if ms <= _last_ms:
            ms = _last_ms
            rand = (_last_rand + 1) & ((1 << 80) - 1)
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        _last_ms, _last_rand = ms, rand
    return _encode(ms, 10) + _encode(rand, 16)


def id_time_ms(ulid: str) -> int:
    value = 0
    for ch in ulid[:10]:
        value = value * 32 + ALPHABET.index(ch)
    return value


def is_id(value: object) -> bool:
    return isinstance(value, str) and bool(ID_RE.match(value))


def normalize_prefix(value: str) -> str:
    """Crockford decoding is case-insensitive and maps i/l to 1 and o to 0."""
    return value.strip().lower().translate(str.maketrans("ilo", "110"))


def derived_id(key: str) -> str:
    """A stable id for a hand-written file that has none yet, derived from its path.

    The timestamp part is zero-free but deterministic, so ``check --fix`` can write the very
    id the index already used.
    """
    import hashlib

    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:16], "big")
    return _encode(digest >> 2, 26)
