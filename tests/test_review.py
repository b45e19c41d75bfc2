"""PR review: `check --base` for CI and `diff [REV]` rendering what a branch adds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, git, reopen, write_req
from quotednames import ALLOWED, NAMES, memory_file

from memstore.git.review import branch_diff
from memstore.store import episodes
from memstore.surfaces.render import diff as render_text
from memstore.verbs import api


@pytest.fixture
def base(repo: Path) -> Path:
    """main holds the store layout and one problem; work continues on branch `feature`."""
    api.write(reopen(repo), write_req("problem", "alembic upgrade fails: column already exists"))
    git(repo, "commit", "-q", "-m", "memstore layout and a problem")
    git(repo, "checkout", "-q", "-b", "feature")
    return repo


def problem_id(repo: Path) -> str:
    return next(m.id for m in reopen(repo).catalog("repo").memories.values() if m.kind == "problem")


def test_check_base_fails_on_a_branch_with_a_bad_memory(base: Path, cli: Callable[..., CliResult]) -> None:
    bad = base / ".memory" / "solutions" / "dangling.md"
    bad.write_text("---\nid: 01m80000000000000000000000\nkind: solution\nscope: repo\ncreated: 2026-11-20T10:00:00Z\n"
                   "links:\n  problem: 01m7zzzzzzzzzzzzzzzzzzzzzz\nevidence: []\n---\nPin the driver.\n")
    git(base, "add", "-A")
    git(base, "commit", "-q", "--no-verify", "-m", "a bad memory")
    code, report, stderr = cli("check", "--base", "main", cwd=base)
    assert code == 2 and report["ok"] is False
    codes = {p["code"] for p in report["problems"]}
    assert {"dangling_link", "missing_evidence"} <= codes
    # CI logs get the readable report on stderr next to the JSON on stdout
    assert "error: .memory/solutions/dangling.md: links.problem points at 01m7zzzzzz" in stderr
    assert "checked 1 file(s): 2 error(s)" in stderr


def test_check_base_fails_when_a_committed_memory_is_edited(base: Path, cli: Callable[..., CliResult]) -> None:
    path = next((base / ".memory" / "problems").glob("*.md"))
    path.write_text(path.read_text().replace("column", "COLUMN"))
    git(base, "commit", "-q", "--no-verify", "-am", "edit a reviewed memory")
    code, report, stderr = cli("check", "--base", "main", cwd=base)
    assert code == 2 and [p["code"] for p in report["problems"]] == ["immutable"]
    assert "immutable" in stderr


def test_check_base_passes_a_good_branch(base: Path, cli: Callable[..., CliResult]) -> None:
    api.write(reopen(base), write_req("solution", "Build the test schema with alembic upgrade head.",
                                      links={"problem_id": problem_id(base)}))
    git(base, "commit", "-q", "-m", "a good memory")
    code, report, stderr = cli("check", "--base", "main", cwd=base)
    assert code == 0 and report["ok"] and report["checked"] == 1 and stderr == ""
    code, err, _ = cli("check", "--base", "no-such-branch", cwd=base)
    assert code == 3 and err["error"]["code"] == "unknown_rev" and "does not resolve" in err["error"]["message"]


def test_diff_renders_what_the_branch_adds(base: Path, cli: Callable[..., CliResult]) -> None:
    ws = reopen(base)
    started = episodes.start(ws, agent="claude-code", task="fix migrations")
    logged = episodes.log(ws, "tool", "pytest: DuplicateColumn")
    episodes.end(ws, outcome="success")
    sol = api.write(ws, write_req("solution", "Build the test schema with alembic upgrade head.",
                                  links={"problem_id": problem_id(base)}, evidence=[logged["ref"]],
                                  memory_extra={"confidence": 0.8, "tags": ["alembic"]}))
    vote = api.update(reopen(base), {"op": "update", "type": "utility_vote", "memory_id": problem_id(base),
                                     "vote": 1, "evidence_refs": [logged["ref"]]})
    git(base, "commit", "-q", "-m", "session memories")
    fact = api.write(reopen(base), write_req("fact", "Migrations live in app/db/migrations/versions."))

    ans = branch_diff(reopen(base))  # default base: main
    assert ans["base"] == "main" and ans["summary"] == {"memories": 2, "events": 1, "episodes": 1, "problems": 0,
                                                    "to_review": 0}
    mems = {m["id"]: m for m in ans["memories"]}
    assert mems[sol["id"]]["committed"] and not mems[fact["id"]]["committed"]  # staged, not committed yet
    assert mems[sol["id"]]["links"]["problem"] == problem_id(base)
    assert ans["events"][0]["id"] == vote["id"] and "column already exists" in ans["events"][0]["target_text"]
    assert ans["episodes"][0]["episode"] == started["episode"] and ans["episodes"][0]["events"] == 1

    text = render_text(ans)
    assert f"+ solution {sol['id']}" in text and "Build the test schema with alembic upgrade head." in text
    assert f"evidence: {logged['ref']}" in text and "tags: alembic" in text
    assert f"+ fact {fact['id']}" in text and "[not committed]" in text
    assert f"vote +1 on {problem_id(base)}" in text
    assert f"+ new episode {started['episode']} (claude-code): 1 event(s)" in text

    code, piped, _ = cli("diff", "main", cwd=base)  # JSON when piped
    assert code == 0 and piped["summary"]["memories"] == 2
    code, nothing, _ = cli("diff", "HEAD", cwd=base)
    assert code == 0 and nothing["summary"]["memories"] == 1  # only the uncommitted fact remains


def test_diff_flags_edits_of_committed_memories(base: Path) -> None:
    path = next((base / ".memory" / "problems").glob("*.md"))
    path.write_text(path.read_text() + "\nmore\n")
    ans = branch_diff(reopen(base), "main")
    # the problem was committed on main itself, so an edit shows up against main's merge-base
    assert ans["problems"] and "immutable" in ans["problems"][0]["message"]
    assert "! .memory/problems/" in render_text(ans)


AWS_KEY = "AKIA" + "Q3EGRAV7PLM2XT5B"  # assembled so secret scanners leave this file alone


@pytest.mark.parametrize("case", sorted(NAMES))
def test_check_base_diff_and_review_see_a_memory_whose_name_git_quotes(base: Path, cli: Callable[..., CliResult],
                                                                        case: str) -> None:
    """Read without -z, git's listing C-quoted these names: `check --base` answered ok with 0
    checked, and `diff` and `review` showed nothing of a file holding a secret."""
    rel = memory_file(base, case, f"The deploy key is {AWS_KEY}.")
    git(base, "add", "-A")
    git(base, "commit", "-q", "--no-verify", "-m", "a memory with an odd name")
    code, report, _ = cli("check", "--base", "main", cwd=base)
    assert code == 2 and report["checked"] == 1, report
    found = {(p["path"], p["code"]) for p in report["problems"]}
    assert (rel, "secret") in found
    assert ((rel, "bad_name") in found) == (case not in ALLOWED)
    code, diff, _ = cli("diff", "main", cwd=base)
    assert code == 0 and [m["path"] for m in diff["memories"]] == [rel] and diff["memories"][0]["status"] == "A"
    code, review, err = cli("review", "--base", "main", "--format", "json", cwd=base)
    assert code == 0, err
    added = review["sections"]["added"]
    assert [m["path"] for m in added["memories"]] == [rel] and added["check_ok"] is False
    assert (rel, "secret") in {(p["path"], p["code"]) for p in added["check"]}


@pytest.mark.parametrize("case", sorted(NAMES))
def test_an_edit_of_a_committed_memory_whose_name_git_quotes_is_immutable(base: Path,
                                                                          cli: Callable[..., CliResult],
                                                                          case: str) -> None:
    git(base, "checkout", "-q", "main")
    rel = memory_file(base, case, "Releases are cut on Tuesdays.")
    git(base, "add", "-A")
    git(base, "commit", "-q", "--no-verify", "-m", "reviewed before the name rule")
    git(base, "checkout", "-q", "feature")
    git(base, "merge", "-q", "main")
    path = base / rel
    path.write_text(path.read_text(encoding="utf-8").replace("Tuesdays", "Fridays"), encoding="utf-8")
    git(base, "commit", "-q", "--no-verify", "-am", "rewrite what was reviewed")
    code, report, _ = cli("check", "--base", "main", cwd=base)
    assert code == 2 and [(p["path"], p["code"]) for p in report["problems"]] == [(rel, "immutable")], report
    # the name itself was judged when it came in; a plain check still names it
    code, plain, _ = cli("check", cwd=base)
    assert ((rel, "bad_name") in {(p["path"], p["code"]) for p in plain["problems"]}) == (case not in ALLOWED)
    ans = branch_diff(reopen(base), "main")
    assert [(p["path"], p["status"]) for p in ans["problems"]] == [(rel, "M")]
    assert "immutable" in ans["problems"][0]["message"]

