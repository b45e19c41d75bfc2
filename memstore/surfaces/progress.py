"""Progress on stderr (the model's one-time export, embedding, a long import): never on
stdout, which carries the answer.

Embedding a store after a clone or a big pull takes seconds to minutes, and the model's first
export on a machine 10-40 s; a first command silent that long looks hung. So a long wait gets
one line saying what runs and that it runs once, piped or not (stderr is for people and logs),
and on a terminal a bar with rate and ETA too. Short work says nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

# Memories left to embed at which a command says so: ~1 s of encoding on 2 cores, less is a
# pause nobody needs explained.
ANNOUNCE_FROM = 100


def say(stream: TextIO) -> Callable[[str], None]:
    """A one-line notice on ``stream`` (``memstore: ...``), for a wait a person should not guess at."""

    def line(message: str) -> None:
        try:
            stream.write(f"memstore: {message}\n")
            stream.flush()
        except (OSError, ValueError):  # a closed stderr: the notice is not worth failing the command
            pass

    return line


class EmbedBars:
    """One bar per store being embedded, fed (store root, memories with a vector, memories); off
    a terminal, only the line that says embedding has started."""

    def __init__(self, stream: TextIO, bars: bool = True) -> None:
        self.stream = stream
        self.bars = bars
        self._bars: dict[Any, Any] = {}
        self._said: set[Any] = set()

    def __call__(self, root: Any, done: int, total: int) -> None:
        bar = self._bars.get(root)
        if bar is None:
            if done >= total:
                return
            if total - done >= ANNOUNCE_FROM and root not in self._said:
                self._said.add(root)
                say(self.stream)(f"embedding {total - done} memories of {root} for search (once: their "
                                 "vectors are kept in .index/ for later reads)")
            if not self.bars:
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


def embed_progress(stream: TextIO, *, announce: bool = False) -> EmbedBars | None:
    """A bar on ``stream`` when it is a terminal; with ``announce`` (a command a person waits on),
    also the line that says embedding started, piped or not. None when there is nothing to show."""
    tty = _on_terminal(stream)
    return EmbedBars(stream, bars=tty) if tty or announce else None


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
