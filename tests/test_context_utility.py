"""Utility is bound to the problem it was earned on: votes cast while solving one problem never
hide a memory from the reads of another; votes for the problem in hand do. Through the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult

pytestmark = pytest.mark.model

CDN = "Asset downloads from the CDN fail with 403 InvalidToken: the signed URL token expired before the request."
PGB = "Queries fail with 'prepared statement \"s1\" does not exist' when the app connects through pgbouncer."
FIX = ("Behind pgbouncer in transaction pooling mode, turn off server-side prepared statements "
       "(prepare_threshold=None in psycopg) so each statement works on any backend connection.")


def _id(cli: Callable[..., CliResult], repo: Path, *args: str) -> str:
    rc, out, err = cli("write", *args, "--evidence", "user:seen in the session", "--allow-duplicate", cwd=repo)
    assert rc == 0, err
    return out["id"]


def _downvote(cli: Callable[..., CliResult], repo: Path, memory: str, problem: str, n: int = 4) -> None:
    for i in range(n):  # the latest vote per (memory, problem, author) counts: four people
        rc, _, err = cli("update", "--type", "utility_vote", "--memory", memory, "--problem", problem, "--vote", "-1",
                         "--author", f"agent-{i}", "--evidence", "user:did not help", cwd=repo)
        assert rc == 0, err


def _world(cli: Callable[..., CliResult], repo: Path) -> dict[str, str]:
    cdn = _id(cli, repo, "--kind", "problem", "--text", CDN)
    pgb = _id(cli, repo, "--kind", "problem", "--text", PGB)
    fix = _id(cli, repo, "--kind", "solution", "--problem", pgb, "--text", FIX)
    return {"cdn": cdn, "pgb": pgb, "fix": fix}


def test_votes_cast_for_an_unrelated_problem_do_not_hide_a_memory(repo: Path, cli: Callable[..., CliResult]) -> None:
    ids = _world(cli, repo)
    _downvote(cli, repo, ids["fix"], ids["cdn"])
    rc, out, err = cli("read", "prepared statements fail behind pgbouncer", cwd=repo)
    assert rc == 0, err
    got = {r["id"]: r for r in out["results"]}
    assert ids["fix"] in got, out
    # the context-free prior is firmly negative (the old filter's reason to drop it) ...
    assert got[ids["fix"]]["utility"]["global"] <= -0.5
    # ... but the votes were about another problem, so this context holds little evidence
    assert got[ids["fix"]]["utility"]["local"] > -0.5


def test_a_memory_that_misled_on_this_problem_is_still_dropped(repo: Path, cli: Callable[..., CliResult]) -> None:
    ids = _world(cli, repo)
    _downvote(cli, repo, ids["fix"], ids["pgb"])
    rc, out, err = cli("read", "prepared statements fail behind pgbouncer", "--problem", ids["pgb"], cwd=repo)
    assert rc == 0, err
    got = [r["id"] for r in out["results"]]
    assert ids["pgb"] in got and ids["fix"] not in got, got
    # without naming the problem, the query is close to it: the same evidence applies
    rc, out, err = cli("read", "prepared statements fail behind pgbouncer", cwd=repo)
    assert rc == 0 and ids["fix"] not in [r["id"] for r in out["results"]], out


def test_reflect_vote_templates_carry_the_problem_the_read_served(repo: Path, cli: Callable[..., CliResult]) -> None:
    ids = _world(cli, repo)
    rc, _, err = cli("episode", "start", "--agent", "tester", "--task", "fix the pgbouncer errors", cwd=repo)
    assert rc == 0, err
    rc, out, err = cli("read", "prepared statements fail behind pgbouncer", "--problem", ids["pgb"][:10], cwd=repo)
    assert rc == 0 and ids["fix"] in [r["id"] for r in out["results"]], err or out
    rc, refl, err = cli("reflect", cwd=repo)
    assert rc == 0, err
    votes = {r["id"]: r["vote"] for r in refl["reads"]}
    assert votes[ids["fix"]]["problem_id"] == ids["pgb"]  # the full id, though a prefix was given
    # the filled template is a valid vote that lands in that problem's context
    rc, upd, err = cli("update", "--json", "-", cwd=repo, input=json.dumps({**votes[ids["fix"]], "vote": 1}))
    assert rc == 0, err
    assert f"problem: {ids['pgb']}" in (repo / upd["path"]).read_text()


def test_reflect_falls_back_to_the_one_problem_the_session_wrote(repo: Path,
                                                                 cli: Callable[..., CliResult]) -> None:
    ids = _world(cli, repo)
    rc, _, err = cli("episode", "start", "--agent", "tester", "--task", "pgbouncer", cwd=repo)
    assert rc == 0, err
    rc, out, err = cli("read", "prepared statements fail behind pgbouncer", cwd=repo)
    assert rc == 0 and ids["fix"] in [r["id"] for r in out["results"]], err or out
    rc, new, err = cli("write", "--kind", "problem", "--text", "pgbouncer drops prepared statements after a "
                       "server reset, breaking the nightly report job.", "--evidence", "user:seen",
                       "--allow-duplicate", cwd=repo)
    assert rc == 0, err
    rc, refl, err = cli("reflect", cwd=repo)
    assert rc == 0, err
    votes = {r["id"]: r["vote"] for r in refl["reads"]}
    assert votes[ids["fix"]]["problem_id"] == new["id"]
