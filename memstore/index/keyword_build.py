"""The keyword index built in the background, and the scan lane that answers meanwhile.

A long-lived process whose keyword index lacks many of the catalog's documents (a fresh clone,
a big pull) builds the Whoosh index in a thread, into a folder of its own beside the live one,
and swaps it in when done; reads answer from ``scanlane`` until then. Apart from
``store_index`` because this is the one part of the index that runs on a thread of its own and
renames folders under ``.index/``: what it may touch, and when, is read here.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import DiskFull
from .keyword import BM25Params, KeywordIndex
from .scanlane import ScanLane

log = logging.getLogger("memstore.index")

# A long-lived process whose keyword index lacks more of the catalog's documents than this (a
# fresh clone, a big pull) builds the Whoosh index in the background, beside the old one, and
# answers meanwhile from a scan of the texts in memory (``scanlane``): Whoosh's writer takes ~4 s
# per 1k memories on 2 cores, the scan lane ~0.1 s, and their hits and scores are the same.
KW_DEFER = 256

Doc = tuple[str, str, str, list[str], str]  # (id, doc key, kind, tags, text)

_BUILDS = itertools.count(1)


class KeywordBuild:
    """A Whoosh index of a snapshot of the catalog, built by a thread into its own folder."""

    def __init__(self, folder: Path, params: BM25Params, docs: list[Doc]) -> None:
        self.folder = folder
        self.manifest = {mid: key for mid, key, *_ in docs}
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.done = threading.Event()
        self.started = False
        self._thread = threading.Thread(target=self._run, args=(params, docs), name="keyword-build", daemon=True)

    def start(self) -> None:
        self.started = True
        self._thread.start()

    def _run(self, params: BM25Params, docs: list[Doc]) -> None:
        t0 = time.monotonic()
        try:
            index = KeywordIndex(self.folder, params, fresh=True)
            if index.in_memory:  # no room for its files: nothing to swap in
                raise DiskFull("no space left on the device for the keyword index")
            try:
                index.apply(((mid, kind, tags, text) for mid, _key, kind, tags, text in docs), [])
            finally:
                index.close()
        except BaseException as exc:  # reported by the swap; reads keep the scan lane until then
            self.error = exc
        finally:
            self.seconds = time.monotonic() - t0
            self.done.set()


class KeywordBuilder:
    """One store's background build (at most one at a time) and its scan lane. ``docs`` gives
    the catalog's documents now and ``generation`` the catalog's generation they are of."""

    def __init__(self, folder: Path, docs: Callable[[], list[Doc]], generation: Callable[[], int]) -> None:
        self.dir = folder
        self._docs = docs
        self._generation = generation
        self.build: KeywordBuild | None = None
        # While a build runs, or is left to the daemon: the lane reads answer from.
        self.scan: ScanLane | None = None
        self._scan_gen = -1  # the catalog generation the scan lane holds
        self.inline = False  # build the keyword index in the call (rebuild, a failed build)

    @property
    def ours(self) -> str | None:
        """The folder name of the build of this process, which no clean-up may remove."""
        return self.build.folder.name if self.build is not None else None

    def start_planned(self) -> None:
        if self.build is not None and not self.build.started:
            self.build.start()

    def due(self) -> bool:
        """A build waits for the next refresh: planned and not started, or finished."""
        return self.build is not None and (self.build.done.is_set() or not self.build.started)

    def later(self, kw: dict[str, str | None], params: BM25Params, *, long_lived: bool,
              hands_over: bool, partial: bool = False) -> bool:
        """Whether the keyword plan ``kw`` is left to a background build (planned now if none
        runs; started by the next refresh), with the scan lane answering from the catalog
        meanwhile; False: apply it now. ``long_lived``: this process saves when idle (the
        daemon); ``hands_over``: it hands the store to a daemon it starts (a bounded wait);
        ``partial``: the catalog is not fully read yet (``Catalog.partial``), so the scan lane
        answers and the build waits for the whole store (one build, as after a full load)."""
        docs = None
        if self.build is None:
            if partial:
                self.scan_docs(None, params)
                return True
            if self.inline or sum(1 for key in kw.values() if key is not None) <= KW_DEFER:
                return False
            if not long_lived:
                # A one-shot process would exit before a build ends. One that hands the store
                # to a daemon it starts (a bounded wait: the CLI or MCP server before a daemon
                # runs) scans and leaves the build to that daemon; any other builds it now.
                if not hands_over:
                    return False
                self.scan_docs(None, params)
                return True
            docs = self._docs()
            # Named for this process and build: a workspace the daemon evicted and opened again
            # may still have a build of its own running.
            folder = self.dir / f"keyword.next-{os.getpid()}-{next(_BUILDS)}"
            self.build = KeywordBuild(folder, params, docs)
            log.info("%s: building the keyword index of %d memories in the background", self.dir, len(docs))
        self.scan_docs(docs, params)
        return True

    def scan_docs(self, docs: list[Doc] | None, params: BM25Params) -> None:
        """Bring the scan lane to the catalog's generation."""
        generation = self._generation()
        if self.scan is None or self._scan_gen != generation:
            if self.scan is None:
                self.scan = ScanLane(params)
            self.scan.set_docs(self._docs() if docs is None else docs)
            self._scan_gen = generation

    def take_done(self) -> KeywordBuild | None:
        """The build, once it has finished (None before). One that failed is not worth a second
        try in the background: its folder is removed and the next sync builds in the call."""
        build = self.build
        if build is None or not build.done.is_set():
            return None
        self.build = None
        if build.error is not None:
            log.warning("%s: building the keyword index failed (%s); built in the next call", self.dir, build.error)
            shutil.rmtree(build.folder, ignore_errors=True)
            self.inline = True
        return build

    def swap_in(self, build: KeywordBuild) -> Path:
        """Move the live keyword folder aside and the build's folder in its place (the caller
        holds the index lock and has closed the live index). Returns the live folder; the one
        set aside is removed by ``swapped``, once the lock is let go."""
        live = self.dir / "keyword"
        old = self.dir / f"keyword.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.replace(live, old)
        os.replace(build.folder, live)
        return live

    def swapped(self, build: KeywordBuild) -> None:
        """Remove the keyword folder ``swap_in`` set aside (after the index lock is let go)."""
        shutil.rmtree(self.dir / f"keyword.old-{os.getpid()}", ignore_errors=True)
        log.info("%s: keyword index of %d memories built in %.1f s", self.dir, len(build.manifest), build.seconds)
