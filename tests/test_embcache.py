"""The embedding cache: what a rebuild trusts instead of running the model again."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memstore.index.embcache import EmbeddingCache


def rows(*vals: float) -> np.ndarray:
    return np.array([[v, 0.0, 0.0, 1.0] for v in vals], dtype=np.float32)


def test_two_writers_interleaved_stay_consistent(tmp_path: Path) -> None:
    a = EmbeddingCache(tmp_path, "model", 4)
    b = EmbeddingCache(tmp_path, "model", 4)
    a.put_many(["k1"], rows(1))
    b.put_many(["k2"], rows(2))  # b loaded before k1 existed: it must not misnumber its row
    a.put_many(["k3"], rows(3))
    fresh = EmbeddingCache(tmp_path, "model", 4)
    vecs, missing = fresh.get_many(["k1", "k2", "k3", "nope"])
    assert missing == [3]
    assert vecs[:3, 0].tolist() == [1.0, 2.0, 3.0]


def test_a_torn_append_is_healed_not_trusted(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path, "model", 4)
    cache.put_many(["k1", "k2"], rows(1, 2))
    with open(cache.vecs_path, "ab") as fh:  # a crash after writing a row but before its key
        fh.write(rows(9).tobytes())
    reopened = EmbeddingCache(tmp_path, "model", 4)
    assert len(reopened) == 2
    reopened.put_many(["k3"], rows(3))
    again = EmbeddingCache(tmp_path, "model", 4)
    vecs, missing = again.get_many(["k1", "k2", "k3"])
    assert missing == [] and vecs[:, 0].tolist() == [1.0, 2.0, 3.0]


def test_model_ids_do_not_share_vectors(tmp_path: Path) -> None:
    EmbeddingCache(tmp_path, "model-a", 4).put_many(["k"], rows(1))
    _, missing = EmbeddingCache(tmp_path, "model-b", 4).get_many(["k"])
    assert missing == [0]
