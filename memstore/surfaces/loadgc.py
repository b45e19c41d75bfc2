"""The cyclic garbage collector around loading a store, for the long-lived surfaces (the daemon,
the MCP server); the CLI, which exits after its answer, simply turns the collector off. Beside it,
the daemon's C heap (``tune_heap``, ``give_back_heap``: glibc's malloc settings and trim).

Loading a store makes ~13 tracked objects a memory, all long-lived. The collector runs a full
collection each time the long-lived objects grow by a quarter, so a load rescans what it has
already made, again and again: at 100k memories 14 full collections, 4.3 s of a 15 s first
read, and a ~1 s pause in some reads after it (docs/decisions/gc-during-first-read.md). So a load runs with the
collector off. A surface that keeps the store (the daemon) then runs one collection and freezes
the survivors (``gc.freeze``): later collections skip them. A frozen object in a reference cycle
is never freed, so dropping a kept store must ``thaw`` first; a surface that drops the store
after its answer (the MCP server before a daemon runs) does not freeze, and turns the collector
back on only once the answer has gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
import threading
from collections.abc import Callable, Iterator


class LoadGC:
    """Counts the loads under way: the collector is off while any runs, back on after the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loads = 0
        self._was_enabled = True

    def pause(self) -> None:
        with self._lock:
            if self._loads == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._loads += 1

    def settle(self, keep: bool = True) -> None:
        """One load has ended; ``keep``: what it loaded stays (collect once, then freeze it)."""
        with self._lock:
            self._loads -= 1
            if self._loads:
                return
            if keep:
                gc.collect()
                gc.freeze()
                give_back_heap()  # what the load parsed and dropped (catalog.json, meta.json)
            if self._was_enabled:
                gc.enable()

    def thaw(self) -> None:
        with self._lock:
            gc.unfreeze()

    @contextlib.contextmanager
    def transient(self, after: float = 0.25) -> Iterator[None]:
        """A load whose store is dropped after the answer: nothing to freeze. The collector comes
        back on ``after`` seconds later, once the answer is on its way: the load's objects all
        sit in the youngest generation, so the first collection walks them all (~0.2 s at 10k
        memories) and must not delay the answer."""
        self.pause()
        try:
            yield
        finally:
            timer = threading.Timer(after, self.settle, kwargs={"keep": False})
            timer.daemon = True
            timer.start()


# The C heap beside Python's objects (glibc's malloc: large strings, dict tables, numpy arrays
# under 32 MB). A long-lived process that loads a store and serves requests on threads keeps
# freed memory in it: glibc returns only the top of a heap to the kernel, and gives each thread
# that contends for a lock an arena of its own (up to 8 per core), each keeping its own freed
# pages. At 100k memories the daemon held ~40 MB more than one library process doing the same
# reads (bench/rss.py). Neither call exists outside glibc; there both are left undone.
_M_MMAP_THRESHOLD = -3  # mallopt's parameters (malloc.h)
_M_ARENA_MAX = -8
DAEMON_ARENAS = 2
# Blocks from this size are mapped on their own and unmapped when freed. glibc's own threshold
# starts at 128 KiB and rises to the largest block freed (up to 32 MiB): after the first read
# dropped a 100k-row temporary (a dict of positions, ~5 MB) every later one came from the heap,
# and each read or context call whose filters rebuilt the rows left ~7 MB more resident there.
MMAP_FROM = 1 << 20


def _glibc(name: str) -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None), name)  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # another C library (musl has no malloc_trim)
        return None


def tune_heap(arenas: int = DAEMON_ARENAS) -> None:
    """For a long-lived process, before its threads start: they share ``arenas`` malloc arenas
    (the daemon's work is serialised by its locks and the GIL, so more arenas only keep more
    freed memory), and blocks of ``MMAP_FROM`` and more go back to the kernel when freed."""
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(_M_ARENA_MAX, arenas)
        mallopt(_M_MMAP_THRESHOLD, MMAP_FROM)


def give_back_heap() -> None:
    """Hand the free pages of every malloc arena back to the kernel (``malloc_trim(0)``): after
    a load, whose parse leaves holes between what it keeps, and after a flush, whose serialising
    of 100k records makes and drops tens of MB. A few milliseconds; never on a request's path."""
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)
