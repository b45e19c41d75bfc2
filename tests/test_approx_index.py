"""The approximate vector index (``index/vectors``): above a threshold of rows the nearest
memories come from an inverted file, scored on the flat rows, and answer as the flat search does;
it is saved beside the flat index, loaded when the sealed metadata vouches for it, and built
again from the flat rows when it is missing, damaged or planted."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np
import pytest
from conftest import CliResult, store_files, write_req
from daemonworld import Env, _poll, _seed

from memstore.index import vectors as vecmod
from memstore.index.vectors import VectorIndex, approx_rows_setting
from memstore.store.workspace import open_workspace
from memstore.verbs import api

DIM = 32


def clustered(n: int, seed: int) -> np.ndarray:
    """Unit rows around a few centres, as embeddings of related texts are."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(12, DIM))
    x = centres[rng.integers(0, 12, n)] + 0.6 * rng.normal(size=(n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def ids_of(hits: list[tuple[str, float]]) -> list[str]:
    return [m for m, _ in hits]


def flat_twin(index: VectorIndex) -> VectorIndex:
    flat = VectorIndex(DIM, approx_rows=10**9)
    flat.add(index.row_ids(), index.matrix().copy())
    return flat


def test_over_the_threshold_search_answers_as_flat_through_adds_and_removes() -> None:
    x = clustered(600, 1)
    ids = [f"m{i}" for i in range(600)]
    approx = VectorIndex(DIM, approx_rows=100)
    approx.add(ids[:300], x[:300])
    queries = clustered(20, 2)
    for q in queries:
        assert approx.search(q, 10) == flat_twin(approx).search(q, 10)
    assert approx.ann is not None and approx.ann_trained == 300
    # Kept in step, not trained again: new rows, removed rows and a row whose text changed.
    approx.add(ids[300:500], x[300:500])
    approx.remove(ids[:50])
    approx.add([ids[60]], x[599:600])
    assert approx.ann_trained == 300 and approx.ann.ntotal == len(approx) == 450
    flat = flat_twin(approx)
    for q in queries:
        assert approx.search(q, 10) == flat.search(q, 10)
    assert ids[0] not in ids_of(approx.search(x[0], 450))
    # Four times the rows it was trained on: trained again on today's.
    approx.add(ids[500:], x[500:])
    many = VectorIndex(DIM, approx_rows=100)
    many.add([f"n{i}" for i in range(1300)], clustered(1300, 3))
    many.search(queries[0], 5)
    trained = many.ann_trained
    many.add([f"o{i}" for i in range(4 * trained)], clustered(4 * trained, 4))
    many.search(queries[0], 5)
    assert many.ann_trained == len(many)


def test_below_the_threshold_no_approximate_index_is_built_or_kept(tmp_path: Path) -> None:
    index = VectorIndex(DIM, approx_rows=1000)
    index.add([f"m{i}" for i in range(200)], clustered(200, 1))
    index.search(clustered(1, 2)[0], 5)
    assert index.ann is None
    (tmp_path / "vectors.ann").write_bytes(b"left by an older index")
    index.save(tmp_path / "vectors.faiss")
    assert not (tmp_path / "vectors.ann").exists()


def test_saved_approximate_index_is_loaded_not_trained_again(tmp_path: Path) -> None:
    index = VectorIndex(DIM, approx_rows=100)
    index.add([f"m{i}" for i in range(400)], clustered(400, 1))
    index.save(tmp_path / "vectors.faiss")  # trained by the save: none had searched yet
    assert (tmp_path / "vectors.ann").is_file()
    queries = clustered(10, 2)
    before = [index.search(q, 10) for q in queries]
    loaded = VectorIndex.load(tmp_path / "vectors.faiss", DIM, dict(index.id_of), with_ann=True, approx_rows=100)
    assert loaded.ann is not None and loaded.ann.ntotal == 400
    assert [loaded.search(q, 10) for q in queries] == before
    # Unvouched for (the caller's seal does not cover it): not read, trained again on demand.
    unvouched = VectorIndex.load(tmp_path / "vectors.faiss", DIM, dict(index.id_of), approx_rows=100)
    assert unvouched.ann is None
    assert [unvouched.search(q, 10) for q in queries] == before


@pytest.mark.parametrize("bad", [b"", b"garbage" * 100, "truncated"])
def test_unreadable_approximate_index_is_built_again_from_the_flat_rows(tmp_path: Path, bad: bytes | str) -> None:
    index = VectorIndex(DIM, approx_rows=100)
    index.add([f"m{i}" for i in range(400)], clustered(400, 1))
    index.save(tmp_path / "vectors.faiss")
    ann = tmp_path / "vectors.ann"
    ann.write_bytes(ann.read_bytes()[:1000] if bad == "truncated" else bad)  # type: ignore[operator]
    loaded = VectorIndex.load(tmp_path / "vectors.faiss", DIM, dict(index.id_of), with_ann=True, approx_rows=100)
    assert loaded.ann is None
    q = clustered(1, 2)[0]
    assert loaded.search(q, 10) == index.search(q, 10)


def test_a_bad_threshold_setting_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert approx_rows_setting({"MEMSTORE_APPROX_ROWS": "5000"}) == 5000
    for raw in ("0", "-3", "lots"):
        assert approx_rows_setting({"MEMSTORE_APPROX_ROWS": raw}) == vecmod.APPROX_ROWS
    assert "MEMSTORE_APPROX_ROWS='lots' is not a whole number >= 1" in caplog.text


# -- the user's path: a write judged against the store's nearest memories ----------------------
FACTS = [
    "The billing worker retries a failed Stripe charge three times with exponential backoff.",
    "Our CI runs the integration tests against a throwaway Postgres started by docker compose.",
    "The auth service signs session cookies with a key rotated every thirty days.",
    "Feature flags are read from LaunchDarkly at start-up and cached for five minutes.",
    "The search indexer rebuilds the Elasticsearch alias nightly at 02:00 UTC.",
    "Image uploads over 10 MB are rejected by the API gateway before they reach the resizer.",
    "The Kafka consumer commits offsets only after the database transaction commits.",
    "Database migrations run with alembic from the deploy job, never from application start.",
    "The rate limiter keys on the API token, not the client IP address.",
    "Email is sent through SES with a suppression list synced from bounces every hour.",
    "The websocket hub drops idle connections after ninety seconds without a ping.",
    "PDF invoices are rendered with WeasyPrint in a separate worker pool.",
]
NEAR = "The billing worker retries failed Stripe charges three times, backing off exponentially."


def judged(cli: Callable[..., CliResult], repo: Path, env: dict[str, str]) -> list[dict]:
    rc, out, err = cli("write", "--dry-run", "--kind", "fact", "--text", NEAR, "--evidence", "user:x",
                       cwd=repo, env=env)
    assert rc in (0, 4), err  # 4: refused as a duplicate of the memory it names
    assert "WARNING" not in err  # a training over few rows says nothing on stderr
    return out["similar"] if rc == 0 else out["error"]


def test_write_over_the_threshold_is_judged_as_over_flat(repo: Path, cli: Callable[..., CliResult],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTORE_APPROX_ROWS", "8")
    ws = open_workspace(cwd=repo)
    for text in FACTS:
        api.write(ws, write_req("fact", text))
    index_dir = repo / ".memory" / ".index"
    assert cli("read", "stripe retries", cwd=repo)[0] == 0  # the index takes the new files in
    assert (index_dir / "vectors.ann").is_file()  # saved with the vectors, over the threshold
    files = store_files(repo)
    approx = judged(cli, repo, {"MEMSTORE_APPROX_ROWS": "8"})
    flat = judged(cli, repo, {"MEMSTORE_APPROX_ROWS": "1000"})
    assert approx == flat and json.dumps(flat).count("Stripe") >= 1
    assert store_files(repo) == files  # a dry run wrote nothing


def test_damaged_or_planted_approximate_index_is_not_believed(repo: Path, cli: Callable[..., CliResult],
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.setenv("MEMSTORE_APPROX_ROWS", "8")
    ws = open_workspace(cwd=repo)
    for text in FACTS:
        api.write(ws, write_req("fact", text))
    assert cli("read", "stripe retries", cwd=repo)[0] == 0
    expected = judged(cli, repo, {})
    ann = repo / ".memory" / ".index" / "vectors.ann"
    ann.write_bytes(b"\x00" * 64)
    assert judged(cli, repo, {}) == expected
    # A link planted in its place: the next save replaces the link, never writes through it.
    outside = tmp_path / "outside"
    outside.write_bytes(b"not memstore's")
    ann.unlink()
    os.symlink(outside, ann)
    api.write(open_workspace(cwd=repo), write_req("fact", "The cache layer evicts by LRU at 2 GB."))
    assert cli("read", "cache eviction", cwd=repo)[0] == 0  # indexes the new memory and saves
    assert outside.read_bytes() == b"not memstore's"
    assert ann.is_file() and not ann.is_symlink()
    assert judged(cli, repo, {}) == expected
    # The flat vectors damaged: both indexes rebuilt from the files, and the same judgment.
    flat = ann.with_name("vectors.faiss")
    flat.write_bytes(b"\x00" * 128)
    rc, out, _ = cli("read", "cache eviction", cwd=repo)
    assert rc == 0 and any("vector index was damaged" in w for w in out["warnings"])
    assert judged(cli, repo, {}) == expected
    assert faiss.read_index(str(ann)).ntotal == len(FACTS) + 1


def test_the_daemon_saves_the_approximate_index_and_judges_as_flat(tmp_path: Path) -> None:
    """A real daemon over the threshold: it writes vectors.ann with its idle save, and its
    judgment of a write is the in-process flat one."""
    life = Env(tmp_path / "ann")
    life.vars["MEMSTORE_APPROX_ROWS"] = "4"
    proc = None
    try:
        with life.environ():
            repo = life.make_repo("repo")
            _seed(life, repo, "omega")  # five memories
        proc = life.start("--idle", "600")
        text = "omega: settings of the API server come from a TOML file in config/"
        request = {"op": "write", "mode": "dry_run",
                   "memory": {"kind": "fact", "scope": "repo", "text": text, "evidence_refs": ["user:x"]}}
        answer = life.forward("write", repo, request=request)["answer"]
        ann = repo / ".memory" / ".index" / "vectors.ann"
        assert _poll(ann.is_file, timeout=60, every=1), life.log()
        rc, flat, err = life.cli("write", "--dry-run", "--kind", "fact", "--text", text, "--evidence", "user:x",
                                 cwd=repo, MEMSTORE_DAEMON="0", MEMSTORE_APPROX_ROWS="1000")
        assert rc == 0, err
        assert answer["similar"] == flat["similar"] and "omega" in json.dumps(flat["similar"])
    finally:
        life.cleanup()
        if proc is not None:
            proc.wait(timeout=30)
