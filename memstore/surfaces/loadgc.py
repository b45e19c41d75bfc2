"""The cyclic garbage collector around loading a store, for the long-lived surfaces (the daemon,
the MCP server); the CLI, which exits after its answer, simply turns the collector off.

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
import gc
import threading
from collections.abc import Iterator


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
