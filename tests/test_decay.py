"""Decay, as the design asks: global utility weighs each vote by its age (a vote
``utility.half_life_days`` old counts half), and a failed tactic whose problem later gained a
solution with positive votes is history, not a watch-out. Through the CLI, in real git repos."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import CliResult, git

pytestmark = pytest.mark.model


def _id(cli: Callable[..., CliResult], repo: Path, *args: str) -> str:
    rc, out, err = cli("write", *args, "--evidence", "user:seen in the session", "--allow-duplicate", cwd=repo)
    assert rc == 0, err
    return out["id"]


def _vote(cli: Callable[..., CliResult], repo: Path, memory: str, vote: str, *extra: str, days_ago: int = 0) -> None:
    rc, out, err = cli("update", "--type", "utility_vote", "--memory", memory, "--vote", vote, *extra,
                       "--evidence", "user:it helped", cwd=repo)
    assert rc == 0, err
    if days_ago:  # an event written that long ago (its file, as a clone brings it)
        path = repo / out["path"]
        when = (datetime.now(UTC) - timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines = [f"created: '{when}'" if ln.startswith("created:") else ln for ln in path.read_text().splitlines()]
        path.write_text("\n".join(lines) + "\n")


def _global(cli: Callable[..., CliResult], repo: Path, memory: str) -> float:
    rc, out, err = cli("show", memory, cwd=repo)
    assert rc == 0, err
    return float(out["memory"]["derived"]["utility"]["global"])


def test_global_utility_decays_with_the_age_of_its_votes(repo: Path, cli: Callable[..., CliResult]) -> None:
    fact = _id(cli, repo, "--kind", "fact", "--text", "The nightly backup job writes to the eu-west bucket.")
    _vote(cli, repo, fact, "1", days_ago=360)
    # two half-lives (the default, 180 days): the vote counts a quarter; shrunk by two neutral votes
    assert _global(cli, repo, fact) == pytest.approx(0.25 / 2.25, abs=1e-4)
    (repo / ".memory" / "config.yaml").write_text("utility:\n  half_life_days: 360\n")
    assert _global(cli, repo, fact) == pytest.approx(0.5 / 2.5, abs=1e-4)
    rc, out, err = cli("read", "nightly backup job bucket", cwd=repo)
    assert rc == 0, err
    assert [r["utility"]["global"] for r in out["results"] if r["id"] == fact] == [pytest.approx(0.2, abs=1e-4)]
    # a fresh vote counts whole beside the old one
    rc, _, err = cli("update", "--type", "utility_vote", "--memory", fact, "--vote", "1", "--author", "agent-b",
                     "--evidence", "user:it helped again", cwd=repo)
    assert rc == 0, err
    assert _global(cli, repo, fact) == pytest.approx(1.5 / 3.5, abs=1e-4)


def test_a_half_life_out_of_range_is_named_and_the_default_applies(repo: Path, cli: Callable[..., CliResult]) -> None:
    fact = _id(cli, repo, "--kind", "fact", "--text", "The search cluster runs three data nodes.")
    _vote(cli, repo, fact, "1", days_ago=360)
    before = sorted(p.name for p in (repo / ".memory").rglob("*") if ".index" not in p.parts)
    (repo / ".memory" / "config.yaml").write_text("utility:\n  half_life_days: 0\n")
    git(repo, "add", ".memory/config.yaml")
    rc, report, _ = cli("check", cwd=repo)
    assert rc != 0 and any("utility.half_life_days" in p["message"] for p in report["problems"]
                           if p["code"] == "bad_config")
    assert _global(cli, repo, fact) == pytest.approx(0.25 / 2.25, abs=1e-4)  # 180 days, the default
    assert sorted(p.name for p in (repo / ".memory").rglob("*") if ".index" not in p.parts) == before


def test_a_failed_tactic_is_history_once_a_later_solution_is_voted_up(repo: Path,
                                                                       cli: Callable[..., CliResult]) -> None:
    problem = _id(cli, repo, "--kind", "problem", "--text", "The mobile login hangs when the SSO provider is slow.")
    early = _id(cli, repo, "--kind", "solution", "--problem", problem, "--text",
                "A 30 second client timeout on the SSO call stopped the hang for web logins.")
    tactic = _id(cli, repo, "--kind", "failed_tactic", "--problem", problem, "--text",
                 "Retrying the SSO call three times on mobile only made the hang three times longer.")
    _vote(cli, repo, early, "1", "--problem", problem)  # older than the tactic: it supersedes nothing

    def where() -> tuple[bool, bool]:
        rc, ctx, err = cli("context", cwd=repo)
        assert rc == 0, err
        return (tactic in {m["id"] for m in ctx["failed_tactics"]},
                tactic in {m["id"] for m in ctx.get("tactics_history", [])})

    assert where() == (True, False)
    later = _id(cli, repo, "--kind", "solution", "--problem", problem, "--text",
                "Cache the SSO token on the device and refresh it in the background; the login no longer waits.")
    assert where() == (True, False)  # no votes yet: not known to work
    _vote(cli, repo, later, "-1", "--problem", problem)
    assert where() == (True, False)  # voted down: it did not work either
    _vote(cli, repo, later, "1", "--problem", problem, "--author", "agent-b")
    _vote(cli, repo, later, "1", "--problem", problem, "--author", "agent-c")
    assert where() == (False, True)
    rc, out, err = cli("read", "mobile login hangs slow SSO retry", "--problem", problem, cwd=repo)
    assert rc == 0, err
    got = {r["id"]: r for r in out["results"]}
    assert got[tactic]["links"]["superseded_by"] == later and got[tactic]["note"].startswith("history:")
