"""`memstore eval`: a store measured on its own problems, through the real CLI (real model,
real indexes, real git repos): the example store, small stores built here, an empty one, and
settings given with --set."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE_STORE, PROBLEM, SOLUTION, TACTIC, make_git_repo, run_on_tty, store_files, write_req

from memstore.store.workspace import Workspace
from memstore.verbs import api

pytestmark = pytest.mark.model

# .memory-example: two problems with answers on record, one without (the flaky webhook test).
ALEMBIC = "01m7qmgvt9txwmxsa4g8kr1ap8"
XDIST = "01m707wj89ap9gabv7152bxdgs"
ALEMBIC_ANSWERS = {"01m7qmmb4sce7seatvjxta8a69", "01m7qmhyz9teqk3c7v32bje3mh", "01m7qmk1513w2q09vvmz6swwav",
                   "01m6kpxz518cjxmag4ed5efrbv"}  # its solution, two failed tactics, a fact voted up for it


def w(ws: Workspace, kind: str, text: str, links: dict[str, Any] | None = None) -> str:
    return api.write(ws, write_req(kind, text, evidence=["user:seen it"], links=links))["id"]


@pytest.fixture
def example(tmp_path: Path) -> Path:
    root = make_git_repo(tmp_path / "example")
    shutil.copytree(EXAMPLE_STORE, root / ".memory", ignore=shutil.ignore_patterns(".index"))
    return root


def test_eval_on_the_example_store(example: Path, cli: Callable[..., Any]) -> None:
    before = store_files(example)
    code, ans, err = cli("eval", cwd=example)
    assert code == 0, err
    assert ans["queries"] == 2 and ans["sources"] == {"links": 2, "votes": 2} and ans["k"] == [1, 5, 10]
    by_problem = {q["problem"]: q for q in ans["per_query"]}
    assert set(by_problem) == {ALEMBIC, XDIST}
    assert set(by_problem[ALEMBIC]["expected"]) == ALEMBIC_ANSWERS  # the problem itself is not judged
    assert ans["expected_answers"] == len(ALEMBIC_ANSWERS) + 1
    (run,) = ans["runs"]
    assert run["settings"] == "current" and set(run["systems"]) == {"memstore", "keyword_only", "vector_only"}
    for name, m in run["systems"].items():
        assert m["n"] == 2, name
        assert 0 <= m["recall@1"] <= m["recall@5"] <= m["recall@10"] <= 1 and 0 <= m["mrr"] <= 1
        # The figures are the per-query details averaged, not numbers of their own.
        found = [q[name]["found"] / len(q["expected"]) for q in ans["per_query"]]
        assert m["recall@10"] == pytest.approx(sum(found) / 2, abs=1e-4)
        ranks = [q[name]["first_hit"] for q in ans["per_query"]]
        assert m["mrr"] == pytest.approx(sum(1 / r for r in ranks if r) / 2, abs=1e-4)
        assert m["abstained"] == sum(1 for q in ans["per_query"] if q[name]["returned"] == 0)
    assert by_problem[XDIST]["memstore"]["first_hit"] == 1  # its voted solution comes first
    assert store_files(example) == before


def test_queries_come_from_links_and_from_votes(repo: Path, ws: Workspace, cli: Callable[..., Any]) -> None:
    migration = w(ws, "problem", PROBLEM)
    solution = w(ws, "solution", SOLUTION, {"problem_id": migration})
    tactic = w(ws, "failed_tactic", TACTIC, {"problem_id": migration})
    export = w(ws, "problem", "The nightly export job times out after 30 minutes on the orders table.")
    index = w(ws, "fact", "orders.created_at has a btree index since migration 0040; the export filters on it.")
    w(ws, "problem", "The staging deploy hangs at the health check of the payments service.")  # no answer yet
    api.update(ws, {"type": "utility_vote", "memory_id": index, "problem_id": export, "vote": 1,
                    "evidence_refs": ["user:that was it"]})
    api.update(ws, {"type": "utility_vote", "memory_id": tactic, "problem_id": export, "vote": -1,
                    "evidence_refs": ["user:unrelated"]})
    code, ans, err = cli("eval", cwd=repo)
    assert code == 0, err
    assert ans["queries"] == 2 and ans["sources"] == {"links": 1, "votes": 1}
    by_problem = {q["problem"]: q for q in ans["per_query"]}
    assert by_problem[migration]["expected"] == sorted([solution, tactic])
    assert by_problem[migration]["from"] == ["links"]
    # a vote against a memory does not make it an answer; a vote for one does
    assert by_problem[export]["expected"] == [index] and by_problem[export]["from"] == ["votes"]
    assert all(m["n"] == 2 for m in ans["runs"][0]["systems"].values())


def test_a_store_with_nothing_to_measure_says_so_and_exits_0(
        repo: Path, ws: Workspace, cli: Callable[..., Any]) -> None:
    w(ws, "fact", "The API server listens on port 8080 in development.")
    w(ws, "problem", "The staging deploy hangs at the health check of the payments service.")
    code, ans, err = cli("eval", cwd=repo)
    assert code == 0, err
    assert ans["queries"] == 0 and ans["runs"] == [] and "nothing to measure" in ans["message"]
    code, shown, err = run_on_tty(["eval"], cwd=repo)
    assert code == 0, err
    assert b"0 queries: no problem in scope" in shown


def test_set_measures_a_setting_beside_the_current_one(example: Path, cli: Callable[..., Any]) -> None:
    code, ans, err = cli("eval", "--set", "read.relative_floor=0.2", "--set", "read.query_bar.targeted=0.35",
                         cwd=example)
    assert code == 0, err
    current, changed = ans["runs"]
    assert current["settings"] == "current" and current["overrides"] == {}
    assert changed["overrides"] == {"relative_floor": 0.2, "query_bar": {"targeted": 0.35}}
    assert changed["systems"]["memstore"]["n"] == current["systems"]["memstore"]["n"] == 2
    # A lower relative cut can only keep more of what the same read found.
    assert changed["systems"]["memstore"]["recall@10"] >= current["systems"]["memstore"]["recall@10"]
    code, shown, err = run_on_tty(["eval", "--set", "read.relative_floor=0.2"], cwd=example)
    assert code == 0, err
    text = shown.decode()
    assert "the settings in force:" in text and "read.relative_floor=0.2:" in text
    assert "memstore read" in text and "keyword lane alone" in text and "Only 2 queries" in text


@pytest.mark.parametrize(("given", "says"), [
    ("read.relative_flor=0.3", "did you mean 'relative_floor'"),
    ("read.relative_floor=abc", "expected a number, not 'abc'"),
    ("relative_floor=0.3", "expected read.NAME=VALUE"),
    ("read.limit.targeted=5000", "expected a whole number from 0 to 100"),
    ("read.limit=5", "expected a mapping of targeted, ambient"),
])
def test_a_setting_memstore_cannot_use_is_refused_before_anything_is_read(
        example: Path, cli: Callable[..., Any], given: str, says: str) -> None:
    before = store_files(example)
    code, ans, _ = cli("eval", "--set", given, cwd=example)
    assert code == 2 and ans["error"]["code"] == "usage" and says in ans["error"]["message"], ans
    assert not (example / ".memory" / ".index").exists()  # refused before the store was opened for reading
    assert store_files(example) == before


def test_eval_logs_nothing_to_an_open_episode(example: Path, cli: Callable[..., Any]) -> None:
    code, _, err = cli("episode", "start", "--agent", "claude-code", "--task", "measure", cwd=example)
    assert code == 0, err
    episode = max(example.glob(".memory/episodes/*/*.jsonl"), key=lambda p: p.stat().st_mtime)
    log = episode.read_bytes()
    code, ans, err = cli("eval", cwd=example)
    assert code == 0 and ans["queries"] == 2, err
    assert episode.read_bytes() == log
