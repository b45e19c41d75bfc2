"""``memstore promote ID --to NAME``: a memory of one repo proposed to a shared store as a branch
of its remote, and the ``repo:`` evidence form it travels in. Real git (a bare remote as the
organisation's store), the real CLI, one HOME per test (conftest)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from test_shared_stores import Cli, found, make_world, shared_dir

PROBLEM = "The payments gateway drops idempotency keys longer than 64 bytes and answers 502, not 400."
FIX = "Hash idempotency keys to a 32-byte hex digest before they reach the payments gateway."


@pytest.fixture
def world(tmp_path: Path, cli: Cli) -> dict[str, Path]:
    """The org's store on a bare remote, attached as "team"; repos A and B (test_shared_stores)."""
    return make_world(tmp_path, cli)


def remote_branches(bare: Path) -> set[str]:
    return set(git(bare, "for-each-ref", "--format=%(refname:short)", "refs/heads").split())


def write(cli: Cli, cwd: Path, *args: str) -> str:
    code, out, err = cli("write", *args, cwd=cwd)
    assert code == 0, err
    return str(out["id"])


def clone_state(root: Path) -> tuple[str, str, set[str]]:
    """The attached clone as promote must leave it: its commit, its status, its branches."""
    return (git(root, "rev-parse", "HEAD"), git(root, "status", "--porcelain"),
            set(git(root, "for-each-ref", "--format=%(refname)").split()))


def test_a_promoted_problem_reaches_the_remote_as_a_branch_and_after_the_merge_another_repo_recalls_it(
        world: dict[str, Path], cli: Cli) -> None:
    a, b, bare = world["a"], world["b"], world["bare"]
    git(a, "remote", "add", "origin", "git@forge:acme/billing-svc.git")
    (a / "src" / "gateway.py").write_text("KEY_LIMIT = 64\n\ndef send(key):\n    return key[:64]\n")
    git(a, "add", "src/gateway.py")
    git(a, "commit", "-q", "-m", "gateway client")
    head = git(a, "rev-parse", "HEAD").strip()
    # A local memory the shared store cannot hold a link to.
    local = write(cli, a, "--kind", "fact", "--text", "Repo A's billing worker batches refunds nightly at 02:00.",
                  "--evidence", "file:src/app.py")
    pid = write(cli, a, "--kind", "problem", "--text", PROBLEM, "--evidence", "file:src/gateway.py#L1-L1",
                "--evidence", "user:seen in the 2026-11 incident", "--related", local)
    main_before = git(bare, "rev-parse", "main").strip()
    clone_before = clone_state(shared_dir())

    code, out, err = cli("promote", pid[:10], "--to", "team", cwd=a)
    assert code == 0, err
    branch = out["branch"]
    assert branch == f"memstore/promote-{pid[-10:].lower()}" and out["base"] == "main"
    assert out["evidence"] == [f"repo:billing-svc@{head}:src/gateway.py#L1-L1", "user:seen in the 2026-11 incident"]
    assert out["dropped_links"] == [local]
    assert "pull request" in out["next"]
    # The branch is on the remote with the file; main and the attached clone are untouched.
    assert branch in remote_branches(bare)
    assert git(bare, "rev-parse", "main").strip() == main_before
    assert git(bare, "rev-parse", branch).strip() == out["commit"]
    text = git(bare, "show", f"{branch}:{out['path']}")
    assert re.fullmatch(rf"problems/{pid}-[a-z0-9-]+\.md", out["path"])
    assert f"id: {pid}" in text and f"repo:billing-svc@{head}:src/gateway.py#L1-L1" in text
    assert local not in text and "file:" not in text
    assert git(bare, "log", "-1", "--format=%an <%ae>", branch).strip() == "Test Author <author@example.com>"
    assert clone_state(shared_dir()) == clone_before

    # The review merges it on the remote; a sync brings it to every repo that sees the store.
    merger = world["work"]
    git(merger, "pull", "-q", "--ff-only", "origin", "main")
    git(merger, "fetch", "-q", "origin")
    git(merger, "merge", "-q", "--no-ff", "-m", "Merge promoted problem", f"origin/{branch}")
    git(merger, "push", "-q", "origin", "main")
    code, out, err = cli("sync", cwd=a)
    assert code == 0, err
    assert out["shared"][0]["received"] == 1
    hit = found(cli, b, "payments gateway idempotency keys 502")[PROBLEM]
    assert hit["scope"] == "shared:team" and hit["id"] == pid
    assert [d["doubt"] for d in hit["doubts"]] == ["unverified"]
    # What the review merged passes the shared repository's own check.
    code, out, err = cli("--store", ".", "check", cwd=world["work"])
    assert code == 0, (out, err)


def test_a_promote_with_a_secret_is_refused_and_leaves_no_branch_anywhere(world: dict[str, Path], cli: Cli) -> None:
    a, bare = world["a"], world["bare"]
    # A write refuses a secret; a file edited by hand afterwards is promoted through the same gates.
    pid = write(cli, a, "--kind", "problem", "--text", "The staging deploy fails when the registry token expires.",
                "--evidence", "user:seen on staging")
    path = next((a / ".memory" / "problems").glob(f"{pid}-*.md"))
    secret = "The token was ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    path.write_text(path.read_text() + secret + "\n")
    before, clone_before = remote_branches(bare), clone_state(shared_dir())
    code, out, _ = cli("promote", pid, "--to", "team", cwd=a)
    assert code == 2 and out["error"]["code"] == "secret", out
    assert remote_branches(bare) == before and clone_state(shared_dir()) == clone_before


@pytest.mark.parametrize(("args", "exit_code", "error"), [
    (("promote", "01zzzzzzzzzzzzzzzzzzzzzzzz", "--to", "team"), 3, "not_found"),
    (("promote", "{pid}", "--to", "nobody"), 3, "not_attached"),
    (("promote", "{pid}", "--to", "../x"), 2, "bad_name"),
])
def test_an_unknown_id_or_store_is_refused_and_nothing_is_pushed(
        world: dict[str, Path], cli: Cli, args: tuple[str, ...], exit_code: int, error: str) -> None:
    a, bare = world["a"], world["bare"]
    pid = write(cli, a, "--kind", "fact", "--text", "The nightly export runs in UTC.", "--evidence", "user:ops")
    before, clone_before = remote_branches(bare), clone_state(shared_dir())
    code, out, _ = cli(*(arg.format(pid=pid) for arg in args), cwd=a)
    assert code == exit_code and out["error"]["code"] == error, out
    assert remote_branches(bare) == before and clone_state(shared_dir()) == clone_before


def test_a_rejected_push_says_why_and_leaves_no_branch_behind(world: dict[str, Path], cli: Cli) -> None:
    a, bare = world["a"], world["bare"]
    pid = write(cli, a, "--kind", "fact", "--text", "The nightly export runs in UTC.", "--evidence", "user:ops")
    # The remote refuses every push (as a protected repository would).
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'pushes need review rights' >&2\nexit 1\n")
    hook.chmod(0o755)
    before, clone_before = remote_branches(bare), clone_state(shared_dir())
    code, out, _ = cli("promote", pid, "--to", "team", cwd=a)
    assert code == 4 and out["error"]["code"] == "push_rejected", out
    assert "memstore/promote-" in out["error"]["message"]
    assert remote_branches(bare) == before and clone_state(shared_dir()) == clone_before


def test_a_memory_the_shared_store_holds_is_not_promoted_again(world: dict[str, Path], cli: Cli) -> None:
    a = world["a"]
    pid = write(cli, a, "--kind", "fact", "--text", "The nightly export runs in UTC.", "--evidence", "user:ops")
    assert cli("promote", pid, "--to", "team", cwd=a)[0] == 0
    git(world["work"], "fetch", "-q", "origin")
    git(world["work"], "merge", "-q", "--ff-only", f"origin/memstore/promote-{pid[-10:].lower()}")
    git(world["work"], "push", "-q", "origin", "main")
    code, out, _ = cli("promote", pid, "--to", "team", cwd=a)
    assert code == 4 and out["error"]["code"] == "already_shared", out


@pytest.mark.parametrize("bad", [
    "repo:billing@abc:src/x.py",           # a SHA of fewer than 7 hex digits
    "repo:billing@0123456789ab:/etc/passwd",  # an absolute path
    "repo:billing@0123456789ab:../x.py",    # a path that climbs out
    "repo:billing@main:src/x.py",           # a branch, not a commit
    "repo:@0123456789ab:src/x.py",          # no repo name
    "repo:billing@0123456789ab:src/x.py#L9-L2",  # an upside-down range
])
def test_a_malformed_repo_evidence_is_refused_at_write_and_nothing_is_written(
        world: dict[str, Path], cli: Cli, bad: str) -> None:
    a = world["a"]
    code, out, _ = cli("write", "--kind", "fact", "--text", "The billing worker retries three times.",
                       "--evidence", bad, cwd=a)
    assert code == 2 and out["error"]["code"] == "bad_evidence", out
    assert not list((a / ".memory" / "facts").glob("*.md"))


def test_a_repo_evidence_is_written_as_given_and_read_back(world: dict[str, Path], cli: Cli) -> None:
    a = world["a"]
    ref = "repo:billing-svc@0123456789abcdef0123456789abcdef01234567:src/gateway.py#L3-L9"
    mid = write(cli, a, "--kind", "fact", "--text", "The billing service caps idempotency keys at 64 bytes.",
                "--evidence", ref)
    code, out, err = cli("show", mid, cwd=a)
    assert code == 0, err
    shown: dict[str, Any] = out.get("memory", out)
    assert shown["evidence"] == [ref]
    # No checkout of that repository here: every read says so rather than vouching for it.
    hit = found(cli, a, "billing idempotency keys 64 bytes")["The billing service caps idempotency keys at 64 bytes."]
    assert [d["doubt"] for d in hit["doubts"]] == ["unverified"] and ref in hit["doubts"][0]["why"]


def test_check_passes_a_well_formed_repo_evidence_and_reports_a_malformed_one(world: dict[str, Path], cli: Cli) -> None:
    a = world["a"]
    mid = write(cli, a, "--kind", "fact", "--text", "The billing worker retries thrice.",
                "--evidence", "repo:billing-svc@abcdef1:src/x.py#L2")
    git(a, "add", "-A")
    code, out, err = cli("check", cwd=a)
    assert code == 0, (out, err)
    # Edited by hand (or arriving in a pull request) into a form memstore does not read.
    path = next((a / ".memory" / "facts").glob(f"{mid}-*.md"))
    path.write_text(path.read_text().replace("@abcdef1:", "@main:"))
    git(a, "add", "-A")
    code, out, _ = cli("check", cwd=a)
    assert code != 0 and [p["code"] for p in out["problems"]] == ["bad_evidence"], out


def test_a_file_evidence_never_committed_is_refused_and_nothing_is_pushed(world: dict[str, Path], cli: Cli) -> None:
    a, bare = world["a"], world["bare"]
    (a / "src" / "draft.py").write_text("LIMIT = 64\n")
    pid = write(cli, a, "--kind", "fact", "--text", "The draft client caps keys at 64 bytes.",
                "--evidence", "file:src/draft.py")
    before, clone_before = remote_branches(bare), clone_state(shared_dir())
    code, out, _ = cli("promote", pid, "--to", "team", cwd=a)
    assert code == 2 and out["error"]["code"] == "bad_evidence" and "src/draft.py" in out["error"]["message"], out
    assert remote_branches(bare) == before and clone_state(shared_dir()) == clone_before


def test_with_gh_on_path_the_answer_gives_the_pr_command_and_never_runs_it(
        tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    world = make_world(tmp_path, cli)
    a, bare = world["a"], world["bare"]
    # The store attached by its GitHub URL, which git maps to the bare remote (url.insteadOf).
    url = "https://github.com/acme/org-memory.git"
    git(a, "config", "--global", f"url.{bare}.insteadOf", url)
    assert cli("attach", url, "--name", "gh-org", cwd=a)[0] == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ran = tmp_path / "gh-ran"
    (bin_dir / "gh").write_text(f"#!/bin/sh\ntouch {ran}\n")
    (bin_dir / "gh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    pid = write(cli, a, "--kind", "fact", "--text", "The nightly export runs in UTC.", "--evidence", "user:ops")
    code, out, err = cli("promote", pid, "--to", "gh-org", cwd=a)
    assert code == 0, err
    assert shlex.split(out["gh"])[:9] == ["gh", "pr", "create", "--repo", "acme/org-memory", "--head", out["branch"],
                                          "--base", "main"]
    assert out["branch"] in remote_branches(bare) and not ran.exists()


def test_a_kind_folder_the_remote_made_a_symlink_is_never_written_through(world: dict[str, Path], cli: Cli) -> None:
    a, bare, work = world["a"], world["bare"], world["work"]
    outside = work.parent / "outside"
    outside.mkdir()
    # Someone with push rights replaces problems/ by a link out of the repository.
    for p in (work / "problems").iterdir():
        p.unlink()
    (work / "problems").rmdir()
    (work / "problems").symlink_to(outside, target_is_directory=True)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "problems elsewhere")
    git(work, "push", "-q", "origin", "main")
    pid = write(cli, a, "--kind", "problem", "--text", "The nightly export misses rows written after 23:59 UTC.",
                "--evidence", "user:ops")
    before = remote_branches(bare)
    code, out, _ = cli("promote", pid, "--to", "team", cwd=a)
    assert code == 2 and out["error"]["code"] == "not_regular", out
    assert list(outside.iterdir()) == [] and remote_branches(bare) == before
