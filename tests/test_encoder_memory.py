"""The in-process encoder holds what a text a run needs: the padding tokenizer of batched runs
(~9 MB, its own copy of the vocabulary) is made only when a batch is encoded."""

from __future__ import annotations

import numpy as np
import pytest

from memstore.index.embedder import Embedder
from memstore.index.onnx_encoder import OnnxEncoder

pytestmark = [pytest.mark.model]

TEXTS = [
    "Running alembic upgrade head in the test suite fails with DuplicateColumn on tracking_code.",
    "Use pnpm, not npm: the lockfile is pnpm-lock.yaml.",
    "ok",
]


def test_a_text_a_run_never_loads_the_batch_tokenizer_and_a_batch_still_encodes() -> None:
    emb = Embedder(backend="onnx")
    vecs = emb.encode(TEXTS)
    model = emb._model
    assert isinstance(model, OnnxEncoder)
    assert model._tok is None  # queries and stored memories are encoded a text a run
    assert np.array_equal(emb.encode(TEXTS[:1])[0], vecs[0])  # a text's vector is its own
    batched = model.encode(TEXTS, 8)  # bench/embed_speed.py's batches
    assert model._tok is not None and batched.shape == (len(TEXTS), 384)
    unit = batched / np.linalg.norm(batched, axis=1, keepdims=True)
    assert (np.sum(unit * vecs, axis=1) > 0.95).all()  # the same texts; int8 scales per run
