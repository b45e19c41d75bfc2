"""The embedding cache: what a rebuild trusts instead of running the model again."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memstore.index.embcache import EmbeddingCache, text_key


def rows(*vals: float) -> np.ndarray:
    """Unit vectors, as embeddings are, whose first component tells them apart."""
    out = np.array([[v, 0.0, 0.0, 1.0] for v in vals], dtype=np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def first(vals: np.ndarray) -> list[float]:
    """The value each row was made from (``rows`` inverted)."""
    return np.round(vals[:, 0] / vals[:, 3], 4).tolist()


K1, K2, K3, NOPE = (text_key(t) for t in ("k1", "k2", "k3", "nope"))


def test_two_writers_interleaved_stay_consistent(tmp_path: Path) -> None:
    a = EmbeddingCache(tmp_path, "model", 4)
    b = EmbeddingCache(tmp_path, "model", 4)
    a.put_many([K1], rows(1))
    b.put_many([K2], rows(2))  # b loaded before k1 existed: it must not misnumber its row
    a.put_many([K3], rows(3))
    fresh = EmbeddingCache(tmp_path, "model", 4)
    vecs, missing = fresh.get_many([K1, K2, K3, NOPE])
    assert missing == [3]
    assert first(vecs[:3]) == [1.0, 2.0, 3.0]


def test_a_torn_append_is_healed_not_trusted(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path, "model", 4)
    cache.put_many([K1, K2], rows(1, 2))
    with open(cache.vecs_path, "ab") as fh:  # a crash after writing a row but before its key
        fh.write(rows(9).tobytes())
    reopened = EmbeddingCache(tmp_path, "model", 4)
    assert len(reopened) == 2
    reopened.put_many([K3], rows(3))
    again = EmbeddingCache(tmp_path, "model", 4)
    vecs, missing = again.get_many([K1, K2, K3])
    assert missing == [] and first(vecs) == [1.0, 2.0, 3.0]


def test_model_ids_do_not_share_vectors(tmp_path: Path) -> None:
    EmbeddingCache(tmp_path, "model-a", 4).put_many([K1], rows(1))
    _, missing = EmbeddingCache(tmp_path, "model-b", 4).get_many([K1])
    assert missing == [0]


def test_a_garbled_row_is_embedded_again_not_trusted(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path, "model", 4)
    cache.put_many([K1, K2], rows(1, 2))
    with open(cache.vecs_path, "r+b") as fh:  # bytes of K2's row overwritten on disk
        fh.seek(4 * 4 + 2)
        fh.write(b"\x7f\x13\x55\x01")
    reopened = EmbeddingCache(tmp_path, "model", 4)
    vecs, missing = reopened.get_many([K1, K2])
    assert missing == [1] and first(vecs[:1]) == [1.0]
    reopened.put_many([K2], rows(2))  # the fresh row replaces the garbled one from now on
    vecs, missing = EmbeddingCache(tmp_path, "model", 4).get_many([K1, K2])
    assert missing == [] and first(vecs) == [1.0, 2.0]


def test_a_lost_newline_in_the_keys_never_shifts_keys_onto_other_rows(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path, "model", 4)
    cache.put_many([K1, K2, K3], rows(1, 2, 3))
    text = cache.keys_path.read_text()
    cache.keys_path.write_text(text.replace("\n", "", 1))  # K1 and K2 run together
    _vecs, missing = EmbeddingCache(tmp_path, "model", 4).get_many([K1, K2, K3])
    assert missing == [0, 1, 2]


def test_a_cache_truncated_under_a_running_process_is_mapped_again(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path, "model", 4)
    cache.put_many([K1, K2], rows(1, 2))
    with open(cache.vecs_path, "r+b") as fh:  # reading the old mapping now would be a SIGBUS
        fh.truncate(0)
    _vecs, missing = cache.get_many([K1, K2])
    assert missing == [0, 1]
