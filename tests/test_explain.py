"""`memstore read --explain` and `--expect ID`: why a memory came back, and why one did not,
through the real CLI over a real store in git (real model, real indexes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import PROBLEM, SOLUTION, TACTIC, git, reopen, run_on_tty, store_files, write_req

from memstore.read import retrieve
from memstore.read.answers import Expected, Explanation
from memstore.store.workspace import Workspace
from memstore.verbs import api

pytestmark = pytest.mark.model

QUERY = "alembic upgrade head fails with DuplicateColumn tracking_code in the test suite"
FACT_OLD = "The database driver is asyncpg; connection URLs use postgresql+asyncpg://."
CHANGE = "The database driver moved from asyncpg to psycopg 3 in pyproject.toml."
FACT_NEW = "The database driver is psycopg 3; connection URLs use postgresql+psycopg://."
PREF = "Alembic migrations go in their own commit, apart from the model changes that use them."
FAR = "The marketing site's hero banner uses a teal gradient chosen by the design team."
BAD = "Pin alembic to 1.8 and rerun the migration; the DuplicateColumn error is an alembic bug."


def w(ws: Workspace, kind: str, text: str, links: dict[str, Any] | None = None) -> str:
    return api.write(ws, write_req(kind, text, evidence=["user:seen it"], links=links))["id"]


@pytest.fixture
def store(ws: Workspace) -> dict[str, str]:
    out = {"problem": w(ws, "problem", PROBLEM)}
    out["solution"] = w(ws, "solution", SOLUTION, {"problem_id": out["problem"]})
    out["tactic"] = w(ws, "failed_tactic", TACTIC, {"problem_id": out["problem"]})
    out["bad"] = w(ws, "solution", BAD, {"problem_id": out["problem"]})
    out["fact_old"] = w(ws, "fact", FACT_OLD)
    out["change"] = w(ws, "change", CHANGE, {"change_targets": [out["fact_old"]]})
    out["fact_new"] = w(ws, "fact", FACT_NEW, {"supersedes": [out["fact_old"]], "via_change": out["change"]})
    out["pref"] = w(ws, "preference", PREF)
    out["far"] = w(ws, "fact", FAR)
    api.update(ws, {"type": "archive", "memory_id": out["pref"], "archived": True,
                    "evidence_refs": ["user:no longer true"]})
    for who in ("alice", "bob", "carol"):
        api.update(ws, {"type": "utility_vote", "memory_id": out["bad"], "problem_id": out["problem"], "vote": -1,
                        "author": who, "evidence_refs": ["user:still fails"]})
    api.update(ws, {"type": "utility_vote", "memory_id": out["solution"], "problem_id": out["problem"], "vote": 1,
                    "evidence_refs": ["user:that fixed it"]})
    return out


def _without_explanations(answer: dict[str, Any]) -> dict[str, Any]:
    out = {**answer, "stats": {**answer["stats"], "elapsed_ms": 0}}
    out.pop("expected", None)
    out["results"] = [{k: v for k, v in r.items() if k != "explain"} for r in answer["results"]]
    return out


def test_explain_says_lanes_gates_links_and_votes_per_result(
        repo: Path, store: dict[str, str], cli: Callable[..., Any]) -> None:
    code, ans, err = cli("read", QUERY, "--explain", cwd=repo)
    assert code == 0, err
    got = {r["id"]: r for r in ans["results"]}
    assert store["problem"] in got and store["solution"] in got
    for r in ans["results"]:
        ex = r["explain"]
        query_gate = ex["gates"][0]
        assert query_gate["gate"] == "query" and query_gate["passed"]
        assert query_gate["top_similarity"] >= query_gate["bar"] == ans["stats"]["gate"]["bar"]
        assert ex["scores"]["final"] == r["score"]
        assert set(ex) == set(Explanation.__annotations__)
    problem = got[store["problem"]]["explain"]
    # The problem came through both lanes and cleared the per-result bar with its fused score.
    assert problem["lanes"]["vector"]["similarity"] > 0 and problem["lanes"]["keyword"]["rank"] >= 1
    floor = next(g for g in problem["gates"] if g["gate"] == "result_floor")
    assert floor["passed"] and floor["score"] == problem["lanes"]["fused"] >= floor["bar"]
    # The tactic is there because its problem pulled it: the link step names the problem.
    tactic = got[store["tactic"]]["explain"]
    assert {"step": "link", "type": "failed_tactic_of", "from": store["problem"]} in tactic["steps"]
    # The solution's vote for this problem raised its score by the factor the explanation gives.
    votes = got[store["solution"]]["explain"]["votes"]
    assert votes["count"] == 1 and votes["votes"][0]["value"] == 1.0 and votes["local"] > 0
    scores = got[store["solution"]]["explain"]["scores"]
    assert scores["final"] == pytest.approx(scores["after_links"] * votes["factor"], abs=2e-3)


def test_expect_names_the_step_that_left_each_memory_out(
        repo: Path, store: dict[str, str], cli: Callable[..., Any]) -> None:
    expect = [store[k] for k in ("solution", "fact_old", "pref", "bad", "far")]
    code, ans, err = cli("read", QUERY, *[a for e in expect for a in ("--expect", e[:12])], cwd=repo)
    assert code == 0, err
    by_id = {e["id"]: e for e in ans["expected"]}
    assert all(set(e) <= set(Expected.__annotations__) for e in ans["expected"])
    assert [e["id"] for e in ans["expected"]] == expect  # full ids, in the order asked
    assert by_id[store["solution"]]["returned"] and by_id[store["solution"]]["why"] == "returned"
    assert "explain" not in ans["results"][0]  # --expect alone adds no per-result explanation
    old = by_id[store["fact_old"]]
    assert old["why"] == "superseded" and old["superseded_by"] == store["fact_new"]
    assert by_id[store["pref"]]["why"] == "archived"
    bad = by_id[store["bad"]]
    assert bad["why"] == "votes" and bad["votes"]["local"] <= bad["votes"]["negative_cut"]
    far = by_id[store["far"]]
    assert far["why"] in ("below_floor", "not_candidate", "relative_gap"), far
    assert far["lanes"]["vector"]["similarity"] < ans["stats"]["gate"]["top_similarity"]
    assert not any(e["returned"] for e in ans["expected"][1:])


def test_expect_names_the_filter_the_scope_the_gate_and_the_limit(ws: Workspace, store: dict[str, str]) -> None:
    ws.global_write_mode = "autonomous"
    elsewhere = api.write(ws, {"memory": {"kind": "fact", "scope": "global", "evidence_refs": ["user:seen it"],
                                          "text": "alembic upgrade head runs every migration in order."}})["id"]
    repo_only = retrieve.read(reopen(ws.repo.worktree), {"query": QUERY, "include_global": False,  # type: ignore[union-attr]
                                                         "expect": [elsewhere]})
    assert repo_only["expected"][0]["why"] == "out_of_scope" and "global" in repo_only["expected"][0]["detail"]
    refused = retrieve.read(reopen(ws.repo.worktree), {  # type: ignore[union-attr]
        "query": "how long should sourdough bread proof in a cold oven", "expect": [store["problem"]]})
    assert refused["results"] == []
    gate = refused["expected"][0]
    assert gate["why"] == "query_gate" and not gate["gate"]["passed"]
    assert gate["gate"]["top_similarity"] < gate["gate"]["bar"]
    by_kind = retrieve.read(reopen(ws.repo.worktree), {"query": QUERY, "kinds": ["problem"],  # type: ignore[union-attr]
                                                       "expect": [store["solution"]]})
    filtered = by_kind["expected"][0]
    assert filtered["why"] == "filtered" and "solution" in filtered["detail"] and "problem" in filtered["detail"]
    one = retrieve.read(reopen(ws.repo.worktree), {"query": QUERY, "limit": 1,  # type: ignore[union-attr]
                                                   "expect": [store["tactic"]]})
    assert len(one["results"]) == 1
    cut = one["expected"][0]
    assert cut["why"] == "limit" and cut["limit"] == 1, cut


def test_explaining_changes_nothing_in_the_answer(ws: Workspace, store: dict[str, str]) -> None:
    root = ws.repo.worktree  # type: ignore[union-attr]
    plain = retrieve.read(reopen(root), {"query": QUERY})
    explained = retrieve.read(reopen(root), {"query": QUERY, "explain": True, "expect": [store["far"]]})
    assert "explain" not in plain["results"][0] and "expected" not in plain
    assert _without_explanations(explained) == _without_explanations(plain)


def test_expect_of_an_unknown_id_is_a_clear_error_and_logs_nothing(
        repo: Path, store: dict[str, str], cli: Callable[..., Any]) -> None:
    code, _, err = cli("episode", "start", "--agent", "claude-code", "--task", "migrations", cwd=repo)
    assert code == 0, err
    before = store_files(repo)
    episode = next(repo.glob(".memory/episodes/*/*.jsonl"))
    log_before = episode.read_bytes()
    code, ans, _ = cli("read", QUERY, "--expect", "01zzzzzzzzzzzz", cwd=repo)
    assert code == 3 and ans["error"]["code"] == "not_found" and "01zzzzzzzzzzzz" in ans["error"]["message"]
    code, ans, _ = cli("read", QUERY, "--expect", "abc", cwd=repo)
    assert code == 2 and ans["error"]["code"] in ("schema", "bad_request", "invalid_request"), ans
    assert store_files(repo) == before and episode.read_bytes() == log_before
    # The same read without the bad id is logged to the open episode, as every read is.
    code, _, err = cli("read", QUERY, "--expect", store["far"][:12], cwd=repo)
    assert code == 0, err
    assert episode.read_bytes() != log_before


def test_explain_on_a_terminal_reads_as_text(repo: Path, store: dict[str, str]) -> None:
    git(repo, "add", "-A")
    code, shown, err = run_on_tty(["read", QUERY, "--explain", "--expect", store["pref"][:12],
                                   "--expect", store["problem"][:12]], cwd=repo)
    assert code == 0, err
    text = shown.decode()
    assert "lanes: vector" in text and "gates: query best" in text and "brought by:" in text
    assert f"expected preference {store['pref'][:10]}: not returned (archived)" in text
    assert f"expected problem {store['problem'][:10]}: returned at position " in text
