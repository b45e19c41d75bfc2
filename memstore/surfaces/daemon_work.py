"""The daemon's work besides answering: loading the model at start, embedding in the background
what a read or a pull left without a vector, and in pauses saving the projections and filling
the association chain's neighbour lists.

All of it yields to requests: it runs after a connection's answer is sent (``after_reply``),
in slices under the workspace lock (a request waits at most one slice), or only while no
request is under way. What it may not do is take the daemon down: a failure is logged and the
next read does the work itself.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from . import client
from .daemon_stores import Entry, Workspaces
from .loadgc import give_back_heap

log = logging.getLogger("memstore.surfaces.daemon")

# A read's first load of a large store may leave files unread (its answer says `partial`): the
# rest is parsed after the reply in slices of this many files (~0.1 s), each under the
# workspace lock, so a request waits at most one slice (and one completing any that remain).
READ_SLICE = 2000
FILL_SLICE = 32  # neighbour lists filled per step when idle: ~10 ms at 100k memories, then a look for requests
# Embedding in the background after a clone or a big pull goes in slices of this many seconds,
# each under the workspace lock: a request waits at most one slice for it.
EMBED_SLICE = 0.25

# Per connection thread: work (the background embedding) that starts once the answer is sent.
_serving = threading.local()


@contextlib.contextmanager
def replying() -> Iterator[None]:
    """Serve one connection in the block; the work ``after_reply`` deferred meanwhile runs when
    it ends (the answer sent), in order."""
    _serving.after_reply = []
    try:
        yield
    finally:
        deferred, _serving.after_reply = _serving.after_reply, None
        for work in deferred:
            try:
                work()
            except Exception:  # e.g. the background embedding: the next read starts it again
                log.exception("work after the reply failed")


def after_reply(work: Callable[[], None], *, first: bool = False) -> None:
    """Run ``work`` once this connection's answer is sent (now, when not serving one)."""
    deferred: list[Callable[[], None]] | None = getattr(_serving, "after_reply", None)
    if deferred is None:
        work()
    elif first:
        deferred.insert(0, work)
    else:
        deferred.append(work)


def one_blas_thread() -> None:
    """Run the BLAS libraries loaded so far (numpy's, faiss's) on one thread. A read's matrix
    passes are one query against the rows (10k x 384: ~0.7 ms on one core); split over two
    threads, each waits for its worker, which on a busy 2-core machine is often not running:
    16 ms at the median under load 6 (0.7 ms on one thread), and idle workers spin against
    the rest of the request. Memory bandwidth bounds the pass at 100k, so a second thread
    buys nothing there either."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")


def warm_up() -> None:
    """Load the model and the heavy modules now, so the first answer is as fast as the rest."""
    from ..index.embedder import EmbedderUnavailable, get_embedder
    from ..read import retrieve  # noqa: F401
    from ..store import schemas
    from ..verbs import api  # noqa: F401

    one_blas_thread()
    schemas.warm()
    t0 = time.perf_counter()
    try:
        get_embedder().encode(["warm up"])
    except EmbedderUnavailable as exc:
        log.warning("no embedder: reads will be keyword-only (%s)", exc)
    log.info("model loaded in %.1f s", time.perf_counter() - t0)


class Background:
    """The background work over the daemon's workspaces. ``stop`` ends it at its next slice;
    ``activity`` answers (requests under way, when the last one ended), so idle work stops as
    soon as a request comes."""

    def __init__(self, stores: Workspaces, stop: threading.Event, activity: Callable[[], tuple[int, float]]) -> None:
        self._stores = stores
        self._stop = stop
        self._activity = activity
        # Guards Entry.embedding and the shared indexes a background thread embeds now (ids):
        # every repo's workspace holds the global store's one index, and two threads must not
        # embed it twice.
        self._state = threading.Lock()
        self._embedding_ids: set[int] = set()
        self._flushing = threading.Lock()  # one flush at a time
        self._filling = threading.Lock()  # one idle fill at a time
        self._projecting = threading.Lock()  # one postings projection at a time

    # -- embedding in the background --------------------------------------------------------------
    def warm_stores(self, cwd: str) -> None:
        """Open the workspace a client read from (with the client's environment, which this
        process inherited, so its requests find this entry) and embed what has no vector yet:
        the in-process read that started this daemon answered partially and left it to us."""
        from ..read.scope import open_scope
        from ..read.tuning import params_from_config

        try:
            entry = self._stores.entry_for({"cwd": cwd, "env": client.forwarded_env()})
            with entry.using():
                entry.ws.embed_wait = 0.0  # the catalogs and keyword indexes now; vectors in slices
                open_scope(entry.ws, True, params_from_config(entry.ws.config))
            self.embed_behind(entry)
        except Exception:  # only a head start: the first request opens the workspace anyway
            log.exception("opening %s at start failed", cwd)

    def embed_after_reply(self, entry: Entry) -> None:
        """``read_rest`` and ``embed_behind`` once this connection's answer is sent: started
        earlier, the encoder (starting its worker processes, the GIL) competes with rendering the
        answer the agent waits for."""
        after_reply(functools.partial(self.read_rest, entry))
        after_reply(functools.partial(self.embed_behind, entry))  # a second start finds it under way

    def read_rest(self, entry: Entry) -> None:
        """Parse the files a read's first load left unread (``Catalog.partial``), a slice at a
        time under the workspace lock, then bring each store's index in line with the whole
        catalog: from then on answers are complete. A read that comes meanwhile parses what it
        looks for and is partial still; any other request completes the rest itself."""
        from ..read.indexes import store_index
        from ..read.tuning import params_from_config

        t0 = time.perf_counter()
        read = 0
        while not self._stop.is_set():
            with entry.lock:
                if entry.evicted:
                    return
                partial = [(scope, si) for scope, si in list(entry.ws.indexes.items()) if si.catalog.partial]
                if not partial:
                    break
                scope, si = partial[0]
                before = si.catalog.unread
                done = si.catalog.complete(limit=READ_SLICE)
                read += before - si.catalog.unread
                if done is not None:
                    # The scan lane takes in the whole store; vectors are left to embed_behind.
                    store_index(entry.ws, scope, params_from_config(entry.ws.config)).refresh(walk=False, budget=0.0)
            time.sleep(0.002)  # the lock is not fair: a request waiting for it gets it now
        if read:
            log.info("read the %d memory files a first read left unread in %.1f s", read, time.perf_counter() - t0)

    def embedding(self, entry: Entry) -> bool:
        """Is any of the workspace's indexes being embedded in the background (by any thread)?"""
        with self._state:
            return entry.embedding or any(id(si) in self._embedding_ids for si in list(entry.ws.indexes.values()))

    def embed_behind(self, entry: Entry) -> None:
        """Start embedding the workspace's memories that have no vector yet (a read or a refresh
        ran out of its wait), unless that is under way already or nothing waits."""
        if not any(si.embedding_pending for si in list(entry.ws.indexes.values())):
            return
        with self._state:
            if entry.embedding or entry.evicted:
                return
            entry.embedding = True
        threading.Thread(target=self._embed_rest, args=(entry,), daemon=True).start()

    def _embed_rest(self, entry: Entry) -> None:
        """Embed what waits: every waiting text goes to the encoder at once (the worker
        processes, or this process's encoder, on a thread of its own and outside the workspace
        lock), and what comes back is put into the indexes every ``EMBED_SLICE`` under the lock,
        so a request waits at most one such step. The vectors reach the embedding cache on disk
        as they are put in, and the index is saved in the next pause."""
        from ..index.embedder import EmbedderUnavailable

        run = _Run(time.monotonic())
        claimed: set[int] = set()
        mine: dict[int, Any] = {}  # the indexes this thread embedded
        try:
            while not self._stop.is_set():
                with entry.lock:
                    if entry.evicted:
                        return
                    pending = [si for si in entry.ws.indexes.values() if si.embedding_pending]
                    with self._state:  # an index another workspace's thread embeds is left to it
                        waiting = [si for si in pending if id(si) in claimed or id(si) not in self._embedding_ids]
                        claimed.update(id(si) for si in waiting)
                        self._embedding_ids.update(claimed)
                    mine.update((id(si), si) for si in waiting)
                    work = [si.waiting_texts() for si in waiting]
                if not waiting:
                    log.info("embedded the waiting memories in %s", run.summary())
                    return
                texts = {key: text for part in work for key, text in part.items()}
                if texts:
                    log.info("embedding the waiting memories in the background: %d texts", len(texts))
                try:
                    self._stream(entry, waiting, texts, run)
                except EmbedderUnavailable:
                    texts = {}  # a refresh of its own meets the failure and goes keyword-only
                if not texts:
                    # What waits is in the embedding cache already (or the encoder failed): a
                    # slice of refresh takes it from there.
                    with entry.lock:
                        for si in waiting:
                            if not entry.evicted and si.embedding_pending:
                                si.refresh(walk=False, budget=EMBED_SLICE)
                while self._take_ready(entry, waiting, run):
                    time.sleep(0.005)  # the lock is not fair: a request waiting for it gets it now
        except Exception:  # reads embed what they meet themselves; the daemon lives on
            log.exception("embedding in the background failed")
        finally:
            if mine:
                # A keyword build that waited for the vectors starts now, not at the next
                # request; not in a daemon on its way out (a build cut short is only a folder to
                # clean up) nor in an evicted workspace (one sharing the index starts it later).
                with entry.lock:
                    if not (self._stop.is_set() or entry.evicted):
                        for si in mine.values():
                            si.start_keyword_build()
            with self._state:
                entry.embedding = False
                self._embedding_ids -= claimed

    def _stream(self, entry: Entry, waiting: list[Any], texts: dict[str, str], run: _Run) -> None:
        """Encode ``texts`` on a thread of its own and put the vectors in as they come. Not on
        this one: putting them in waits for the workspace lock (behind a read) and costs ~80 ms
        a step, and the in-process encoder stood still meanwhile (10k texts, one worker: the
        whole took 1.8x the encoder alone)."""
        if not texts:
            return
        keys, values = list(texts), list(texts.values())
        made: queue.SimpleQueue[Any] = queue.SimpleQueue()
        cancel = threading.Event()
        run.handed += len(keys)

        def skip(i: int) -> bool:
            # A read's keyword candidates, encoded by the read while this encode runs: encoded
            # here too, they cost the workers as much again (every new query's 20, at 10k).
            return all(si.made_ahead(keys[i]) for si in waiting)

        threading.Thread(target=_encode_into, args=(waiting[0].embedder, values, made, cancel, run, skip),
                         name="embed-encode", daemon=True).start()
        put_at = time.monotonic()
        try:
            while True:
                try:
                    got = made.get(timeout=EMBED_SLICE)
                except queue.Empty:
                    got = ()
                if got is None:
                    run.last = time.monotonic()
                    return
                if isinstance(got, BaseException):
                    raise got
                if got:
                    idx, vecs = got
                    run.first = run.first or time.monotonic()
                    run.encoded += len(idx)
                    part = [keys[i] for i in idx]
                    for si in waiting:
                        si.offer(part, vecs)
                if self._stop.is_set() or entry.evicted:
                    return
                if time.monotonic() - put_at >= EMBED_SLICE:
                    self._take_ready(entry, waiting, run)
                    put_at = time.monotonic()
        finally:
            cancel.set()  # the encoder drops what it has not handed out yet

    def _take_ready(self, entry: Entry, waiting: list[Any], run: _Run) -> bool:
        """One step of putting offered vectors into the indexes; False when none are left."""
        t0 = time.monotonic()
        c0 = time.thread_time()
        try:
            with entry.lock:
                if entry.evicted:
                    return False
                more = False
                for si in waiting:
                    more = si.take_ready() or more
                return more
        finally:
            run.putting += time.monotonic() - t0
            run.putting_cpu += time.thread_time() - c0

    # -- idle work --------------------------------------------------------------------------------
    def flushing(self) -> bool:
        """A flush is under way (the accept loop starts no second one)."""
        return self._flushing.locked()

    def idle_work(self) -> None:
        """What a pause is for: save the projections, write the postings projections, then fill
        neighbour lists, each until a request comes."""
        self.flush_all()
        # Its own thread, for the projection's steps run at the lowest priority and a thread
        # cannot take a priority back: the fill after it holds a store's lock a slice at a time,
        # and a request waiting for that lock must not wait on a thread at nice 19.
        projecting = threading.Thread(target=self.project_all, daemon=True)
        projecting.start()
        projecting.join()
        self.fill_all()

    def project_all(self) -> None:
        """Idle work: write the postings projection of every keyword index's large segments
        (``index.postings``), a step of ~10 ms of CPU at a time (a request waits at most one
        step for the interpreter), on this thread at the lowest CPU priority. A request stops
        it; the next pause takes it up where it stopped. Once per segment: ~2 s of CPU at 100k
        memories, after which a query's first read takes its words' postings from the file
        (~1.3 ms of CPU against ~13 ms decoding Whoosh's blocks)."""
        if not self._projecting.acquire(blocking=False):
            return
        try:
            _, since = self._activity()
            for entry in self._stores.all():
                with entry.lock:
                    if entry.evicted:
                        continue
                    # Not while a keyword build stands in for the index (the scan lane answers).
                    indexes = {id(si.keyword): si.keyword for si in list(entry.ws.indexes.values())
                               if si.keyword is not None and si.scan is None}
                    builds = []
                    for kw in indexes.values():
                        try:
                            builds += [(kw, build) for build in kw.projection_builds()]
                        except Exception as exc:  # damaged or foreign files: the next read heals them
                            log.info("%s: no postings projection now (%s)", kw.folder, exc)
                for kw, build in builds:
                    _lower_priority()
                    while not build.done:
                        active, last = self._activity()
                        if active or last != since or self._stop.is_set():
                            return  # kept by its index: the next pause goes on with it
                        build.step()
                    with entry.lock:
                        size = None if entry.evicted else kw.projected(build)
                    if size is not None:
                        log.info("%s: postings projection of %d postings written (%.1f MB, %.1f s of CPU)",
                                 kw.folder, build.postings, size / 1e6, build.cpu)
        except Exception:  # idle work must never take the daemon down; reads decode the blocks
            log.exception("writing the postings projection failed")
        finally:
            self._projecting.release()

    def flush_all(self) -> None:
        """Save the projections held in memory, so a process without the daemon starts warm."""
        with self._flushing:
            for entry in self._stores.all():
                # What to save is taken under the workspace lock; the writing (seconds at 100k
                # memories) happens without it, so a request arriving meanwhile is not held up.
                with entry.lock:
                    try:
                        saves = entry.ws.flush_later()
                    except Exception:  # a projection that fails to save is rebuilt by the next reader
                        log.exception("flush failed")
                        continue
                for save in saves:
                    try:
                        save()
                    except Exception:
                        log.exception("flush failed")
            give_back_heap()  # the records serialised for the saves

    def fill_all(self) -> None:
        """Idle work: fill the association chain's neighbour lists of every workspace a slice at
        a time, stopping as soon as a request comes (it waits at most one slice). Reads then
        find every hop kept: at 100k memories a read whose seeds were never met costs ~10 ms
        more without it. Filling 100k rows takes ~40 s of CPU, once per daemon."""
        from ..read.indexes import fill_neighbours

        if not self._filling.acquire(blocking=False):
            return
        done, t0 = 0, time.monotonic()
        try:
            _, since = self._activity()
            for entry in self._stores.all():
                while True:
                    active, last = self._activity()
                    if active or last != since or self._stop.is_set():
                        return
                    with entry.lock:
                        n = 0 if entry.evicted else fill_neighbours(entry.ws, FILL_SLICE)
                    if not n:
                        break
                    done += n
        except Exception:  # idle work must never take the daemon down; reads fill lists themselves
            log.exception("filling neighbour lists failed")
        finally:
            self._filling.release()
            if done:
                log.info("filled %d neighbour lists in %.1f s", done, time.monotonic() - t0)


def _lower_priority() -> None:
    """This thread at the lowest CPU priority (Linux sets a thread's nice value by its id):
    idle work yields the cores to the daemon's requests and the encoder's workers."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class _Run:
    """When one background embedding started, got its first and last vectors, and how long
    putting them into the indexes took (waiting for the workspace lock included): the log's
    account of where the time went (bench/RESULTS.md "Background embedding against the
    encoder pool")."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.first = 0.0
        self.last = 0.0
        self.putting = 0.0
        self.putting_cpu = 0.0  # of that, this process's CPU (the rest: waiting for the lock, the disk)
        self.encoding_cpu = 0.0  # the encoding thread's CPU: the encoder's when in-process, else feeding it
        self.handed = 0  # texts handed to the encoder
        self.encoded = 0  # of them, encoded (the rest a read encoded first)

    def summary(self) -> str:
        end = time.monotonic()
        if not self.first:
            return f"{end - self.start:.1f} s"
        last = self.last or end
        return (f"{end - self.start:.1f} s (first vectors after {self.first - self.start:.1f} s, the last after "
                f"{last - self.start:.1f} s; {self.putting:.1f} s putting them into the index, "
                f"{self.putting_cpu:.1f} s of it CPU, beside the encoding thread's {self.encoding_cpu:.1f} s of CPU; "
                f"{self.encoded} of {self.handed} texts encoded, the rest by reads first)")


def _encode_into(embedder: Any, texts: list[str], made: queue.SimpleQueue[Any], cancel: threading.Event,
                 run: _Run, skip: Callable[[int], bool] | None = None) -> None:
    """Put ``texts``' vectors into ``made`` a part at a time, then None (or the exception that
    stopped the encoder); stop early once ``cancel`` is set. ``skip``: positions to leave out."""
    c0 = time.thread_time()
    parts = embedder.encode_parts(texts, skip=skip)
    end: Exception | None = None
    try:
        for part in parts:
            made.put(part)
            if cancel.is_set():
                return
    except Exception as exc:  # EmbedderUnavailable among them: raised again on the consuming thread
        end = exc
    finally:
        parts.close()
        run.encoding_cpu += time.thread_time() - c0  # counted before the end is told: the log reads it
    made.put(end)
