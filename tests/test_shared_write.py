"""``memstore write --scope shared:NAME``: a new memory goes straight to review in a shared store,
as a branch of its remote (the way ``promote`` proposes one), and nothing is written on this
machine. Real git (a bare remote as the organisation's store), the real CLI and a real daemon,
one HOME per test (conftest)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import git, store_files
from daemonworld import Env
from test_promote import clone_state, remote_branches, write
from test_shared_stores import DIGEST, Cli, home_store, make_world, org_remote, shared_dir

LIMIT = "The payments gateway refuses refunds older than 180 days with a 422 and no error body."
GATEWAY = "KEY_LIMIT = 64\n\ndef send(key):\n    return key[:64]\n"


@pytest.fixture
def world(tmp_path: Path, cli: Cli) -> dict[str, Path]:
    return make_world(tmp_path, cli)


def everything_here(world: dict[str, Path]) -> tuple[object, ...]:
    """What a shared write must leave as it was on this machine: the repos' stores and their git
    state, the global store's files, the attached clone, and the bare remote's branches."""
    a, b = world["a"], world["b"]
    home = home_store()
    global_files = {p.relative_to(home).as_posix() for p in home.rglob("*")
                    if p.is_file() and not {".index", ".shared", ".git"} & set(p.relative_to(home).parts)}
    return (store_files(a), store_files(b), git(a, "status", "--porcelain"), git(a, "rev-parse", "HEAD"),
            global_files, git(home, "rev-parse", "HEAD") if (home / ".git").exists() else None,
            clone_state(shared_dir()), remote_branches(world["bare"]))


def test_a_shared_write_is_pushed_as_a_branch_for_review_and_written_nowhere_here(
        world: dict[str, Path], cli: Cli) -> None:
    a, bare = world["a"], world["bare"]
    git(a, "remote", "add", "origin", "git@forge:acme/billing-svc.git")
    (a / "src" / "gateway.py").write_text(GATEWAY)
    git(a, "add", "src/gateway.py")
    git(a, "commit", "-q", "-m", "gateway client")
    head = git(a, "rev-parse", "HEAD").strip()
    local = write(cli, a, "--kind", "fact", "--text", "Repo A's billing worker batches refunds nightly at 02:00.",
                  "--evidence", "file:src/app.py")
    main_before = git(bare, "rev-parse", "main").strip()
    before = everything_here(world)

    code, out, err = cli("write", "--scope", "shared:team", "--kind", "problem", "--text", LIMIT,
                         "--evidence", "file:src/gateway.py#L1-L1", "--evidence", "user:seen in the refund incident",
                         "--related", local, cwd=a)
    assert code == 0, err
    mid = out["id"]
    assert out["scope"] == "shared:team" and out["kind"] == "problem" and out["mode"] == "review"
    branch = out["branch"]
    assert branch == f"memstore/write-{mid[-10:].lower()}" and out["base"] == "main"
    assert out["evidence"] == [f"repo:billing-svc@{head}:src/gateway.py#L1-L1", "user:seen in the refund incident"]
    assert out["dropped_links"] == [local]
    assert branch in out["next"] and "pull request" in out["next"]
    assert re.fullmatch(rf"problems/{mid}-[a-z0-9-]+\.md", out["path"])
    # The branch is on the remote, made from main and holding the one file; main is untouched.
    assert git(bare, "rev-parse", branch).strip() == out["commit"]
    assert git(bare, "rev-parse", "main").strip() == main_before
    assert git(bare, "diff", "--name-only", f"main...{branch}").split() == [out["path"]]
    text = git(bare, "show", f"{branch}:{out['path']}")
    assert f"id: {mid}" in text and "scope: repo" in text and LIMIT in text
    assert f"repo:billing-svc@{head}:src/gateway.py#L1-L1" in text and local not in text and "file:" not in text
    assert git(bare, "log", "-1", "--format=%an <%ae>", branch).strip() == "Test Author <author@example.com>"
    # Nothing here: no file in any store, nothing staged or committed, the clone as it was.
    assert everything_here(world)[:-1] == before[:-1]
    assert remote_branches(bare) == before[-1] | {branch}
    # What the review would merge passes the shared repository's own check.
    work = world["work"]
    git(work, "fetch", "-q", "origin")
    git(work, "switch", "-q", "-c", "review", f"origin/{branch}")
    code, out, err = cli("--store", ".", "check", cwd=work)
    assert code == 0, (out, err)


def test_a_shared_write_dry_run_runs_the_gates_and_pushes_nothing(world: dict[str, Path], cli: Cli) -> None:
    a = world["a"]
    before = everything_here(world)
    code, out, err = cli("write", "--scope", "shared:team", "--kind", "fact", "--text", LIMIT,
                         "--evidence", "file:src/app.py", "--dry-run", cwd=a)
    assert code == 0, err
    assert out["mode"] == "dry_run" and "branch" not in out and "commit" not in out
    assert out["evidence"][0].startswith("repo:repo-a@") and "repo:repo-a@" in out["content"]
    assert everything_here(world) == before


SECRET = "The deploy token is ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.mark.parametrize(("scope", "text", "evidence", "exit_code", "error"), [
    ("shared:nobody", LIMIT, "user:ops", 3, "not_attached"),
    ("shared:../x", LIMIT, "user:ops", 2, "schema"),
    ("shared:team", SECRET, "user:ops", 2, "secret"),
    ("shared:team", LIMIT, "user:token ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", 2, "secret"),
    # A file never committed cannot be named in the shared store's repo: form.
    ("shared:team", LIMIT, "file:src/new.py", 2, "bad_evidence"),
])
def test_a_refused_shared_write_says_why_and_writes_nothing_anywhere(
        world: dict[str, Path], cli: Cli, scope: str, text: str, evidence: str, exit_code: int, error: str) -> None:
    a = world["a"]
    (a / "src" / "new.py").write_text("print('not committed')\n")
    before = everything_here(world)
    code, out, err = cli("write", "--scope", scope, "--kind", "fact", "--text", text, "--evidence", evidence, cwd=a)
    assert code == exit_code and out["error"]["code"] == error, (out, err)
    assert "Traceback" not in err
    assert everything_here(world) == before


def test_a_bad_scope_on_the_command_line_is_a_usage_error(world: dict[str, Path], cli: Cli) -> None:
    before = everything_here(world)
    code, out, err = cli("write", "--scope", "team", "--kind", "fact", "--text", LIMIT, "--evidence", "user:ops",
                         cwd=world["a"])
    assert code == 2 and "shared:NAME" in err, (out, err)
    assert everything_here(world) == before


def test_a_solution_whose_problem_the_shared_store_lacks_is_refused(world: dict[str, Path], cli: Cli) -> None:
    a = world["a"]
    pid = write(cli, a, "--kind", "problem", "--text", LIMIT, "--evidence", "user:ops")
    before = everything_here(world)
    code, out, _ = cli("write", "--scope", "shared:team", "--kind", "solution", "--text",
                       "Refund through the ledger API for charges older than 180 days.", "--evidence", "user:ops",
                       "--problem", pid, cwd=a)
    assert code == 2 and out["error"]["code"] == "missing_link", out
    assert everything_here(world) == before


def test_a_rejected_push_is_push_rejected_and_leaves_nothing(world: dict[str, Path], cli: Cli) -> None:
    hook = world["bare"] / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'pushes need review rights' >&2\nexit 1\n")
    hook.chmod(0o755)
    before = everything_here(world)
    code, out, _ = cli("write", "--scope", "shared:team", "--kind", "fact", "--text", LIMIT, "--evidence", "user:ops",
                       cwd=world["a"])
    assert code == 4 and out["error"]["code"] == "push_rejected", out
    assert "memstore/write-" in out["error"]["message"]
    assert everything_here(world) == before


def test_a_json_request_names_the_shared_scope_too(world: dict[str, Path], cli: Cli) -> None:
    request = {"op": "write", "memory": {"kind": "fact", "scope": "shared:team", "text": LIMIT,
                                         "evidence_refs": ["user:ops"], "tags": ["payments"]}}
    code, out, err = cli("write", "--json", "-", cwd=world["a"], input=json.dumps(request))
    assert code == 0, err
    assert out["scope"] == "shared:team" and out["branch"] in remote_branches(world["bare"])
    assert "payments" in git(world["bare"], "show", f"{out['branch']}:{out['path']}")


def test_the_mcp_tool_writes_to_a_shared_store_the_same_way(world: dict[str, Path]) -> None:
    from mcp.client.session import ClientSession
    from test_mcp import ok, run_mcp

    async def script(session: ClientSession) -> dict[str, object]:
        result = await session.call_tool("memory_write", {"memory": {
            "kind": "fact", "scope": "shared:team", "text": LIMIT, "evidence_refs": ["user:ops"]}})
        return ok(result)

    before = everything_here(world)
    out = run_mcp(world["a"], script)
    assert out["scope"] == "shared:team" and out["mode"] == "review"
    assert remote_branches(world["bare"]) == before[-1] | {out["branch"]}
    assert everything_here(world)[:-1] == before[:-1]


@pytest.mark.model
@pytest.mark.slow
def test_with_a_daemon_running_the_shared_write_is_made_by_the_caller_and_pushed(tmp_path: Path) -> None:
    world = Env(tmp_path / "daemon")
    with world.environ():
        a = world.make_repo("repo-a")
        assert world.cli("init", "--global", cwd=a)[0] == 0
        _, bare = org_remote(tmp_path, world.cli, DIGEST)
        assert world.cli("attach", str(bare), "--name", "team", cwd=a)[0] == 0
    proc = world.start("--idle", "600")
    try:
        # The CLI forwards its argv; the daemon hands a shared write back to the caller.
        code, out, err = world.cli("write", "--scope", "shared:team", "--kind", "fact", "--text", LIMIT,
                                   "--evidence", "user:ops", cwd=a)
        assert code == 0, err
        assert out["scope"] == "shared:team" and out["branch"] in remote_branches(bare)
        # A forwarded request (the MCP server's path) is handed back the same way: no answer.
        request = {"op": "write", "memory": {"kind": "fact", "scope": "shared:team", "text": DIGEST,
                                             "evidence_refs": ["user:ops"]}}
        assert world.forward("write", a, request=request) == {"fallback": True}
        assert len(remote_branches(bare)) == 2
        assert "unexpected" not in world.log()
    finally:
        world.cleanup()
        proc.wait(timeout=30)
