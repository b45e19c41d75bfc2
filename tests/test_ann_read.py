"""A read over a store at its approximate threshold (``MEMSTORE_APPROX_ROWS``) takes its vector
lane from the inverted file's candidates (``rowspace.Nearest``, ``ranking.approximate_sims``)
and answers as the flat pass over every row does: through the CLI, through the daemon, with a
filter that leaves few candidates in scope, for a look-up by name, and when a kind offset lifts
a row the first candidates do not hold above the closest ones."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CliResult
from daemonworld import Env

from memstore.index.vectors import VectorIndex
from memstore.read import ranking
from memstore.read.rowspace import Nearest
from memstore.store.workspace import open_workspace
from memstore.verbs import api

COMPONENTS = ["billing worker", "auth service", "websocket hub", "session store", "PDF renderer",
              "job scheduler", "search indexer", "GraphQL gateway"]
TROUBLES = ["times out connecting to the primary database", "leaks file descriptors under load",
            "crashes on a malformed UTF-8 byte", "retries forever after a 429 from the upstream API",
            "reads stale settings after a deploy", "deadlocks when two requests update the same row"]
QUERIES = ["database connection timeout", "file descriptors leak in the websocket hub",
           "structured JSON logs with request ids", "what do we prefer for the PDF renderer",
           "stale config after deploying the scheduler",
           "kubernetes pod eviction"]  # the last one: nothing in the store is about it
# Candidates are asked for twice the semantic pool: a pool of 10 makes the inverted file choose
# 20 of the 48 memories, so the approximate path is the one a read takes.
SETTINGS = "read:\n  semantic_pool: 10\n"
APPROX, FLAT = {"MEMSTORE_APPROX_ROWS": "1"}, {"MEMSTORE_APPROX_ROWS": "100000"}


def fill(repo: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """48 memories (facts, problems, preferences) in the repo store and one in the global store,
    through the library's write; text -> id."""
    ws = open_workspace(cwd=repo, env=env)
    kinds = ["fact", "problem", "preference", "fact"]
    out = {}
    for n, (comp, trouble) in enumerate(itertools.product(COMPONENTS, TROUBLES)):
        kind = kinds[n % 4]
        text = (f"For the {comp}, the team prefers a fix for when it {trouble}" if kind == "preference"
                else f"The {comp} {trouble}")
        memory = {"kind": kind, "scope": "repo", "text": text, "evidence_refs": ["user:seen"]}
        out[text] = api.write(ws, {"op": "write", "memory": memory, "allow_duplicate": True})["id"]
    # And one in the global store, written by hand (an agent's global write waits for review):
    # its row joins the repo's, scored whole (fewer rows than the candidates asked for), beside
    # the repo store's inverted file.
    home = Path((env or os.environ)["MEMSTORE_HOME"])
    (home / "preferences").mkdir(parents=True, exist_ok=True)
    (home / "preferences" / "json-logs.md").write_text(
        "---\nkind: preference\n---\nI prefer structured JSON logs with a request id on every line\n",
        encoding="utf-8")
    with (repo / ".memory" / "config.yaml").open("a", encoding="utf-8") as fh:
        fh.write(SETTINGS)
    return out


def answer(data: dict[str, Any]) -> tuple[list[tuple[str, float, list[str]]], dict[str, Any]]:
    """What a read answers, without its timing and the lane's own stats."""
    return ([(r["id"], r["score"], r["reasons"]) for r in data["results"]], data["stats"]["gate"])


@pytest.fixture
def filled(repo: Path, cli: Callable[..., CliResult]) -> Path:
    fill(repo)
    # The first read takes the new files into the index and saves it, over the threshold with
    # its inverted file.
    assert cli("read", "warm up", cwd=repo, env=APPROX)[0] == 0
    assert (repo / ".memory" / ".index" / "vectors.ann").is_file()
    return repo


def test_cli_read_over_the_threshold_takes_the_approximate_lane_and_answers_as_flat(
        filled: Path, cli: Callable[..., CliResult]) -> None:
    answered = 0
    for query in QUERIES:
        rc, flat, err = cli("read", query, cwd=filled, env=FLAT)
        assert rc == 0, err
        assert "approximate" not in flat["stats"]  # under the threshold nothing is different
        rc, approx, err = cli("read", query, cwd=filled, env=APPROX)
        assert rc == 0, err
        assert answer(approx) == answer(flat), query
        assert approx["stats"]["approximate"] == {"searches": 1, "flat": 0}, query
        answered += bool(flat["results"])
        if "logs" in query:  # the global store's memory, found beside the repo's candidates
            assert [r["scope"] for r in approx["results"]][:1] == ["global"]
    assert answered == len(QUERIES) - 1  # the off-topic query is refused by both


def test_semantic_hops_over_the_threshold_step_through_the_approximate_lane_as_through_every_row(
        filled: Path, cli: Callable[..., CliResult]) -> None:
    hopped = 0
    for query in QUERIES[:5]:
        rc, flat, err = cli("read", query, "--semantic-hops", "2", cwd=filled, env=FLAT)
        assert rc == 0, err
        rc, approx, err = cli("read", query, "--semantic-hops", "2", cwd=filled, env=APPROX)
        assert rc == 0, err
        assert answer(approx) == answer(flat), query
        hopped += any(why.startswith("assoc:") for r in flat["results"] for why in r["reasons"])
        # the pool's search, then one per hop taken (three seeds, two hops at most)
        assert 1 < approx["stats"]["approximate"]["searches"] <= 7 and not approx["stats"]["approximate"]["flat"]
    assert hopped  # the hops do reach memories here


def test_a_filter_that_leaves_few_candidates_in_scope_widens_them(filled: Path,
                                                                 cli: Callable[..., CliResult]) -> None:
    """Twelve preferences among 48 memories: of the inverted file's first 20 candidates too few
    are in scope to fill the pool, so the lane asks for more, and here, that being every row,
    takes the flat pass; the answer is the flat one either way."""
    args = ("read", "the database times out", "--kind", "preference")
    rc, flat, err = cli(*args, cwd=filled, env=FLAT)
    assert rc == 0, err
    rc, approx, err = cli(*args, cwd=filled, env=APPROX)
    assert rc == 0, err
    assert flat["results"] and answer(approx) == answer(flat)
    assert approx["stats"]["approximate"] == {"searches": 1, "flat": 1}


def test_a_look_up_by_name_scores_its_holders_alone_and_answers_as_flat(
        filled: Path, cli: Callable[..., CliResult]) -> None:
    repo = filled
    ws = open_workspace(cwd=repo)
    memory = {"kind": "fact", "scope": "repo", "text": "`retry_with_jitter()` wraps every call to the upstream API",
              "evidence_refs": ["user:seen"]}
    held = api.write(ws, {"op": "write", "memory": memory, "allow_duplicate": True})["id"]
    rc, flat, err = cli("read", "retry_with_jitter", cwd=repo, env=FLAT)
    assert rc == 0, err
    rc, approx, err = cli("read", "retry_with_jitter", cwd=repo, env=APPROX)
    assert rc == 0, err
    assert [r["id"] for r in flat["results"]][:1] == [held]
    assert answer(approx) == answer(flat)
    assert approx["stats"]["approximate"]["searches"] >= 1


def test_the_daemon_reads_through_the_approximate_lane_as_the_flat_pass_does(tmp_path: Path) -> None:
    life = Env(tmp_path / "annread")
    life.vars.update(APPROX)
    proc = None
    try:
        with life.environ():
            repo = life.make_repo("repo")
            fill(repo, life.env())
        proc = life.start("--idle", "600")
        for query in QUERIES[:4]:
            served = life.forward("read", repo, request={"query": query})["answer"]
            rc, flat, err = life.cli("read", query, cwd=repo, MEMSTORE_DAEMON="0", **FLAT)
            assert rc == 0, err
            assert answer(served) == answer(flat), query
            assert served["stats"]["approximate"] == {"searches": 1, "flat": 0}, query
    finally:
        life.cleanup()
        if proc is not None:
            proc.wait(timeout=30)


def test_a_kind_offset_lifting_a_row_past_the_first_candidates_is_still_seen_by_the_gate() -> None:
    """400 facts at cosine 0.355-0.38 with the query and one preference at 0.361: the closest
    rows are facts under the bar (0.40), and the preference's offset (-0.05) lifts it to 0.411,
    which passes. The inverted file's first candidates are all facts, so the lane must widen
    them to find it; the gate's decision and its top similarity are the flat ones."""
    dim = 32
    rng = np.random.default_rng(7)
    q = np.zeros(dim, dtype=np.float32)
    q[0] = 1.0

    def at(cos: float, n: int) -> np.ndarray:
        rest = rng.normal(size=(n, dim - 1))
        rest /= np.linalg.norm(rest, axis=1, keepdims=True)
        return np.hstack([np.full((n, 1), cos), np.sqrt(1 - cos**2) * rest]).astype(np.float32)

    facts = at(0.0, 400)
    facts[:, 0] = rng.uniform(0.355, 0.38, 400)
    facts[:, 1:] *= (np.sqrt(1 - facts[:, :1] ** 2) / np.linalg.norm(facts[:, 1:], axis=1, keepdims=True))
    rows = np.vstack([facts, at(0.361, 1), at(-0.2, 600)])
    kinds = ["fact"] * 400 + ["preference"] + ["fact"] * 600
    index = VectorIndex(dim, approx_rows=1)
    index.add([f"m{i}" for i in range(len(rows))], rows)
    params = ranking.RankingParams(semantic_pool=10)
    flat = ranking.rank(q, index.matrix(), [], kinds, params=params)
    lane = Nearest([index], (len(index),))
    approx = ranking.rank(q, index.matrix(), [], kinds, params=params, nearest=lane)
    assert flat.gate.passed and flat.gate.top_similarity == pytest.approx(0.361, abs=1e-3)
    assert approx.gate == flat.gate
    assert approx.results == flat.results
    assert lane.searches > 1  # widened
