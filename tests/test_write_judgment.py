"""Write-time judgment: a write answers with what is already close so the agent can reinforce,
supersede or link instead; a low-confidence write is stored flagged for review. Through the CLI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, git, store_files

pytestmark = pytest.mark.model

XDIST = "CI runs the test suite with pytest-xdist (pytest -n auto), in parallel across workers."
SERIAL = "CI runs the test suite with pytest serially, one test at a time."
OTHER = "The user wants commit messages in Conventional Commits style with a scope, like fix(db): ..."


def _write(cli: Callable[..., CliResult], repo: Path, *args: str) -> dict:
    rc, out, err = cli("write", *args, "--evidence", "user:said in the session", cwd=repo)
    assert rc == 0, err
    return out


def test_a_contradicting_fact_is_answered_with_what_it_may_contradict(repo: Path,
                                                                       cli: Callable[..., CliResult]) -> None:
    xdist = _write(cli, repo, "--kind", "fact", "--text", XDIST)
    pref = _write(cli, repo, "--kind", "preference", "--text", OTHER)
    before = store_files(repo)
    rc, dry, err = cli("write", "--kind", "fact", "--text", SERIAL, "--evidence", "user:x", "--dry-run", cwd=repo)
    assert rc == 0, err
    assert store_files(repo) == before  # a dry run shows, writes nothing
    for answer in (dry, _write(cli, repo, "--kind", "fact", "--text", SERIAL)):
        near = {s["id"]: s for s in answer["similar"]}
        assert near[xdist["id"]]["may_contradict"] is True, answer
        assert near[xdist["id"]]["kind"] == "fact" and near[xdist["id"]]["text"] == XDIST
        assert 0.6 <= near[xdist["id"]]["similarity"] < 0.95
        assert pref["id"] not in near  # another subject is not shown
    # the agent acts on it: a contradicts link from the new fact to the one it disputes
    rc, _, err = cli("write", "--kind", "fact", "--text", "CI went back to running pytest serially because "
                          "the DB fixtures are not safe across workers.", "--evidence", "user:x",
                          "--link", f"contradicts:{xdist['id']}", cwd=repo)
    assert rc == 0, err
    rc, out, err = cli("read", "does CI run pytest in parallel", cwd=repo)
    assert rc == 0 and out["disputes"], out


def test_a_new_subject_is_written_with_nothing_similar(repo: Path, cli: Callable[..., CliResult]) -> None:
    _write(cli, repo, "--kind", "fact", "--text", XDIST)
    out = _write(cli, repo, "--kind", "preference", "--text", OTHER)
    assert out["similar"] == [] and "review" not in out


def test_a_near_copy_is_still_refused_and_nothing_written(repo: Path, cli: Callable[..., CliResult]) -> None:
    first = _write(cli, repo, "--kind", "fact", "--text", XDIST)
    before = store_files(repo)
    rc, out, _ = cli("write", "--kind", "fact", "--text", XDIST + " ", "--evidence", "user:x", cwd=repo)
    assert rc == 4 and out["error"]["code"] == "duplicate"
    assert out["error"]["duplicates"][0]["id"] == first["id"]
    assert store_files(repo) == before


def test_a_low_confidence_write_is_stored_and_flagged_for_review(repo: Path, cli: Callable[..., CliResult]) -> None:
    sure = _write(cli, repo, "--kind", "fact", "--text", XDIST, "--confidence", "0.9")
    unsure = _write(cli, repo, "--kind", "fact", "--text", "The flaky test_upload failure comes from a race in "
                    "the S3 mock, probably.", "--confidence", "0.2")
    assert unsure["review"] is True and "review" not in sure
    assert (repo / unsure["path"]).exists()  # stored, not refused

    rc, report, err = cli("check", cwd=repo)
    assert rc == 0, err  # a warning: the commit is not blocked
    flagged = [p for p in report["problems"] if p["code"] == "low_confidence"]
    assert [p["path"] for p in flagged] == [unsure["path"]], report

    git(repo, "add", "-A")
    rc, diff, err = cli("diff", "main", cwd=repo)
    assert rc == 0, err
    review = {m["id"]: m["review"] for m in diff["memories"]}
    assert review == {sure["id"]: False, unsure["id"]: True} and diff["summary"]["to_review"] == 1

    # a person confirms it with a +1 vote: no longer listed
    rc, _, err = cli("update", "--type", "utility_vote", "--memory", unsure["id"], "--vote", "1",
                     "--evidence", "user:checked, it is the mock", cwd=repo)
    assert rc == 0, err
    rc, report, err = cli("check", cwd=repo)
    assert rc == 0 and not [p for p in report["problems"] if p["code"] == "low_confidence"], report


def test_the_review_bar_is_configurable(repo: Path, cli: Callable[..., CliResult]) -> None:
    config = repo / ".memory" / "config.yaml"
    config.write_text(config.read_text() + "review:\n  confidence_below: 0.1\n")
    out = _write(cli, repo, "--kind", "fact", "--text", XDIST, "--confidence", "0.2")
    assert "review" not in out
    out = _write(cli, repo, "--kind", "fact", "--text", "Deploys go out on Fridays, maybe.", "--confidence", "0.05")
    assert out["review"] is True


def test_the_guide_and_mcp_tell_agents_to_judge_what_is_similar(repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, guide, err = cli("guide", "--json-out", cwd=repo)
    assert rc == 0, err
    assert "similar" in guide["text"] and "may_contradict" in guide["text"]
    from memstore.surfaces.mcp_server import TOOLS

    write_tool = next(t for t in TOOLS if t.name == "memory_write")
    assert "may_contradict" in write_tool.description and "similar" in write_tool.description
