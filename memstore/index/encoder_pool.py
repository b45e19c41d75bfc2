"""Worker processes that run the ONNX encoder beside the daemon: one core each, no GIL shared.

One text per onnxruntime run on one thread is the fastest way to embed on a small machine
(embedder.py), and it leaves the other cores idle: a process per core uses them all. Each worker
loads the same exported model with the same session options as the in-process encoder and runs
one text at a time, so its vectors are byte-equal to the in-process ones (tests/test_embed_workers.py).

Texts go out longest first, a few per request (``CHUNK``), taken by whichever worker is free: the
long ones are spread early and both workers stay busy to the end. Each worker holds two requests
(``IN_FLIGHT``): it starts the next the moment it answers one, without waiting for the thread
that feeds it. Workers run at ``nice 10``
so a read the daemon answers meanwhile gets the cores first; they exit when their stdin closes
(the pool stopped, or the daemon died however it died) and, on Linux, when the thread that
started them ends (``PR_SET_PDEATHSIG``). A pool that nobody used for ``IDLE_S`` stops its
workers. A worker that dies mid-run costs nothing: its texts are encoded in-process, with a
warning, and the pool is not used again by this process.

Wire format, over the worker's stdin and stdout: a request is a 4-byte big-endian length and
that many bytes of a JSON list of texts; the answer is a 4-byte count and that many rows of
``MODEL_DIM`` float32, the pooled vectors before normalisation (the caller normalises, as the
in-process path does).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import queue
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from .onnx_encoder import MODEL_DIM, OnnxEncoder

log = logging.getLogger(__name__)

CHUNK = 4  # texts per request: ~15 ms of short text, ~50 ms of long; small enough to balance the tail
# Requests a worker holds at once: the one it encodes and the next, so it never waits for its
# feeding thread between two (that wait doubled in the daemon, whose reads share the GIL with
# the feeders: bench/RESULTS.md "Background embedding against the encoder pool").
IN_FLIGHT = 2
IDLE_S = 30.0  # a pool unused this long stops its workers (their ~150 MB each)
NICE = 10
_PR_SET_PDEATHSIG = 1
_HEADER = struct.Struct(">I")


class WorkerDied(Exception):
    """A worker process ended or answered garbage."""


@dataclass
class _Job:
    """One ``encode_parts`` call: its texts, the chunks not yet taken, and the answers."""

    texts: list[str]
    chunks: deque[list[int]]
    results: queue.SimpleQueue[tuple[list[int], np.ndarray | None]] = field(default_factory=queue.SimpleQueue)
    cancelled: bool = False
    skip: Callable[[int], bool] | None = None  # positions no longer wanted, asked as a chunk is handed out


class _Worker:
    def __init__(self, model_file: Path, tokenizer_file: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "memstore.index.encoder_pool", str(model_file), str(tokenizer_file)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, close_fds=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, texts: list[str]) -> None:
        """Hand the worker a request; it is answered, in order, after those sent before it."""
        stdin = self.proc.stdin
        assert stdin is not None
        body = json.dumps(texts).encode("utf-8")
        try:
            stdin.write(_HEADER.pack(len(body)) + body)
            stdin.flush()
        except (OSError, ValueError) as exc:
            raise WorkerDied(f"{type(exc).__name__}: {exc}") from exc

    def receive(self, count: int) -> np.ndarray:
        """The answer to the oldest request not yet answered, of ``count`` texts."""
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            (rows,) = _HEADER.unpack(_read_exactly(stdout, _HEADER.size))
            if rows != count:
                raise WorkerDied(f"answered {rows} rows for {count} texts")
            raw = _read_exactly(stdout, rows * MODEL_DIM * 4)
        except (OSError, ValueError, struct.error) as exc:
            raise WorkerDied(f"{type(exc).__name__}: {exc}") from exc
        return np.frombuffer(raw, dtype=np.float32).reshape(rows, MODEL_DIM).copy()

    def close(self, wait: float = 5.0) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # the worker reads EOF and exits
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdout is not None:
                self.proc.stdout.close()


def _read_exactly(fh: IO[bytes], n: int) -> bytes:
    data = fh.read(n)
    if data is None or len(data) != n:
        raise WorkerDied("the worker closed its output")
    return data


class EncoderPool:
    """``workers`` encoder processes fed from one queue of chunks; started on first use."""

    def __init__(self, workers: int, model_file: Path, tokenizer_file: Path,
                 fallback: Callable[[list[str]], np.ndarray], idle_s: float = IDLE_S) -> None:
        self.size = workers
        self._model_file = model_file
        self._tokenizer_file = tokenizer_file
        self._fallback = fallback  # in-process encoding of a chunk a dead worker left
        self._idle_s = idle_s
        self._cond = threading.Condition()
        self._jobs: deque[_Job] = deque()
        self._workers: list[_Worker] = []
        self._alive = 0  # feeder threads still running
        self._running = False
        self._stopping = False
        self.broken = False  # a worker died: this process encodes in-process from now on
        self._last_used = time.monotonic()

    # -- life cycle --------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Workers are up (or starting), not stopping."""
        return self._running and not self._stopping

    def pids(self) -> list[int]:
        with self._cond:
            return [w.pid for w in self._workers]

    def start(self) -> None:
        """Start the workers, if they are not running, and return once they are spawned: each
        loads the model on its own, and a request sent meanwhile waits in its pipe."""
        self._ensure_started()
        with self._cond:
            self._last_used = time.monotonic()

    def _ensure_started(self) -> None:
        """Start the workers from a thread that lives exactly as long as they do: the kernel's
        parent-death signal follows the thread that forked, not the process."""
        with self._cond:
            while self._running and self._stopping:  # stopping after an idle spell: wait, then anew
                self._cond.wait(timeout=1.0)
            if self._running or self.broken:
                return
            self._running, self._stopping = True, False
            self._last_used = time.monotonic()
            started = threading.Event()
            threading.Thread(target=self._keeper, args=(started,), name="encoder-pool", daemon=True).start()
        started.wait()

    def _keeper(self, started: threading.Event) -> None:
        try:
            workers = [_Worker(self._model_file, self._tokenizer_file) for _ in range(self.size)]
        except OSError as exc:
            log.warning("memstore: cannot start embedding workers (%s); embedding in-process", exc)
            with self._cond:
                self.broken, self._running = True, False
                self._cond.notify_all()
            started.set()
            return
        with self._cond:
            self._workers = workers
            self._alive = len(workers)
        log.info("embedding in %d worker processes (pids %s)", len(workers), ", ".join(str(w.pid) for w in workers))
        feeders = [threading.Thread(target=self._feed, args=(w,), name=f"encoder-feed-{w.pid}", daemon=True)
                   for w in workers]
        for t in feeders:
            t.start()
        started.set()
        with self._cond:
            while not self._stopping and self._alive:
                idle = not self._jobs and time.monotonic() - self._last_used > self._idle_s
                if idle:
                    self._stopping = True
                    break
                self._cond.wait(timeout=min(self._idle_s, 5.0))
            self._stopping = True
            self._cond.notify_all()
        for t in feeders:
            t.join()
        for w in workers:
            w.close()
        with self._cond:
            self._workers = []
            self._running = False
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop the workers and wait for them to exit (the daemon's shutdown)."""
        with self._cond:
            if not self._running:
                return
            self._stopping = True
            self._cond.notify_all()
            while self._running:
                self._cond.wait(timeout=1.0)

    # -- the work -------------------------------------------------------------------------------------
    def _take(self, wait: bool) -> tuple[_Job, list[int]] | None:
        """The next chunk to hand out; None when stopping, or (unless ``wait``) when none is queued."""
        with self._cond:
            while True:
                if self._stopping:
                    return None
                while self._jobs and (self._jobs[0].cancelled or not self._jobs[0].chunks):
                    self._jobs.popleft()
                if self._jobs:
                    job = self._jobs[0]
                    self._last_used = time.monotonic()
                    chunk = job.chunks.popleft()
                    if job.skip is not None:
                        chunk = [i for i in chunk if not job.skip(i)]
                        if not chunk:
                            job.results.put(([], None))  # counted as answered; nothing to encode
                            continue
                    return job, chunk
                if not wait:
                    return None
                self._cond.wait(timeout=1.0)

    def _feed(self, worker: _Worker) -> None:
        """Keep ``worker`` busy: up to ``IN_FLIGHT`` chunks sent ahead of its answers, so it
        starts the next one as soon as it answers one instead of waiting for this thread (which
        shares the GIL with the daemon's reads) to read the answer and send more."""
        sent: deque[tuple[_Job, list[int]]] = deque()
        try:
            while True:
                while len(sent) < IN_FLIGHT and (taken := self._take(wait=not sent)) is not None:
                    job, chunk = taken
                    sent.append(taken)
                    worker.send([job.texts[i] for i in chunk])
                if not sent:
                    return  # stopping, and every answer is in
                job, chunk = sent[0]
                vecs = worker.receive(len(chunk))
                sent.popleft()
                job.results.put((chunk, vecs))
        except WorkerDied as exc:
            self._died(worker, exc)
            for job, chunk in sent:
                job.results.put((chunk, None))  # encoded in-process by the consumer
        finally:
            with self._cond:
                self._alive -= 1
                self._cond.notify_all()

    def _died(self, worker: _Worker, exc: Exception) -> None:
        code = worker.proc.poll()
        log.warning("memstore: an embedding worker (pid %d) failed (%s, exit %s); "
                    "encoding its texts in-process", worker.pid, exc, code)
        with self._cond:
            self.broken = True

    def encode_parts(self, texts: list[str], skip: Callable[[int], bool] | None = None,
                     ) -> Iterator[tuple[list[int], np.ndarray]]:
        """(positions in ``texts``, their pooled vectors) as the workers answer, longest texts
        first. Leaving the loop early drops the chunks no worker has taken yet. ``skip``: asked
        of each position as its chunk is handed out (from a feeding thread); those it answers
        True for are not encoded and not yielded."""
        self._ensure_started()
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        chunks = deque(order[i:i + CHUNK] for i in range(0, len(order), CHUNK))
        job = _Job(texts, chunks, skip=skip)
        outstanding = len(chunks)
        with self._cond:
            queued = self._running and not self._stopping and not self.broken
            if queued:
                self._jobs.append(job)
                self._cond.notify_all()
        try:
            while outstanding:
                try:
                    if not queued:
                        raise queue.Empty
                    chunk, vecs = job.results.get(timeout=0.5)
                except queue.Empty:
                    # No worker will take the rest (they died, or the pool is stopping): here.
                    with self._cond:
                        stranded = not queued or not self._alive or self._stopping
                        orphans = list(job.chunks) if stranded else []
                        if stranded:
                            job.chunks.clear()
                    for chunk in orphans:
                        outstanding -= 1
                        yield chunk, self._fallback([texts[i] for i in chunk])
                    continue
                outstanding -= 1
                if not chunk:
                    continue  # skipped whole
                if vecs is None:
                    vecs = self._fallback([texts[i] for i in chunk])
                yield chunk, vecs
        finally:
            job.cancelled = True
            with self._cond:
                self._last_used = time.monotonic()


# -- the worker process ------------------------------------------------------------------------------
def _die_with_parent() -> None:
    """Linux: SIGKILL when the thread that started us ends (EOF on stdin covers the rest)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)


def worker_main(model_file: str, tokenizer_file: str) -> int:
    _die_with_parent()
    parent = os.getppid()
    if parent == 1:  # the parent is already gone (it died between fork and prctl)
        return 0
    with contextlib.suppress(OSError):
        os.nice(NICE)
    encoder = OnnxEncoder(Path(model_file), Path(tokenizer_file))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = stdin.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return 0  # EOF: the pool stopped or the daemon died
        (size,) = _HEADER.unpack(head)
        texts = json.loads(stdin.read(size).decode("utf-8"))
        vecs = np.ascontiguousarray(encoder.encode(texts, 1), dtype=np.float32)
        stdout.write(_HEADER.pack(len(texts)) + vecs.tobytes())
        stdout.flush()


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1], sys.argv[2]))
