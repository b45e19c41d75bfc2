"""Progress bars (embedding, a long import), shown on a terminal and nowhere else.

Embedding a store after a clone or a big pull takes seconds to minutes; a bar with rate and ETA
says why the machine is busy. Piped or logged output gets nothing: a bar there is noise that
tools would have to strip.
"""

from __future__ import annotations

from typing import Any, TextIO


class EmbedBars:
    """One bar per store being embedded, fed (store root, memories with a vector, memories)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._bars: dict[Any, Any] = {}

    def __call__(self, root: Any, done: int, total: int) -> None:
        bar = self._bars.get(root)
        if bar is None:
            if done >= total:
                return
            from tqdm import tqdm  # imported only when there is something to show

            bar = self._bars[root] = tqdm(total=total, initial=done, unit=" memories", desc="embedding",
                                          file=self.stream, leave=False)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
            del self._bars[root]


def _on_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real stream
        return False


def embed_progress(stream: TextIO) -> EmbedBars | None:
    """A bar on ``stream`` when it is a terminal; None otherwise."""
    return EmbedBars(stream) if _on_terminal(stream) else None


class CountBar:
    """A bar fed (done, total), for a loop the library runs (``import``): shown once the work is
    long enough to watch (over ``min_total`` items), closed at the end."""

    def __init__(self, stream: TextIO, desc: str, unit: str, min_total: int) -> None:
        self.stream, self.desc, self.unit, self.min_total = stream, desc, unit, min_total
        self._bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if total <= self.min_total:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=self.desc, unit=self.unit, file=self.stream, leave=False)
        self._bar.update(done - self._bar.n)
        if done >= total:
            self._bar.close()


def count_progress(stream: TextIO, desc: str, unit: str, min_total: int = 50) -> CountBar | None:
    """A bar on ``stream`` when it is a terminal; None otherwise."""
    return CountBar(stream, desc, unit, min_total) if _on_terminal(stream) else None
