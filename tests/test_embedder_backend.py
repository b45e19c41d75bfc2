"""The ONNX int8 embedder: close to torch's vectors, exported once into a private cache, and
torch when the export cannot be made."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import CliResult

from memstore.index import embedder as embedder_mod
from memstore.index.embedder import MODEL_ID, ONNX_MODEL_ID, Embedder

pytestmark = [pytest.mark.model, pytest.mark.slow]

SENTENCES = [
    "Running alembic upgrade head in the test suite fails with DuplicateColumn on tracking_code.",
    "Caroline went to the LGBTQ support group yesterday and said it was powerful.",
    "Use pnpm, not npm: the lockfile is pnpm-lock.yaml.",
    "The websocket hub drops connections after 60 s behind the nginx proxy; raise proxy_read_timeout.",
    "ok",
    "NameNode fails to start after upgrade: the edit log contains an opcode the new version "
    "cannot read. " * 12,  # longer than the model's 256 tokens: cut the same way by both
]
# bench/embed_speed.py on 600 LoCoMo turns and Hadoop reports: max 1 - cos 0.022; LoCoMo dev
# recall@10 0.692 against torch's 0.690 (bench/RESULTS.md "Embedding speed").
MIN_COSINE = 0.96


def test_onnx_vectors_are_close_to_torchs_and_keyed_apart() -> None:
    onnx, torch = Embedder(backend="onnx"), Embedder(backend="torch")
    assert onnx.backend == "onnx" and onnx.model_id == ONNX_MODEL_ID
    assert torch.model_id == MODEL_ID  # old caches of torch vectors stay valid for torch
    a, b = onnx.encode(SENTENCES), torch.encode(SENTENCES)
    assert a.shape == b.shape == (len(SENTENCES), 384)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    cos = np.sum(a * b, axis=1)
    assert cos.min() >= MIN_COSINE, cos
    # the right texts line up: each ONNX vector is nearest its own torch vector
    assert (np.argmax(a @ b.T, axis=1) == np.arange(len(SENTENCES))).all()
    # a text's vector is its own, whatever is encoded beside it (a query vs. a stored memory)
    alone = onnx.encode([SENTENCES[0]])[0]
    assert np.allclose(alone, a[0], atol=1e-5)


def test_the_export_is_private_cached_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = Embedder()
    assert first.backend == "onnx" and first.exported
    folder = tmp_path / "cache" / "memstore" / "onnx"
    (model,) = folder.iterdir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(model.stat().st_mode) == 0o600
    before = model.stat()
    vec = first.encode(SENTENCES[:1])

    second = Embedder()
    assert second.backend == "onnx" and not second.exported
    assert list(folder.iterdir()) == [model]  # no temp dir left, no second file
    after = model.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert np.allclose(second.encode(SENTENCES[:1]), vec, atol=1e-6)


def test_a_failed_export_falls_back_to_torch_with_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # A cache home that is a file: the export has nowhere to go.
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    caplog.set_level(logging.WARNING, logger=embedder_mod.__name__)
    first, second = Embedder(), Embedder()
    assert first.backend == second.backend == "torch"
    assert first.model_id == MODEL_ID
    warned = [r for r in caplog.records if "embedding with torch" in r.getMessage()]
    assert len(warned) == 1
    assert np.allclose(first.encode(SENTENCES[:2]), Embedder(backend="torch").encode(SENTENCES[:2]), atol=1e-5)
    assert blocker.read_text() == ""


def test_a_read_through_the_cli_still_answers_when_the_export_fails(
        repo: Path, cli: Callable[..., CliResult], tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    env = {"XDG_CACHE_HOME": str(blocker)}
    rc, out, _ = cli("write", "--kind", "fact", "--text", "Session data lives in Redis db 3.",
                     "--evidence", "user:said so", cwd=repo, env=env)
    assert rc == 0, out
    rc, ans, err = cli("read", "which redis database holds sessions?", cwd=repo, env=env)
    assert rc == 0, ans
    assert [r["id"] for r in ans["results"]][:1] == [out["id"]]
    assert err.count("embedding with torch") == 1
    assert os.path.isfile(blocker)
