"""Git hooks, run for real by `git commit` / `git checkout` in tmp repos: install beside a
foreign hook, fail-closed pre-commit, fail-open post hooks, uninstall, core.hooksPath."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, git, reopen, write_req
from quotednames import ALLOWED, NAMES, memory_file

from memstore import open_workspace
from memstore.errors import Conflict
from memstore.git import hooks
from memstore.store import episodes
from memstore.surfaces import githook
from memstore.verbs import api

AWS_KEY = "AKIA" + "Q3EGRAV7PLM2XT5B"  # assembled so secret scanners leave this file alone


def commit(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`git commit` with the hooks running (no --no-verify)."""
    return subprocess.run(["git", "commit", "-q", *args], cwd=repo, capture_output=True, text=True, check=False)


def hook_dir(repo: Path) -> Path:
    return repo / ".git" / "hooks"


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def hooked(repo: Path) -> Path:
    """The conftest repo (store initialised and staged) with memstore's hooks installed and the
    layout committed."""
    hooks.install(repo)
    res = commit(repo, "-m", "memstore layout")
    assert res.returncode == 0, res.stderr
    return repo


def test_install_beside_an_existing_hook_runs_both(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "legacy-ran"
    legacy = hook_dir(repo) / "post-commit"
    legacy.write_text(f"#!/bin/sh\necho ran >> '{marker}'\n")
    legacy.chmod(0o755)
    ans = hooks.install(repo)
    assert {h["hook"]: h["legacy"] for h in ans["hooks"]}["post-commit"] is True
    assert (hook_dir(repo) / "post-commit.legacy").read_text().startswith("#!/bin/sh\necho ran")
    assert hooks.is_ours(hook_dir(repo) / "post-commit")
    ws = reopen(repo)
    started = episodes.start(ws, task="both hooks")
    res = commit(repo, "-m", "layout")
    assert res.returncode == 0, res.stderr
    assert marker.read_text() == "ran\n"  # the foreign hook ran
    events = rows(repo / started["path"])[1:]
    assert events[-1]["source"] == "git" and events[-1]["git"]["message"] == "layout"  # and ours did

    # idempotent: a second install changes nothing and does not chain our own hook
    again = hooks.install(repo)
    assert all(h["state"] == "unchanged" for h in again["hooks"])
    assert hooks.status(repo)["installed"]
    # uninstall restores the foreign hook exactly
    hooks.uninstall(repo)
    assert (hook_dir(repo) / "post-commit").read_text().startswith("#!/bin/sh\necho ran")
    assert not (hook_dir(repo) / "post-commit.legacy").exists()
    assert not (hook_dir(repo) / "pre-commit").exists()
    assert all(h["state"] in ("absent", "foreign") for h in hooks.status(repo)["hooks"])


def test_legacy_pre_commit_refusal_is_honoured(repo: Path) -> None:
    legacy = hook_dir(repo) / "pre-commit"
    legacy.write_text("#!/bin/sh\necho 'legacy says no' >&2\nexit 3\n")
    legacy.chmod(0o755)
    hooks.install(repo)
    res = commit(repo, "-m", "blocked by the legacy hook")
    assert res.returncode != 0 and "legacy says no" in res.stderr


def test_installed_hook_records_the_python_and_status_reports_it(repo: Path, cli: Callable[..., CliResult]) -> None:
    code, ans, _ = cli("hooks", "install", "--python", "/opt/py/bin/python3", cwd=repo)
    assert code == 0
    text = (hook_dir(repo) / "pre-commit").read_text()
    assert "MEMSTORE_PYTHON=/opt/py/bin/python3" in text and hooks.MARKER in text
    code, st, _ = cli("hooks", "status", cwd=repo)
    assert st["installed"] and {h["python"] for h in st["hooks"]} == {"/opt/py/bin/python3"}
    # an edited hook shows as outdated; install refreshes it
    (hook_dir(repo) / "post-merge").write_text(text.replace("exit 1", "exit 2"))
    assert {h["hook"]: h["state"] for h in hooks.status(repo)["hooks"]}["post-merge"] == "outdated"
    code, ans, _ = cli("hooks", "install", "--python", "/opt/py/bin/python3", cwd=repo)
    assert {h["hook"]: h["state"] for h in ans["hooks"]}["post-merge"] == "updated"


def test_core_hooks_path_is_refused_unless_allowed(repo: Path, cli: Callable[..., CliResult]) -> None:
    git(repo, "config", "core.hooksPath", ".githooks")
    code, err, stderr = cli("hooks", "install", cwd=repo)
    assert code == 4 and err["error"]["code"] == "hooks_path_set" and "--hooks-path-ok" in stderr
    assert not (repo / ".githooks").exists() and not (hook_dir(repo) / "pre-commit").exists()
    code, ans, _ = cli("hooks", "install", "--hooks-path-ok", cwd=repo)
    assert code == 0 and Path(ans["hooks_dir"]) == repo / ".githooks"
    assert hooks.is_ours(repo / ".githooks" / "pre-commit")


def test_install_refuses_when_a_foreign_hook_and_legacy_both_exist(repo: Path) -> None:
    for name in ("post-merge", "post-merge.legacy"):
        (hook_dir(repo) / name).write_text("#!/bin/sh\n")
    with pytest.raises(Conflict, match="neither is memstore's"):
        hooks.install(repo)
    assert not (hook_dir(repo) / "pre-commit").exists()  # nothing half-installed


def test_pre_commit_refuses_a_commit_that_edits_a_committed_memory(hooked: Path) -> None:
    repo = hooked
    ans = api.write(reopen(repo), write_req("fact", "The CI runs on Python 3.11 only."))
    res = commit(repo, "-m", "add a fact")
    assert res.returncode == 0, res.stderr
    path = repo / ans["path"]
    path.write_text(path.read_text().replace("3.11", "3.12"))
    git(repo, "add", ans["path"])
    res = commit(repo, "-m", "edit a committed memory")
    assert res.returncode != 0
    assert "immutable" in res.stderr and "commit refused" in res.stderr
    assert "edit a committed memory" not in git(repo, "log", "--format=%s")
    # The refusal says both ways out: archive with evidence, or undo the edit with the command it shows.
    assert f"memstore update --type archive --memory {ans['id']} --evidence" in res.stderr, res.stderr
    undo = re.search(r"`(git restore [^`]+)`", res.stderr)
    assert undo, res.stderr
    subprocess.run(shlex.split(undo.group(1)), cwd=repo, check=True)
    assert "3.11" in path.read_text() and not git(repo, "status", "--porcelain")


def test_pre_commit_refuses_secrets_and_fixes_hand_written_ids(hooked: Path) -> None:
    repo = hooked
    leaky = repo / ".memory" / "facts" / "deploy-key.md"
    leaky.write_text(f"---\nkind: fact\nevidence: ['user:ops']\n---\nThe deploy key is {AWS_KEY}.\n")
    git(repo, "add", ".memory/facts/deploy-key.md")
    res = commit(repo, "-m", "leak")
    assert res.returncode != 0 and "secret" in res.stderr
    leaky.unlink()
    git(repo, "rm", "-q", "--cached", ".memory/facts/deploy-key.md")

    hand = repo / ".memory" / "facts" / "hand-written.md"
    hand.write_text("---\nkind: fact\nevidence: ['user:the team lead']\n---\nReleases are cut on Tuesdays.\n")
    git(repo, "add", ".memory/facts/hand-written.md")
    staged_blob = git(repo, "rev-parse", ":.memory/facts/hand-written.md")
    res = commit(repo, "-m", "hand-written fact")
    # --fix wrote the id into the work tree copy and refused: the hook never stages anything
    assert res.returncode != 0 and "git add .memory/facts/hand-written.md" in res.stderr
    assert hand.read_text().startswith("---\nid: ") and git(repo, "rev-parse", ":.memory/facts/hand-written.md") \
        == staged_blob
    git(repo, "add", ".memory/facts/hand-written.md")
    res = commit(repo, "-m", "hand-written fact")
    assert res.returncode == 0, res.stderr
    committed = git(repo, "show", "HEAD:.memory/facts/hand-written.md")
    assert committed.startswith("---\nid: ") and "created:" in committed


def test_pre_commit_checks_the_staged_blob_not_the_work_tree(hooked: Path) -> None:
    """Issue #12.3: a staged secret is refused though the work tree copy is clean, and nothing
    the hook did ends up in the commit unstaged."""
    repo = hooked
    rel = ".memory/facts/01m7zzzzzzzzzzzzzzzzzzzzzz-deploy.md"
    path = repo / rel
    head = ("---\nid: 01m7zzzzzzzzzzzzzzzzzzzzzz\nkind: fact\ncreated: 2026-11-20T10:00:00Z\n"
            "evidence: ['user:ops']\n---\n")
    path.write_text(head + f"The deploy key is {AWS_KEY}.\n")
    git(repo, "add", rel)
    path.write_text(head + "The deploy key lives in the CI secrets.\n")  # cleaned, not staged
    res = commit(repo, "-m", "staged leak")
    assert res.returncode != 0 and "secret" in res.stderr
    assert AWS_KEY in git(repo, "show", f":{rel}")  # the index is as the person left it
    assert "staged leak" not in git(repo, "log", "--format=%s")


def test_pre_commit_accepts_a_clean_staged_blob_beside_a_dirty_work_tree(hooked: Path) -> None:
    """Issue #12.3: the commit is judged by what it holds, not by unstaged edits."""
    repo = hooked
    rel = ".memory/facts/01m7zzzzzzzzzzzzzzzzzzzzzy-deploy.md"
    path = repo / rel
    head = ("---\nid: 01m7zzzzzzzzzzzzzzzzzzzzzy\nkind: fact\ncreated: 2026-11-20T10:00:00Z\n"
            "evidence: ['user:ops']\n---\n")
    clean = head + "The deploy key lives in the CI secrets.\n"
    path.write_text(clean)
    git(repo, "add", rel)
    path.write_text(head + f"The deploy key is {AWS_KEY}.\n")  # a dirty, unstaged edit
    res = commit(repo, "-m", "clean fact")
    assert res.returncode == 0, res.stderr
    assert git(repo, "show", f"HEAD:{rel}") == clean
    assert AWS_KEY in path.read_text()  # the work tree copy was left alone


def test_pre_commit_never_fixes_a_file_whose_work_tree_copy_differs(hooked: Path) -> None:
    repo = hooked
    hand = repo / ".memory" / "facts" / "hand.md"
    hand.write_text("---\nkind: fact\nevidence: ['user:lead']\n---\nReleases are cut on Tuesdays.\n")
    git(repo, "add", ".memory/facts/hand.md")
    edited = "---\nkind: fact\nevidence: ['user:lead']\n---\nReleases are cut on Wednesdays.\n"
    hand.write_text(edited)
    res = commit(repo, "-m", "hand")
    assert res.returncode != 0 and "memstore check --fix" in res.stderr
    assert hand.read_text() == edited and "id:" not in git(repo, "show", ":.memory/facts/hand.md")


def test_pre_commit_refuses_a_staged_episode_holding_a_secret(hooked: Path) -> None:
    repo = hooked
    ep = repo / ".memory" / "episodes" / "2026-11" / "01m7zzzzzzzzzzzzzzzzzzzzzx.jsonl"
    ep.parent.mkdir(parents=True, exist_ok=True)
    ep.write_text(json.dumps({"episode": "01m7zzzzzzzzzzzzzzzzzzzzzx"}) + "\n"
                  + json.dumps({"seq": 1, "source": "tool", "content": f"export KEY={AWS_KEY}"}) + "\n")
    git(repo, "add", ".memory/episodes")
    res = commit(repo, "-m", "episode with a key")
    assert res.returncode != 0 and "secret" in res.stderr


def test_code_only_commits_skip_memstore(hooked: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'memstore exploded' >&2\nexit 1\n")
    broken.chmod(0o755)
    hooks.install(hooked, python=str(broken))
    (hooked / "src" / "app.py").write_text("def main():\n    return 43\n")
    git(hooked, "add", "src/app.py")
    res = commit(hooked, "-m", "code only")
    assert res.returncode == 0, res.stderr  # nothing under .memory/ staged: the fast path
    # ... while a commit touching .memory/ fails closed when memstore cannot run
    (hooked / ".memory" / "facts" / "x.md").write_text("---\nkind: fact\nevidence: ['user:x']\n---\nX.\n")
    git(hooked, "add", ".memory/facts/x.md")
    res = commit(hooked, "-m", "memory with a broken memstore")
    assert res.returncode != 0 and "memstore exploded" in res.stderr


def test_post_commit_appends_an_event_to_the_current_episode(hooked: Path) -> None:
    repo = hooked
    started = episodes.start(reopen(repo), task="post-commit")
    (repo / "src" / "b.py").write_text("B = 1\n")
    git(repo, "add", "src/b.py")
    res = commit(repo, "-m", "feat: add b")
    assert res.returncode == 0, res.stderr
    event = rows(repo / started["path"])[-1]
    sha = git(repo, "rev-parse", "HEAD").strip()
    assert event["source"] == "git" and event["seq"] == 1
    assert event["git"]["sha"] == sha and event["git"]["message"] == "feat: add b"
    assert event["git"]["paths"] == ["src/b.py"] and event["git"]["hook"] == "post-commit"
    assert event["content"].startswith(f"commit {sha[:7]} feat: add b")


def test_post_checkout_and_post_merge_log_too(hooked: Path) -> None:
    repo = hooked
    started = episodes.start(reopen(repo), task="branching")
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "src" / "c.py").write_text("C = 1\n")
    git(repo, "add", "src/c.py")
    assert commit(repo, "-m", "add c").returncode == 0
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-edit", "--no-ff", "feature")
    hooks_seen = [e["git"]["hook"] for e in rows(repo / started["path"])[1:]]
    assert hooks_seen == ["post-checkout", "post-commit", "post-checkout", "post-merge"]
    merge = rows(repo / started["path"])[-1]
    assert merge["git"]["paths"] == ["src/c.py"] and merge["content"].startswith("merge into main")


def test_without_an_episode_git_events_go_to_a_local_daily_episode(hooked: Path) -> None:
    repo = hooked
    (repo / "src" / "d.py").write_text("D = 1\n")
    git(repo, "add", "src/d.py")
    assert commit(repo, "-m", "add d").returncode == 0
    (repo / "src" / "e.py").write_text("E = 1\n")
    git(repo, "add", "src/e.py")
    assert commit(repo, "-m", "add e").returncode == 0
    daily = list((repo / ".memory" / ".local" / "episodes").glob("*/*.jsonl"))
    assert len(daily) == 1
    header, *events = rows(daily[0])
    assert header["agent"] == "git" and [e["git"]["message"] for e in events][-2:] == ["add d", "add e"]
    assert git(repo, "status", "--porcelain") == ""  # nothing left dirty by the hooks


def test_a_failing_memstore_never_breaks_git_in_post_hooks(hooked: Path, tmp_path: Path) -> None:
    repo = hooked
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'Traceback: something deep' >&2\necho 'boom' >&2\nexit 1\n")
    broken.chmod(0o755)
    for name in ("post-commit", "post-checkout", "post-merge"):
        path = hook_dir(repo) / name
        path.write_text(hooks.render(name, str(broken)))
    (repo / "src" / "f.py").write_text("F = 1\n")
    git(repo, "add", "src/f.py")
    res = commit(repo, "-m", "still commits")
    assert res.returncode == 0
    assert "still commits" in git(repo, "log", "-1", "--format=%s")
    assert "post-commit hook skipped: boom" in res.stderr and "Traceback" not in res.stderr  # quiet: one line
    res = subprocess.run(["git", "checkout", "-q", "-b", "other"], cwd=repo, capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0  # post-checkout's status would become checkout's: ours is always 0


def test_run_hook_swallows_errors_in_post_hooks(tmp_path: Path) -> None:
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    assert githook.run_hook("post-commit", [], cwd=outside) == 0
    assert githook.run_hook("pre-commit", [], cwd=outside) == 0  # no repo, no store: nothing to check


def test_pre_commit_refuses_a_staged_config_a_read_cannot_use(hooked: Path, cli: Callable[..., CliResult]) -> None:
    """A config.yaml setting memstore cannot use stops at the commit (reads fall back to the
    default and warn, but every clone would inherit it); the staged version is judged."""
    repo = hooked
    config = repo / ".memory" / "config.yaml"
    good = config.read_text()
    config.write_text(good + "duplicates:\n  threshold: high\nread:\n  query_bar: {targeted: low}\n")
    git(repo, "add", ".memory/config.yaml")
    config.write_text(good)  # fixed in the work tree, not staged
    res = commit(repo, "-m", "tune reads")
    assert res.returncode != 0, res.stdout
    assert "duplicates.threshold: expected a number, not 'high'" in res.stderr, res.stderr
    assert "read.query_bar.targeted: expected a number, not 'low'" in res.stderr, res.stderr
    assert "tune reads" not in git(repo, "log", "--format=%s")
    git(repo, "add", ".memory/config.yaml")
    rel = ".memory/facts/01m7zzzzzzzzzzzzzzzzzzzzzw-ci.md"
    (repo / rel).write_text("---\nid: 01m7zzzzzzzzzzzzzzzzzzzzzw\nkind: fact\ncreated: 2026-11-20T10:00:00Z\n"
                            "evidence: ['user:ops']\n---\nCI runs on Python 3.11 only.\n")
    git(repo, "add", rel)
    config.write_text(good + "limits:\n  max_text_chars: many\n")  # bad, but not staged
    res = commit(repo, "-m", "a fact")
    assert res.returncode == 0, res.stderr
    assert rel in git(repo, "show", "--name-only", "--format=", "HEAD")
    code, report, _ = cli("check", cwd=repo)  # the work tree's copy, without --staged
    assert code != 0 and "limits.max_text_chars: expected a whole number" in report["problems"][0]["message"]


GH_TOKEN = "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
FACT_ID = "01m7aaaaaaaaaaaaaaaaaaaaaa"
FACT_REL = f".memory/facts/{FACT_ID}-ci.md"
FACT_HEAD = f"---\nid: {FACT_ID}\nkind: fact\ncreated: 2026-11-20T10:00:00Z\nevidence: ['user:ops']\n"
VOTE_ID = "01m7bbbbbbbbbbbbbbbbbbbbbb"
VOTE = f"id: {VOTE_ID}\ntype: utility_vote\nmemory: {FACT_ID}\nvote: 1\ncreated: 2026-11-20T11:00:00Z\nauthor: ops\n"
EPISODE = "01m7cccccccccccccccccccccc"
NEW_FACT = ".memory/facts/01m7dddddddddddddddddddddd-deploy.md"
NEW_HEAD = "---\nid: 01m7dddddddddddddddddddddd\nkind: fact\ncreated: 2026-11-20T12:00:00Z\n"

# Every place a secret can sit in a staged file under .memory/: (path, the file's text, or a
# function of the text it had).
HIDING_PLACES: dict[str, tuple[str, str | Callable[[str], str]]] = {
    "memory_unknown_key": (NEW_FACT, NEW_HEAD + f"evidence: ['user:ops']\nnotes: {GH_TOKEN}\n---\nDeploys run.\n"),
    "memory_yaml_comment": (NEW_FACT, NEW_HEAD + f"# old token {GH_TOKEN}\nevidence: ['user:ops']\n---\nDeploys.\n"),
    "memory_body": (NEW_FACT, NEW_HEAD + f"evidence: ['user:ops']\n---\nThe deploy token is {GH_TOKEN}.\n"),
    "memory_html_comment": (NEW_FACT, NEW_HEAD + f"evidence: ['user:ops']\n---\nDeploys.\n<!-- {GH_TOKEN} -->\n"),
    "memory_tags": (NEW_FACT, NEW_HEAD + f"evidence: ['user:ops']\ntags: [ci, '{GH_TOKEN}']\n---\nDeploys.\n"),
    "memory_evidence": (NEW_FACT, NEW_HEAD + f"evidence: ['user:ops said {GH_TOKEN}']\n---\nDeploys.\n"),
    "memory_rationale": (NEW_FACT, NEW_HEAD + f"evidence: ['user:ops']\nrationale: saw {GH_TOKEN}\n---\nDeploys.\n"),
    "event_extra_key": (f".memory/events/{VOTE_ID}.yaml", VOTE + f"note: {GH_TOKEN}\n"),
    "event_comment": (f".memory/events/{VOTE_ID}.yaml", VOTE + f"# voted with {GH_TOKEN}\n"),
    "config_comment": (".memory/config.yaml", lambda old: old + f"# ci token: {GH_TOKEN}\n"),
    "config_unknown_key": (".memory/config.yaml", lambda old: old + f"ci_token: {GH_TOKEN}\n"),
    "episode_extra_key": (f".memory/episodes/2026-11/{EPISODE}.jsonl",
                          json.dumps({"episode": EPISODE}) + "\n"
                          + json.dumps({"seq": 1, "source": "tool", "content": "ok", "env": GH_TOKEN}) + "\n"),
    "other_file": (".memory/NOTES.txt", f"scratch: {GH_TOKEN}\n"),
}


@pytest.fixture
def with_fact(hooked: Path) -> Path:
    """``hooked`` with one valid fact committed (events vote on it)."""
    (hooked / FACT_REL).write_text(FACT_HEAD + "---\nCI runs on Python 3.11.\n")
    git(hooked, "add", FACT_REL)
    res = commit(hooked, "-m", "a fact")
    assert res.returncode == 0, res.stderr
    return hooked


@pytest.mark.parametrize("place", sorted(HIDING_PLACES))
def test_pre_commit_refuses_a_secret_anywhere_in_a_staged_file(with_fact: Path, place: str) -> None:
    """The hook scans the whole staged text of every file under the store, not only the fields
    memstore parses: a token under a key it does not know or in a comment lands in `git log -p`
    as surely as one in the text."""
    repo = with_fact
    rel, content = HIDING_PLACES[place]
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    text = content(path.read_text()) if callable(content) else content
    clean = text.replace(GH_TOKEN, "<token>")
    head = git(repo, "rev-parse", "HEAD")
    path.write_text(clean)
    git(repo, "add", rel)
    code, out, _ = run_check_staged(repo)
    assert code == 0, out  # the file is otherwise valid: only the secret can refuse it
    git(repo, "reset", "-q", "--", rel)

    path.write_text(text)
    git(repo, "add", rel)
    res = commit(repo, "-m", f"leak via {place}")
    assert res.returncode != 0, res.stdout
    assert "secret" in res.stderr and rel.removeprefix(".memory/") in res.stderr, res.stderr
    assert GH_TOKEN not in res.stderr  # the message shows a redacted excerpt
    assert git(repo, "rev-parse", "HEAD") == head
    assert GH_TOKEN not in git(repo, "log", "-p", "--all")


def run_check_staged(repo: Path) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "memstore", "check", "--staged"], cwd=repo, capture_output=True,
                          text=True, check=False)
    return proc.returncode, json.loads(proc.stdout or "{}"), proc.stderr


def test_pre_commit_refuses_a_secret_in_the_first_commit_of_a_new_repo(tmp_path: Path) -> None:
    """No HEAD yet: nothing to compare against, every staged file is scanned all the same."""
    repo = tmp_path / "fresh"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    api.init(open_workspace(cwd=repo))
    hooks.install(repo)
    (repo / NEW_FACT).write_text(NEW_HEAD + f"evidence: ['user:ops']\nnotes: {GH_TOKEN}\n---\nDeploys run.\n")
    git(repo, "add", ".memory")
    res = commit(repo, "-m", "first")
    assert res.returncode != 0 and "secret" in res.stderr, res.stderr
    assert subprocess.run(["git", "rev-parse", "-q", "--verify", "HEAD"], cwd=repo, capture_output=True,
                          check=False).returncode != 0  # no commit was made


def test_pre_commit_keeps_committed_events_episodes_and_memory_types(with_fact: Path) -> None:
    """Committed events are immutable like memories; a committed episode may only grow (evidence
    refs point at its lines) and never be deleted; a memory swapped for a symlink is a change."""
    repo = with_fact
    event_rel = f".memory/events/{VOTE_ID}.yaml"
    episode_rel = f".memory/episodes/2026-11/{EPISODE}.jsonl"
    first = json.dumps({"episode": EPISODE}) + "\n" + json.dumps({"seq": 1, "source": "tool", "content": "ok"}) + "\n"
    (repo / event_rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / event_rel).write_text(VOTE)
    (repo / episode_rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / episode_rel).write_text(first)
    git(repo, "add", event_rel, episode_rel)
    res = commit(repo, "-m", "a vote and an episode")
    assert res.returncode == 0, res.stderr

    grown = first + json.dumps({"seq": 2, "source": "tool", "content": "more"}) + "\n"
    (repo / episode_rel).write_text(grown)
    git(repo, "add", episode_rel)
    res = commit(repo, "-m", "the episode grows")
    assert res.returncode == 0, res.stderr

    def refused(change: Callable[[], None], message: str) -> None:
        head = git(repo, "rev-parse", "HEAD")
        change()
        res = commit(repo, "-m", "rewrite history")
        assert res.returncode != 0 and message in res.stderr, res.stderr
        assert git(repo, "rev-parse", "HEAD") == head
        git(repo, "reset", "-q", "--hard", "HEAD")

    def edit(rel: str, text: str) -> Callable[[], None]:
        return lambda: ((repo / rel).write_text(text), git(repo, "add", rel))

    refused(edit(event_rel, VOTE.replace("vote: 1", "vote: -1")), "immutable")
    refused(lambda: git(repo, "rm", "-q", event_rel), "immutable")
    refused(edit(episode_rel, grown.replace('"ok"', '"changed"')), "episodes are append-only")
    refused(lambda: git(repo, "rm", "-q", episode_rel), "a committed episode was deleted")

    def to_symlink() -> None:
        (repo / FACT_REL).unlink()
        (repo / FACT_REL).symlink_to("../../src/app.py")
        git(repo, "add", FACT_REL)

    refused(to_symlink, "immutable")


@pytest.mark.parametrize("case", sorted(NAMES))
def test_pre_commit_sees_staged_memories_whose_names_git_quotes(hooked: Path, case: str) -> None:
    """Read without -z, the staged listing C-quoted these names: an edit or a `git rm` of such a
    committed memory committed through the hook, where the same edit of `...-plain.md` is refused."""
    repo = hooked
    rel = memory_file(repo, case, "Releases are cut on Tuesdays.")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-verify", "-m", "a memory from before the name rule")
    head = git(repo, "rev-parse", "HEAD")

    path = repo / rel
    path.write_text(path.read_text(encoding="utf-8").replace("Tuesdays", "Fridays"), encoding="utf-8")
    git(repo, "add", "-A")
    res = commit(repo, "-m", "rewrite what was reviewed")
    assert res.returncode != 0 and "immutable" in res.stderr and "modified" in res.stderr, res.stderr
    git(repo, "checkout", "-q", "HEAD", "--", ".memory")
    git(repo, "rm", "-q", "--", rel)
    res = commit(repo, "-m", "remove what was reviewed")
    assert res.returncode != 0 and "immutable" in res.stderr and "deleted" in res.stderr, res.stderr
    git(repo, "reset", "-q", "--hard")
    assert git(repo, "rev-parse", "HEAD") == head

    leaky = memory_file(repo, case, f"The deploy key is {AWS_KEY}.", serial=1)
    git(repo, "add", "-A")
    res = commit(repo, "-m", "a secret")
    assert res.returncode != 0 and "secret" in res.stderr and AWS_KEY not in res.stderr, res.stderr
    git(repo, "rm", "-q", "--cached", "--", leaky)
    (repo / leaky).unlink()
    assert git(repo, "rev-parse", "HEAD") == head

    # a new file so named: memstore never makes one, a hostile branch may; only a letter past
    # ASCII is a name a person could have chosen
    odd = memory_file(repo, case, "Deploys need a green main.", serial=2)
    git(repo, "add", "-A")
    res = commit(repo, "-m", "a clean memory with an odd name")
    if case in ALLOWED:
        assert res.returncode == 0, res.stderr
        return
    assert res.returncode != 0 and "memstore never names a file so" in res.stderr, res.stderr
    assert git(repo, "rev-parse", "HEAD") == head
    git(repo, "rm", "-q", "--cached", "--", odd)
    (repo / odd).unlink()
    # the name committed before is judged where it came in, not again in every later commit
    api.write(reopen(repo), write_req("fact", "Deploys need a green main."))
    res = commit(repo, "-m", "a memory named by memstore")
    assert res.returncode == 0, res.stderr


def test_git_events_record_names_git_quotes_as_they_are(hooked: Path) -> None:
    repo = hooked
    started = episodes.start(reopen(repo), task="odd names")
    names = sorted(f"src/{n}.py" for n in NAMES.values())
    for name in names:
        (repo / name).write_text("X = 1\n")
    git(repo, "add", "--", "src")
    assert commit(repo, "-m", "odd names").returncode == 0
    event = rows(repo / started["path"])[-1]
    assert event["git"]["hook"] == "post-commit" and sorted(event["git"]["paths"]) == names


def test_pre_commit_refuses_a_name_that_is_not_utf8_with_a_finding_not_a_crash(hooked: Path) -> None:
    """git lists such a name as its bytes; read strictly as UTF-8 they stopped the check with a
    traceback instead of saying what is wrong."""
    repo = hooked
    rel = os.fsdecode(b".memory/facts/01m80000000000000000000003-caf\xff.md")
    (repo / rel).write_text("---\nid: 01m80000000000000000000003\nkind: fact\nscope: repo\n"
                            "created: 2026-11-20T10:00:00Z\nevidence: ['user:ops']\n---\n"
                            "Releases are cut on Tuesdays.\n", encoding="utf-8")
    git(repo, "add", "-A")
    head = git(repo, "rev-parse", "HEAD")
    res = commit(repo, "-m", "a name that is not UTF-8")
    assert res.returncode != 0 and "not UTF-8" in res.stderr and "Error" not in res.stderr, res.stderr
    assert git(repo, "rev-parse", "HEAD") == head
