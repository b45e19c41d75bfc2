"""The row space the ranking scores: the stores' vectors in index order, with the rows out of
scope marked rather than removed, kept current by deltas.

Rebuilding it after a write (a Python pass over every id, and copying the matrix whenever a
row is filtered out) cost ~150 ms at 100k memories. After a write only the rows after the
first one that moved are taken again, and one store's matrix is a view of its vector index.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..index.vectors import CANDIDATES, VectorIndex
from ..store.kinds import KINDS
from ..store.model import Memory
from .scopeview import ScopeView

_KIND_CODE = {kind: code for code, kind in enumerate(KINDS)}
_UNKNOWN_KIND = len(KINDS)


@dataclass
class Rows:
    """The row space the ranking sees: ids, kinds and (when semantic is on) their vectors.

    With vectors, the rows are those of the stores' vector indexes in order, each store's as
    its index holds them, and ``excluded`` marks the rows out of scope (archived, filtered):
    skipping them in the ranking spares copying the matrix (150 MB at 100k) on every change."""

    ids: list[str]
    kinds: list[str]
    matrix: np.ndarray
    pos: dict[str, int]
    excluded: np.ndarray | None = None  # bool per row; None: every row is in scope
    codes: np.ndarray | None = None  # KINDS index per row (len(KINDS): unknown), for the offsets
    sizes: tuple[int, ...] = ()  # rows per store
    buffer: np.ndarray | None = None  # owns ``matrix`` when several stores' rows are joined
    tokens: np.ndarray | None = None  # per row: store position and faiss label (``row_tokens``)
    _offsets: tuple[np.ndarray, np.ndarray] | None = None  # (kind table, offsets) of the last ``offsets``

    def is_excluded(self, row: int) -> bool:
        return self.excluded is not None and bool(self.excluded[row])

    def offsets(self, kind_offset: Mapping[str, float]) -> np.ndarray:
        """Each row's kind offset (``ranking.kind_offsets``) without a Python loop over the rows;
        kept for the next read with the same offsets (a pass over every row, 1 ms at 1M)."""
        table = np.array([kind_offset.get(k, 0.0) for k in KINDS] + [0.0], dtype=np.float32)
        if self._offsets is not None and np.array_equal(self._offsets[0], table):
            return self._offsets[1]
        if self.codes is None:
            self.codes = _codes(self.kinds)
        out = table[self.codes]
        self._offsets = (table, out)
        return out


class RowCache(NamedTuple):
    """The last row space built, with what it was built from (kept in the read cache)."""

    filters: tuple[Any, ...]
    view: ScopeView
    vectors: list[VectorIndex]  # the stores' vector indexes (a reload replaces them)
    state: tuple[Any, ...]  # the view's generation and each index's
    ok: set[str]
    rows: Rows


def _codes(kinds: list[str]) -> np.ndarray:
    return np.fromiter((_KIND_CODE.get(k, _UNKNOWN_KIND) for k in kinds), dtype=np.int8, count=len(kinds))


def keyword_rows(ok: set[str], memories: Mapping[str, Memory], dim: int) -> Rows:
    """Without vectors: the memories in scope, by id."""
    ids = sorted(ok)
    return Rows(ids, [memories[m].kind for m in ids], np.zeros((0, dim), dtype=np.float32),
                {m: i for i, m in enumerate(ids)})


def build_rows(vectors: list[VectorIndex], ok: set[str], memories: Mapping[str, Memory], dim: int) -> Rows:
    """The row space from scratch."""
    segments = [v.row_ids() for v in vectors]
    ids = [mid for seg in segments for mid in seg]
    kinds = [_kind(memories, mid) for mid in ids]
    matrix, buffer = _join(vectors, None, 0, len(ids), dim)
    return Rows(ids, kinds, matrix, {m: i for i, m in enumerate(ids)},
                np.fromiter((m not in ok for m in ids), dtype=bool, count=len(ids)), _codes(kinds),
                tuple(len(seg) for seg in segments), buffer, row_tokens(vectors))


def partial_rows(rows: Rows, waiting: list[str], ok: set[str], memories: Mapping[str, Memory],
                 dim: int) -> tuple[Rows, np.ndarray]:
    """The row space while some memories wait for their vector: ``rows`` (those that have one,
    left as they are), then one placeholder (zero) row per waiting memory, and the mask of
    those. Built from scratch; ``PartialRows`` keeps the same between reads. No neighbour lists
    follow it."""
    extra = _waiting_rows(rows, waiting, memories)
    matrix = np.zeros((len(rows.ids) + len(extra), dim), dtype=np.float32)
    matrix[:len(rows.ids)] = rows.matrix
    return _with_waiting(rows, extra, ok, memories, matrix)


def _waiting_rows(rows: Rows, waiting: list[str], memories: Mapping[str, Memory]) -> list[str]:
    """The waiting memories that get a placeholder row: once each, in order, those without a
    row of their own that the scope holds."""
    pos = rows.pos
    return [m for m in dict.fromkeys(waiting) if m not in pos and m in memories]


def _with_waiting(rows: Rows, extra: list[str], ok: set[str], memories: Mapping[str, Memory],
                  matrix: np.ndarray) -> tuple[Rows, np.ndarray]:
    """``rows`` and a row of ``matrix`` (placeholders: zero) for each memory of ``extra`` after
    them, and the mask of those."""
    assert rows.excluded is not None
    base, n = len(rows.ids), len(rows.ids) + len(extra)
    kinds = [memories[m].kind for m in extra]
    pos = rows.pos.copy()
    pos.update(zip(extra, range(base, n), strict=True))
    excluded = np.concatenate([rows.excluded, np.fromiter((m not in ok for m in extra), dtype=bool, count=len(extra))])
    codes = np.concatenate([rows.codes if rows.codes is not None else _codes(rows.kinds), _codes(kinds)])
    unembedded = np.zeros(n, dtype=bool)
    unembedded[base:] = True
    return Rows([*rows.ids, *extra], [*rows.kinds, *kinds], matrix, pos, excluded, codes), unembedded


class PartialRows:
    """``partial_rows`` kept between reads while a store embeds in the background, and brought up
    to date by what arrived since: the matrix stays in a buffer of its own, where only the rows
    that gained a vector since the last read are copied in and the placeholders stay zero.
    Built afresh for each read, the partial row space cost ~40 ms of the daemon's CPU per read
    at 10k memories waiting (copying every vector, a Python pass over every row), CPU the
    embedding workers then lacked (bench/RESULTS.md "Background embedding against the encoder
    pool"). Answers the same as ``partial_rows`` (tests/test_embed_partial.py)."""

    def __init__(self, owner: tuple[VectorIndex, ...], dim: int) -> None:
        self.owner = owner  # the vector indexes the rows come from (a reload replaces them)
        self._tokens = np.zeros(0, dtype=np.int64)  # the buffer's vector rows, by ``row_tokens``
        self._buffer = np.zeros((0, dim), dtype=np.float32)
        self._clean = 0  # the buffer's rows from here on are zero

    def serves(self, vectors: list[VectorIndex]) -> bool:
        return len(vectors) == len(self.owner) and all(map(operator.is_, vectors, self.owner))

    def rows(self, rows: Rows, waiting: list[str], ok: set[str], memories: Mapping[str, Memory],
             dim: int) -> tuple[Rows, np.ndarray]:
        """What ``partial_rows(rows, waiting, ok, memories, dim)`` answers, from the last call's."""
        assert rows.excluded is not None
        if rows.tokens is None or len(rows.tokens) != len(rows.ids) or self._buffer.shape[1] != dim:
            return partial_rows(rows, waiting, ok, memories, dim)
        extra = _waiting_rows(rows, waiting, memories)
        base, n = len(rows.ids), len(rows.ids) + len(extra)
        # The vector rows already in the buffer: a token names one vector for good, so the rows
        # up to the first that differs hold the right vectors.
        keep = _common_tokens(self._tokens, rows.tokens)
        if self._buffer.shape[0] < n:
            grown = np.zeros((n + n // 8 + 256, dim), dtype=np.float32)
            grown[:keep] = self._buffer[:keep]
            self._buffer, self._clean = grown, keep
        buf = self._buffer
        if base > keep:
            buf[keep:base] = rows.matrix[keep:base]
        if self._clean > base:
            buf[base:self._clean] = 0.0  # vectors of rows that now hold placeholders
        self._clean = base
        self._tokens = rows.tokens
        return _with_waiting(rows, extra, ok, memories, buf[:n])


def _common_tokens(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def update_rows(old: Rows, vectors: list[VectorIndex], ok: set[str], memories: Mapping[str, Memory],
                changed: Iterable[str], dim: int) -> Rows | None:
    """``old`` brought in line with the vector indexes and the memories in ``changed``; None when
    only a rebuild can tell (an id with rows in two stores). Rows before the first one that
    moved are kept as they are; the ones after it are taken again. ``old`` is used up."""
    assert old.excluded is not None and old.codes is not None
    if len(old.pos) != len(old.ids) or len(old.sizes) != len(vectors):
        return None
    segments = [v.row_ids() for v in vectors]
    keep = start = 0  # rows [0, keep) are unchanged
    for seg, size in zip(segments, old.sizes, strict=True):
        same = _common_prefix(old.ids[start:start + size], seg)
        keep = start + same
        if same < size or len(seg) != size:
            break
        start += size
    tail = [mid for seg, first in zip(segments, _starts(segments), strict=True)
            for mid in seg[max(0, keep - first):] if first + len(seg) > keep]
    # In place: after a write only the new rows cost anything (copying 100k-entry lists and
    # dicts is what the rows cost to rebuild).
    ids, pos, kinds = old.ids, old.pos, old.kinds
    for mid in ids[keep:]:
        del pos[mid]
    for i, mid in enumerate(tail, keep):
        pos[mid] = i
    del ids[keep:], kinds[keep:]
    ids += tail
    if len(pos) != len(ids):
        return None
    tail_kinds = [_kind(memories, mid) for mid in tail]
    kinds += tail_kinds
    codes = np.concatenate([old.codes[:keep], _codes(tail_kinds)])
    excluded = np.concatenate([old.excluded[:keep], np.fromiter((m not in ok for m in tail), dtype=bool,
                                                                 count=len(tail))])
    for mid in changed:
        i = pos.get(mid)
        if i is not None and i < keep:
            kinds[i] = _kind(memories, mid)
            codes[i] = _KIND_CODE.get(kinds[i], _UNKNOWN_KIND)
            excluded[i] = mid not in ok
    matrix, buffer = _join(vectors, old.buffer, keep, len(ids), dim)
    return Rows(ids, kinds, matrix, pos, excluded, codes, tuple(len(seg) for seg in segments), buffer,
                row_tokens(vectors))


class Nearest:
    """The approximate vector lane over a row space (docs/decisions/approximate-index.md): for a
    query, the candidate rows of every store whose vector index is at its approximate threshold,
    found by its inverted file, and every row of the other stores (a store under its threshold
    is small enough to score whole). The ranking scores the candidates exactly on the flat rows."""

    def __init__(self, vectors: list[VectorIndex], sizes: tuple[int, ...]) -> None:
        self.vectors = vectors
        self.sizes = sizes
        # What the lane did, for the read's stats: approximate searches asked of the stores'
        # indexes, and calls answered with every row (the ranking then takes the flat pass).
        self.searches = 0
        self.whole = 0

    def __call__(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, probed): the candidate rows for the ``k`` nearest to ``q``, ascending, and which
        of them an approximate search chose (False: a store scored whole). A store asked for
        at least as many candidates as it holds is scored whole."""
        parts: list[np.ndarray] = []
        probed: list[np.ndarray] = []
        start = 0
        for v, size in zip(self.vectors, self.sizes, strict=True):
            if size and v.approximate() and k * CANDIDATES < size:
                self.searches += 1
                found = v.candidates(q, k * CANDIDATES) + start
                parts.append(found)
                probed.append(np.ones(len(found), dtype=bool))
            elif size:
                parts.append(np.arange(start, start + size))
                probed.append(np.zeros(size, dtype=bool))
            start += size
        if not parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
        chosen = np.concatenate(probed)
        if not chosen.any():
            self.whole += 1
        return np.concatenate(parts), chosen


def nearest(rows: Rows, vectors: list[VectorIndex]) -> Nearest | None:
    """The approximate lane for ``rows`` (taken from ``vectors``), or None when no store is at
    its approximate threshold: the ranking then takes one product over every row, as below it
    that is both exact and cheap."""
    if not any(v.approximate() for v in vectors):
        return None
    if len(rows.sizes) != len(vectors) or any(len(v) != size for v, size in zip(vectors, rows.sizes, strict=True)):
        return None  # rows not taken from these indexes as they stand
    if sum(rows.sizes) != len(rows.ids) or rows.matrix.shape[0] != len(rows.ids):
        return None
    return Nearest(vectors, rows.sizes)


def current_matrix(rows: Rows, vectors: list[VectorIndex]) -> np.ndarray | None:
    """``rows``' matrix, taken afresh, while the rows still are the vector indexes' (the same
    vectors in the same order); None when the indexes moved on since (the next read updates the
    rows). One store's matrix is a view of faiss's storage, which an add may have moved."""
    if rows.tokens is None or not np.array_equal(row_tokens(vectors), rows.tokens):
        return None
    filled = [v for v in vectors if len(v)]
    if len(filled) <= 1:
        return filled[0].matrix() if filled else None
    return rows.matrix  # joined into the rows' own buffer


def row_tokens(vectors: list[VectorIndex]) -> np.ndarray:
    """A name per row that stays with its vector: the store's position over the faiss label.
    Increasing along the rows (faiss keeps insertion order; labels only grow)."""
    parts = [(np.int64(at) << np.int64(40)) | v.row_labels() for at, v in enumerate(vectors) if len(v)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _kind(memories: Mapping[str, Memory], mid: str) -> str:
    mem = memories.get(mid)  # a vector the index has not dropped yet: excluded, as not in scope
    return mem.kind if mem is not None else ""


def _starts(segments: list[list[str]]) -> list[int]:
    out, at = [], 0
    for seg in segments:
        out.append(at)
        at += len(seg)
    return out


def _common_prefix(a: list[str], b: list[str]) -> int:
    """Length of the longest common prefix (slices compare in C; a binary search on them)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _join(vectors: list[VectorIndex], buffer: np.ndarray | None, keep: int, n: int,
          dim: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The stores' vectors as one matrix. One store: a view of its index (no copy). Several:
    rows copied into a buffer with room to grow, where rows [0, keep) are already in place."""
    filled = [v for v in vectors if len(v)]
    if len(filled) <= 1:
        return (filled[0].matrix() if filled else np.zeros((0, dim), dtype=np.float32)), None
    if buffer is None or buffer.shape[0] < n:
        buffer = np.empty((n + n // 8 + 256, dim), dtype=np.float32)
        keep = 0
    at = 0
    for v in vectors:
        size = len(v)
        if at + size > keep:
            lo = max(0, keep - at)
            buffer[at + lo:at + size] = v.matrix()[lo:]
        at += size
    return buffer[:n], buffer
