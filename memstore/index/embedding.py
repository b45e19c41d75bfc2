"""Where a store's missing vectors come from: the embedding cache, a background encode, or the
model within a time budget.

A read may wait only so long (``daemon.read_wait_seconds``), the daemon encodes in worker
processes between requests, and an interrupted build must keep what it paid for: this module
holds those rules (the cache saved as it goes, vectors offered from another thread kept until a
refresh takes them, the probe a read's wait makes of a large backlog). Apart from
``store_index``, which decides which memories need a vector and puts the vectors into the index.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DiskFull
from ..store.model import Memory
from .embcache import EmbeddingCache
from .embedder import Embedder
from .keyword_build import KW_DEFER

SAVE_EVERY_S = 1.0  # new vectors reach the embedding cache at least this often: a kill loses little
# A read that finds more than KW_DEFER memories without a vector embeds only this many before it
# answers (partial): its wait cannot finish them, and the daemon embeds the rest behind it. The
# probe still shows at once whether the model works.
EMBED_PROBE = 4

# id -> (parsed memory, doc key, text key): the index's memo of what it hashed.
MemoKeys = dict[str, tuple[Memory, str, str]]
# (store root, memories with a vector, memories): how far embedding has come, for a progress bar.
Progress = Callable[[Any, int, int], None]


class Embedding:
    """The vectors one store's index lacks. ``no_room`` is told when the device is too full to
    save the cache (the vectors are used all the same)."""

    def __init__(self, embedder: Embedder | None, folder: Path, key: bytes, root: Path,
                 no_room: Callable[[DiskFull], None]) -> None:
        self.embedder = embedder
        self._folder = folder
        self._key = key
        self._root = root
        self._no_room = no_room
        self._cache: EmbeddingCache | None = None
        # Vectors a background encode made (``offer``) for text keys ``waiting_texts`` handed
        # out, until a refresh puts them into the index and the embedding cache.
        self.wanted: dict[str, list[str]] = {}  # text key -> the waiting memories with that text
        self.ready: dict[str, np.ndarray] = {}
        # Text keys a read encoded ahead of the background encode (``encode_ahead``): that encode
        # leaves them out (read from its feeding threads; only ever added to).
        self.ahead: set[str] = set()

    def cache(self) -> EmbeddingCache:
        assert self.embedder is not None
        if self._cache is None:
            self._cache = EmbeddingCache(self._folder / "embeddings", self.embedder.model_id, self.embedder.dim,
                                         secret=self._key)
        return self._cache

    # -- the daemon's background encode ------------------------------------------------------------
    def waiting_texts(self, pending: list[str], keys: MemoKeys, cache: EmbeddingCache | None) -> dict[str, str]:
        """Text key -> text of the ``pending`` memories that ``cache`` does not hold."""
        out: dict[str, str] = {}
        wanted: dict[str, list[str]] = {}
        for mid in pending:
            known = keys.get(mid)
            if known is not None and cache is not None and known[2] not in cache:
                out[known[2]] = known[0].text
                wanted.setdefault(known[2], []).append(mid)
        self.wanted = wanted
        return out

    def offer(self, keys: list[str], vecs: np.ndarray) -> None:
        """Vectors a background encode made, from any thread: kept for the next ``take_ready``."""
        for key, vec in zip(keys, vecs, strict=True):
            if key in self.wanted:
                self.ready[key] = vec

    def pick_ready(self, limit: int) -> tuple[list[str], list[str]]:
        """(the waiting memories whose vector is ready, at most about ``limit``; the text keys
        they were found by, to ``drop`` once a refresh took them)."""
        # Found from the ready vectors, not by scanning the waiting list: at 100k memories that
        # scan, every slice, took more of a core than the embedding left free.
        first: list[str] = []
        taken: list[str] = []
        for key in list(self.ready):
            if len(first) >= limit:
                break
            taken.append(key)
            first += self.wanted.get(key, ())
        return first, taken

    def drop(self, taken: list[str]) -> None:
        for key in taken:  # used, or its memories no longer wait (deleted, text changed)
            self.ready.pop(key, None)

    def encode_ahead(self, known: list[tuple[str, str, str]], budget: float) -> int:
        """Encode these (id, text, text key) now, in this process and in this order, for at
        most ``budget`` seconds, as ready vectors. Returns how many it encoded."""
        assert self.embedder is not None
        deadline = time.monotonic() + budget
        done = 0
        for mid, text, key in known:
            if time.monotonic() >= deadline:
                break
            if key not in self.ready:  # the background encode made it already: only to be put in
                self.ready[key] = self.embedder.encode([text])[0]
                self.ahead.add(key)
            self.wanted.setdefault(key, []).append(mid)
            done += 1
        return done

    # -- a refresh's embedding ----------------------------------------------------------------------
    def embed(self, keys: list[str], texts: list[str], budget: float | None, with_vector: int = 0, *,
              probe: bool = False, report: Progress | None = None,
              long_lived: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The texts' vectors, from the cache, a background encode (``offer``) or the model,
        and which of them are done: all, or (with a ``budget`` of seconds) those found or
        embedded within it. ``with_vector``: memories of the store that already have one (for the
        progress ``report``). Without a budget the worker processes may encode (a rebuild);
        with one, this process does, a part at a time (a read's wait). ``probe``: a read's
        wait, which embeds only ``EMBED_PROBE`` texts of a backlog over ``KW_DEFER``;
        ``long_lived``: this process (the daemon) embeds that backlog in the background after
        the read, so its worker processes start now, loading the model while the read runs."""
        assert self.embedder is not None
        # Resolving the model may export it first (seconds, once per machine): not the wait's.
        cache = self.cache()
        deadline = None if budget is None else time.monotonic() + budget
        out, missing = cache.get_many(keys)
        done = np.ones(len(keys), dtype=bool)
        done[missing] = False
        # Saved to the cache as it goes: embedding a large store takes minutes, and an
        # interrupted build (a kill, a read's time bound) must not lose what it paid for.
        unsaved: list[int] = []
        if self.ready and missing:
            for i in missing:
                vec = self.ready.get(keys[i])
                if vec is not None:
                    out[i], done[i] = vec, True
                    unsaved.append(i)
            missing = [i for i in missing if not done[i]]
        total = with_vector + len(keys)
        if not (missing or unsaved):
            report = None
        saved_at = time.monotonic()

        def save() -> None:
            try:
                cache.put_many([keys[i] for i in unsaved], out[unsaved])
            except DiskFull as exc:
                self._no_room(exc)  # the vectors are in ``out``: only the next process embeds again
            for i in unsaved:
                self.ready.pop(keys[i], None)

        backlog = probe and deadline is not None and len(missing) > KW_DEFER
        todo = missing[:EMBED_PROBE] if backlog else missing
        if backlog and long_lived:
            self.embedder.start_workers(len(missing))
        if report is not None:  # before the first part: a bar (or the line saying so) shows the whole wait
            report(self._root, with_vector + int(done.sum()), total)
        parts = self.embedder.encode_parts([texts[i] for i in todo], pool=deadline is None)
        try:
            while deadline is None or time.monotonic() < deadline:
                got = next(parts, None)
                if got is None:
                    break
                rows = [todo[j] for j in got[0]]
                out[rows] = got[1]
                done[rows] = True
                unsaved += rows
                if time.monotonic() - saved_at >= SAVE_EVERY_S:
                    save()
                    unsaved, saved_at = [], time.monotonic()
                if report is not None:
                    report(self._root, with_vector + int(done.sum()), total)
        finally:
            parts.close()  # the work not handed out yet is dropped
            if unsaved:
                save()
        if report is not None:
            report(self._root, with_vector + int(done.sum()), total)
        return out, done
