"""Each row's nearest other rows, remembered, so the association chain need not read the whole
matrix for every hop.

A hop from row ``s`` moves to the most similar other row if that similarity reaches the hop's
bar (0.35 and more). Finding it is a matrix-vector product over every row: ~3 ms at 100k
memories, six of them per read (three chains, two hops) — a third of a read's time there.
The answer depends only on the stored vectors, so it is kept per row: the rows at or above
the lowest bar, best first, at most ``K``, and kept exact as rows come and go (a new row is
compared with every row once and slotted into the lists it belongs to; a removed one is struck
from them). A row not yet looked at, or whose kept list runs out, falls back to the product,
whose answer is the same one, and the list is filled from it on the way; the daemon also fills
lists ahead when idle (``fill``).

Rows are named by tokens (the store's position and the vector's faiss label, ``Rows.tokens``):
a token never changes its vector, so comparing the tokens of the rows before and after a change
tells which rows left and which came, however the row numbers shifted.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Sequence

import numpy as np

K = 8  # kept per row: a chain skips at most the rows it visited and the rows out of scope
ADD_LIMIT = 32  # more new rows than this at once (an import, a rebuild): start over, lazily


def best_hop(sims: np.ndarray, bar: float, visited: Collection[int],
             mask: np.ndarray | None) -> tuple[int, float] | None:
    """The hop given a row's similarities to every row (overwritten): the most similar row
    neither visited nor masked, with its similarity, when that reaches ``bar``."""
    sims[list(visited)] = -np.inf
    if mask is not None:
        sims[mask] = -np.inf
    nxt = int(np.argmax(sims))
    sim = float(sims[nxt])
    return (nxt, sim) if sim >= bar else None


class Neighbours:
    """The kept lists for one row space. Not thread-safe: callers hold the workspace lock."""

    def __init__(self, bar: float, owner: tuple[object, ...] = ()) -> None:
        self.bar = float(bar)
        self.owner = owner  # what the rows came from; another owner means another row space
        # Arrays with room to grow: a write appends a row in place. Reallocating them on every
        # write (~20 MB of temporaries at 100k) grew the daemon's heap by ~15 MB per write.
        self.n = 0
        self._tokens = np.zeros(0, dtype=np.int64)
        self.nbr = np.zeros((0, K), dtype=np.int32)
        self.sim = np.zeros((0, K), dtype=np.float32)
        self.count = np.zeros(0, dtype=np.int16)  # entries kept per row; -1: not looked at yet
        self.cut = np.zeros(0, dtype=bool)  # True: more rows reach the bar than are kept

    def __len__(self) -> int:
        return self.n

    def serves(self, owner: Sequence[object]) -> bool:
        """Are these lists for rows taken from ``owner`` (the very same vector indexes)?"""
        return len(owner) == len(self.owner) and all(map(operator.is_, owner, self.owner))

    @property
    def tokens(self) -> np.ndarray:
        return self._tokens[: self.n]

    def known(self) -> int:
        return int((self.count[: self.n] >= 0).sum())

    # -- following the rows as they change ---------------------------------------------------
    def sync(self, tokens: np.ndarray, matrix: np.ndarray) -> None:
        """Bring the lists in line with the rows ``tokens`` names (``matrix`` holds them)."""
        old = self.tokens
        n0, n1 = len(old), len(tokens)
        if n0 == n1 and np.array_equal(old, tokens):
            return
        if not n0:  # a first look: every list waits until a hop or a pause needs it
            self._reset(tokens)
            return
        if n0 < n1 and np.array_equal(old, tokens[:n0]):  # rows were only appended: in place
            if n1 - n0 > ADD_LIMIT:
                self._reset(tokens)
                return
            self._room(n1)
            self._tokens[n0:n1] = tokens[n0:]
            self.count[n0:n1] = -1
            self.cut[n0:n1] = False
            self.n = n1
            for row in range(n0, n1):
                self._add(row, matrix)
            return
        if not (bool(np.all(tokens[1:] > tokens[:-1])) and bool(np.all(old[1:] > old[:-1]))):
            self._reset(tokens)  # tokens out of order: not rows this structure can follow
            return
        at = np.searchsorted(tokens, old)
        clipped = np.minimum(at, max(n1 - 1, 0))
        stays = (at < n1) & (tokens[clipped] == old) if n1 else np.zeros(n0, dtype=bool)
        kept_to = np.where(stays, at, -1)
        seen = np.zeros(n1, dtype=bool)
        seen[kept_to[stays]] = True
        added = np.flatnonzero(~seen)
        if len(added) > ADD_LIMIT:
            self._reset(tokens)
            return
        self._move(kept_to, tokens)
        for row in added.tolist():
            self._add(int(row), matrix)

    def _alloc(self, n: int) -> None:
        cap = n + n // 8 + 64
        self._tokens = np.zeros(cap, dtype=np.int64)
        self.nbr = np.zeros((cap, K), dtype=np.int32)
        self.sim = np.zeros((cap, K), dtype=np.float32)
        self.count = np.full(cap, -1, dtype=np.int16)
        self.cut = np.zeros(cap, dtype=bool)
        self._cursor = 0  # where ``fill`` looks for rows not looked at yet

    def _room(self, n: int) -> None:
        if n <= len(self.count):
            return
        live = self.n
        arrays = self._tokens, self.nbr, self.sim, self.count, self.cut
        self._alloc(n)
        for new, old in zip((self._tokens, self.nbr, self.sim, self.count, self.cut), arrays, strict=True):
            new[:live] = old[:live]

    def _reset(self, tokens: np.ndarray) -> None:
        self._alloc(len(tokens))
        self.n = len(tokens)
        self._tokens[: self.n] = tokens

    def _move(self, kept_to: np.ndarray, tokens: np.ndarray) -> None:
        """Old row ``i`` is new row ``kept_to[i]`` (-1: gone); rows not named are new."""
        n0, n1 = self.n, len(tokens)
        old_nbr, old_sim, old_count, old_cut = self.nbr[:n0], self.sim[:n0], self.count[:n0], self.cut[:n0]
        self._alloc(n1)
        self.n = n1
        self._tokens[:n1] = tokens
        nbr, sim, count, cut = self.nbr, self.sim, self.count, self.cut
        stays = kept_to >= 0
        dest = kept_to[stays]
        if n0:
            live = np.arange(K)[None, :] < old_count[:, None]
            target = np.where(live, kept_to[np.clip(old_nbr, 0, None)], -1)
            nbr[dest] = target[stays]
            sim[dest] = old_sim[stays]
            count[dest] = old_count[stays]
            cut[dest] = old_cut[stays]
            # Lists that named a row now gone: strike it. A list cut short may have had the
            # next row beyond its end; it is looked at again when needed.
            struck = np.flatnonzero(((target < 0) & live)[stays].any(axis=1))
            for row in dest[struck].tolist():
                if cut[row]:
                    count[row] = -1
                    continue
                keep = nbr[row, : count[row]] >= 0
                n = int(keep.sum())
                nbr[row, :n] = nbr[row, : count[row]][keep]
                sim[row, :n] = sim[row, : count[row]][keep]
                count[row] = n

    def _add(self, row: int, matrix: np.ndarray) -> None:
        """A new row: its own list, and its place in every kept list it belongs to."""
        sims = matrix @ matrix[row]
        self._fill(row, sims)
        for other in np.flatnonzero(sims >= self.bar).tolist():
            if other != row and self.count[other] >= 0:
                self._insert(other, row, float(sims[other]))

    def _insert(self, row: int, new: int, s: float) -> None:
        c = int(self.count[row])
        entries = list(zip(self.nbr[row, :c].tolist(), self.sim[row, :c].tolist(), strict=True))
        entries.append((new, s))
        entries.sort(key=lambda e: (-e[1], e[0]))
        if len(entries) > K:
            entries = entries[:K]
            self.cut[row] = True
        for j, (r, v) in enumerate(entries):
            self.nbr[row, j] = r
            self.sim[row, j] = v
        self.count[row] = len(entries)

    def _fill(self, row: int, sims: np.ndarray) -> None:
        """Row ``row``'s list from its similarities to every row (its own included)."""
        cand = np.flatnonzero(sims >= self.bar)
        cand = cand[cand != row]
        self.cut[row] = len(cand) > K
        if len(cand) > K:
            cand = cand[np.argpartition(-sims[cand], K - 1)[:K]]
        order = np.lexsort((cand, -sims[cand]))  # best first; equal ones in row order, as argmax
        cand = cand[order]
        self.nbr[row, : len(cand)] = cand
        self.sim[row, : len(cand)] = sims[cand]
        self.count[row] = len(cand)

    def fill(self, matrix: np.ndarray, budget: int) -> int:
        """Fill up to ``budget`` lists of rows not looked at yet, with one matrix product: work
        done ahead in a pause (the daemon when idle), so later hops find their answers kept.
        Returns how many rows it filled; 0 when every row is known."""
        todo = np.flatnonzero(self.count[self._cursor: self.n] < 0)[:budget] + self._cursor
        if not len(todo) and self._cursor:
            self._cursor = 0  # rows before the cursor may have been struck since
            todo = np.flatnonzero(self.count[: self.n] < 0)[:budget]
        if not len(todo):
            return 0
        block = matrix[todo] @ matrix.T
        for j, row in enumerate(todo.tolist()):
            self._fill(row, block[j])
        self._cursor = int(todo[-1]) + 1
        return len(todo)

    # -- a hop -------------------------------------------------------------------------------
    def step(self, row: int, matrix: np.ndarray, bar: float, visited: Collection[int],
             mask: np.ndarray | None) -> tuple[int, float] | None:
        """The hop from ``row``: the most similar row neither visited nor masked, with its
        similarity, when that reaches ``bar``; None otherwise. The same answer as an argmax
        over ``matrix @ matrix[row]``, which is what it costs when the list cannot tell."""
        c = int(self.count[row]) if bar >= self.bar and row < self.n else -2
        if c >= 0:
            for r, s in zip(self.nbr[row, :c].tolist(), self.sim[row, :c].tolist(), strict=True):
                if r in visited or (mask is not None and mask[r]):
                    continue
                return (r, s) if s >= bar else None
            if not self.cut[row]:
                return None  # no other row reaches the lowest bar
        sims = matrix @ matrix[row]
        if c != -2:
            self._fill(row, sims)
        return best_hop(sims, bar, visited, mask)
