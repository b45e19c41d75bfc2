"""git/review.py (`memstore diff`) rule by rule, in process: what a branch's diff lists, where,
and with what, for each kind of change a pull request can carry to `.memory/`. The CLI path
and the rendering are in test_review.py; this file is what bench/mutation.py runs first for the
module (no CLI subprocess: the whole file takes seconds).

One branch holds every case at once and is diffed once for the module (`branch_diff` only
reads); the repos a case needs of its own (no commits, no default branch, a layout added on
the branch) are made per test."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import git, make_git_repo, write_req
from moduleworld import hermetic_env

from memstore.errors import NotFound, StoreError
from memstore.git.review import branch_diff
from memstore.store.workspace import Workspace, open_workspace
from memstore.verbs import api

EPISODES = ".memory/episodes/2026-11"
# ULID-shaped episode ids, one per case
APPENDED, STARTED, DELETED = ("01m7qfe3t1b183v60j1k2n9k5" + c for c in "abc")


@dataclass
class Branch:
    repo: Path
    env: dict[str, str]
    ids: dict[str, str]
    texts: dict[str, str]
    fork: str  # the commit feature branched from; main moved on after it
    diff: dict[str, Any]

    def ws(self) -> Workspace:
        return open_workspace(cwd=self.repo, env=self.env)


def _episode(repo: Path, episode: str, events: int, outcome: str | None = None) -> Path:
    path = repo / EPISODES / f"{episode}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"episode": episode, "agent": "claude-code", "task": "fix retries"}]
    rows += [{"seq": n, "source": "tool", "content": f"step {n}"} for n in range(1, events + 1)]
    rows += [{"ended": "2026-11-20T10:00:00Z", "outcome": outcome}] if outcome else []
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def branch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Branch]:
    """main: the layout, a problem, two facts, two episodes and a global preference. feature:
    a solution (typed link to the global preference), a fact with a link event, a fact written
    unsure, a vote, an episode appended to, a new one, one committed episode and one fact
    deleted, one fact edited, a stray file; then one fact staged, not committed. main gets a
    fact of its own after feature forked."""
    base = tmp_path_factory.mktemp("review-world")
    with hermetic_env(base) as env:
        repo = make_git_repo(base / "repo")
        api.init(open_workspace(cwd=repo))
        texts: dict[str, str] = {}

        def put(kind: str, text: str, scope: str = "repo", links: dict[str, Any] | None = None,
                **extra: Any) -> str:
            ws = open_workspace(cwd=repo, env={**env, "MEMSTORE_WRITE_MODE": "autonomous"} if scope == "global"
                                else env)
            mid = str(api.write(ws, write_req(kind, text, scope=scope, links=links,
                                              memory_extra=extra))["id"])
            texts[mid] = text
            return mid

        ids = {"problem": put("problem", "Webhook retries flake under load"),
               "deleted": put("fact", "Webhooks time out after 30 seconds"),
               "edited": put("fact", "Webhook payloads are signed with HMAC"),
               "gpref": put("preference", "Prefer small focused commits", scope="global")}
        _episode(repo, APPENDED, 2)
        _episode(repo, DELETED, 1, "success")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--no-verify", "-m", "memstore layout and memories")
        fork = git(repo, "rev-parse", "HEAD").strip()
        git(repo, "checkout", "-q", "-b", "feature")

        ids["solution"] = put("solution", "Retry webhooks from the job queue", links={
            "problem_id": ids["problem"], "relations": [{"type": "relates_to", "id": ids["gpref"]}]})
        ids["linked"] = put("fact", "The job queue retries five times")
        ids["unsure"] = put("fact", "Retries may double-deliver", confidence=0.3)
        ws = open_workspace(cwd=repo, env=env)
        ids["vote"] = str(api.update(ws, {"op": "update", "type": "utility_vote", "memory_id": ids["problem"],
                                          "vote": 1, "evidence_refs": ["user:it helped"]})["id"])
        ids["link"] = str(api.update(ws, {"op": "update", "type": "link", "memory_id": ids["linked"],
                                          "relation": {"type": "depends_on", "id": ids["problem"]},
                                          "evidence_refs": ["user:they go together"]})["id"])
        appended = repo / EPISODES / f"{APPENDED}.jsonl"
        appended.write_text(appended.read_text() + json.dumps({"seq": 3, "content": "step 3"}) + "\n"
                            + json.dumps({"ended": "2026-11-20T11:00:00Z", "outcome": "failure"}) + "\n")
        _episode(repo, STARTED, 3, "success")
        (repo / EPISODES / f"{DELETED}.jsonl").unlink()
        next((repo / ".memory" / "facts").glob(f"{ids['deleted']}-*.md")).unlink()
        edited = next((repo / ".memory" / "facts").glob(f"{ids['edited']}-*.md"))
        edited.write_text(edited.read_text().replace("HMAC", "RSA"))
        (repo / EPISODES / "notes.txt").write_text("not an episode\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--no-verify", "-m", "a session's memories")

        git(repo, "checkout", "-q", "main")
        ids["main_only"] = put("fact", "Main moved on after the fork")
        git(repo, "commit", "-q", "--no-verify", "-m", "main moves on")
        git(repo, "checkout", "-q", "feature")
        ids["staged"] = put("fact", "Webhook secrets rotate monthly")  # review mode: staged only
        ws = open_workspace(cwd=repo, env=env)
        yield Branch(repo=repo, env=env, ids=ids, texts=texts, fork=fork, diff=branch_diff(ws, "main"))


def _by_id(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["id"]: item for item in items}


# -- what is compared -----------------------------------------------------------------------------
def test_the_diff_is_against_the_merge_base_not_the_base_tip(branch: Branch) -> None:
    assert branch.diff["base"] == "main" and branch.diff["merge_base"] == branch.fork
    listed = {m["id"] for m in branch.diff["memories"]}
    assert branch.ids["main_only"] not in listed  # main's own memory is neither added nor deleted here
    assert not any(branch.ids["main_only"] in p["path"] for p in branch.diff["problems"])


def test_without_a_rev_the_base_is_the_default_branch(branch: Branch) -> None:
    assert branch_diff(branch.ws())["base"] == "main"


def test_against_head_only_what_is_not_committed_shows(branch: Branch) -> None:
    ans = branch_diff(branch.ws(), "HEAD")
    assert ans["base"] == "HEAD" and [m["id"] for m in ans["memories"]] == [branch.ids["staged"]]
    assert ans["summary"] == {"memories": 1, "events": 0, "episodes": 0, "problems": 0, "to_review": 0}


def test_a_rev_that_does_not_resolve_is_not_found(branch: Branch) -> None:
    with pytest.raises(NotFound) as exc:
        branch_diff(branch.ws(), "no-such-branch")
    assert (exc.value.code, exc.value.field) == ("unknown_rev", "rev")
    assert exc.value.message == "'no-such-branch' does not resolve to a commit"


def test_a_repo_without_commits_has_nothing_to_compare(tmp_path: Path) -> None:
    repo = tmp_path / "fresh"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    api.init(open_workspace(cwd=repo))
    with pytest.raises(StoreError, match="the repo has no commits yet, so there is nothing to compare with"):
        branch_diff(open_workspace(cwd=repo))


@pytest.mark.parametrize(("branches", "base"), [(["master"], "master"), (["master", "main"], "main")])
def test_the_default_base_is_main_then_master(tmp_path: Path, branches: list[str], base: str) -> None:
    repo = make_git_repo(tmp_path / "repo")
    git(repo, "branch", "-m", "main", branches[0])
    for name in branches[1:]:
        git(repo, "branch", name)
    api.init(open_workspace(cwd=repo))
    assert branch_diff(open_workspace(cwd=repo))["base"] == base


def test_with_no_default_branch_the_base_must_be_named(tmp_path: Path) -> None:
    repo = make_git_repo(tmp_path / "repo")
    git(repo, "branch", "-m", "main", "trunk")
    api.init(open_workspace(cwd=repo))
    with pytest.raises(StoreError) as exc:
        branch_diff(open_workspace(cwd=repo))
    assert exc.value.message == "cannot tell the default branch (no origin/HEAD, main or master)"
    assert exc.value.hint == "name the base: `memstore diff REV`"


def test_a_branch_that_adds_the_layout_lists_nothing(tmp_path: Path) -> None:
    """`memstore init` on a branch adds .gitkeep files and config.yaml: no memory, no problem."""
    repo = make_git_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "feature")
    api.init(open_workspace(cwd=repo))
    git(repo, "commit", "-q", "--no-verify", "-m", "memstore init")
    added = git(repo, "diff", "--name-only", "main", "HEAD")
    assert ".gitkeep" in added and ".memory/config.yaml" in added
    ans = branch_diff(open_workspace(cwd=repo), "main")
    assert ans["summary"] == {"memories": 0, "events": 0, "episodes": 0, "problems": 0, "to_review": 0}


# -- what is listed ------------------------------------------------------------------------------
def test_added_memories_are_listed_committed_or_not(branch: Branch) -> None:
    i = branch.ids
    mems = _by_id(branch.diff["memories"])
    assert set(mems) == {i["solution"], i["linked"], i["unsure"], i["staged"]}
    assert {mid for mid, m in mems.items() if not m["committed"]} == {i["staged"]}
    assert all(m["status"] == "A" and m["path"].startswith(".memory/") for m in mems.values())
    assert mems[i["solution"]]["text"] == branch.texts[i["solution"]]
    assert mems[i["solution"]]["links"]["problem"] == i["problem"]


def test_a_typed_link_carries_the_text_it_points_at_global_ones_too(branch: Branch) -> None:
    i = branch.ids
    assert _by_id(branch.diff["memories"])[i["solution"]]["relations"] == [
        {"type": "relates_to", "id": i["gpref"], "text": branch.texts[i["gpref"]]}]


def test_a_memory_written_unsure_is_flagged_for_review(branch: Branch) -> None:
    i = branch.ids
    flagged = {mid for mid, m in _by_id(branch.diff["memories"]).items() if m["review"]}
    assert flagged == {i["unsure"]} and branch.diff["summary"]["to_review"] == 1


def test_a_vote_shows_the_text_it_votes_on(branch: Branch) -> None:
    i = branch.ids
    vote = _by_id(branch.diff["events"])[i["vote"]]
    assert vote["type"] == "utility_vote" and vote["committed"] and vote["status"] == "A"
    assert vote["target_text"] == branch.texts[i["problem"]] and "link" not in vote


def test_a_link_event_shows_both_ends(branch: Branch) -> None:
    i = branch.ids
    link = _by_id(branch.diff["events"])[i["link"]]
    assert link["target_text"] == branch.texts[i["linked"]]
    assert link["link"] == {"type": "depends_on", "id": i["problem"], "text": branch.texts[i["problem"]]}


def test_episodes_count_their_events_and_the_rows_the_branch_adds(branch: Branch) -> None:
    eps = {e["episode"]: e for e in branch.diff["episodes"]}
    assert set(eps) == {APPENDED, STARTED}  # the stray notes.txt is no episode
    assert {k: eps[APPENDED][k] for k in ("status", "events", "new_rows", "outcome", "agent", "task")} == {
        "status": "M", "events": 3, "new_rows": 2, "outcome": "failure", "agent": "claude-code",
        "task": "fix retries"}
    assert {k: eps[STARTED][k] for k in ("status", "events", "new_rows", "outcome")} == {
        "status": "A", "events": 3, "new_rows": 5, "outcome": "success"}


def test_deleted_and_edited_memories_and_a_deleted_episode_are_problems(branch: Branch) -> None:
    i = branch.ids
    problems = {p["path"].split("/")[-1].split("-")[0].removesuffix(".jsonl"): (p["status"], p["message"])
                for p in branch.diff["problems"]}
    assert problems == {
        i["deleted"]: ("D", "a committed memory file was deleted (they are immutable)"),
        i["edited"]: ("M", "a committed memory file was modified (they are immutable)"),
        DELETED: ("D", "a committed episode was deleted"),
    }
    listed = {m["id"] for m in branch.diff["memories"]}
    assert not listed & {i["deleted"], i["edited"]}  # a problem, not also a memory


def test_the_summary_counts_each_list(branch: Branch) -> None:
    assert branch.diff["summary"] == {"memories": 4, "events": 2, "episodes": 2, "problems": 3, "to_review": 1}
