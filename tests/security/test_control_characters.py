"""Control characters (NUL, ESC, ``\\x01``, C1) are refused with ``bad_chars`` wherever text comes
in: queries on the CLI and MCP, a hand-written memory file through ``check`` and a real
``git commit`` with the hooks installed, and an episode's agent at ``episode start``, where
nothing is written; an episode header that carries one anyway (from a clone) never becomes the
author of a write. Also: a repository git refuses as another user's is named, never read as
"no repository"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import CliResult, git, make_git_repo, store_files

from memstore.git import hooks

ESC_TEXT = "Releases are cut on \x1b[8mTuesdays\x1b[0m after the freeze."


def _commit(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "commit", "-q", *args], cwd=repo, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(("where", "frontmatter", "body"), [
    ("text-esc", "", ESC_TEXT),
    ("text-nul", "", "Releases are cut on\x00 Tuesdays after the freeze."),
    ("author-soh", 'author: "ops\\x01"\n', "Releases are cut on Tuesdays after the freeze."),
    ("tag-c1", 'tags: ["rel\\x9bease"]\n', "Releases are cut on Tuesdays after the freeze."),
    ("evidence-esc", "", "Releases are cut on Tuesdays after the freeze."),
])
def test_check_and_the_pre_commit_hook_refuse_control_characters_in_a_hand_written_file(
        repo: Path, cli: Callable[..., CliResult], where: str, frontmatter: str, body: str) -> None:
    hooks.install(repo)
    assert _commit(repo, "-m", "memstore layout").returncode == 0
    evidence = '"user:\\x1b]0;pwned\\x07"' if where == "evidence-esc" else "'user:the team lead'"
    rel = ".memory/facts/01m8dddddddddddddddddddddd-releases.md"
    (repo / rel).write_text(f"---\nid: 01m8dddddddddddddddddddddd\nkind: fact\nscope: repo\n"
                            f"created: 2026-11-20T10:00:00Z\n{frontmatter}evidence: [{evidence}]\n---\n{body}\n")
    code, report, _ = cli("check", "--json-out", cwd=repo)
    assert code == 2 and [p["code"] for p in report["problems"]] == ["bad_chars"], report
    assert "control character" in report["problems"][0]["message"]
    git(repo, "add", rel)
    head = git(repo, "rev-parse", "HEAD")
    res = _commit(repo, "-m", "a hand-written fact")
    assert res.returncode != 0 and "control character" in res.stderr and "\x1b" not in res.stderr, res.stderr
    assert git(repo, "rev-parse", "HEAD") == head


def test_a_clean_hand_written_file_with_tabs_and_newlines_still_commits(repo: Path) -> None:
    hooks.install(repo)
    rel = ".memory/facts/01m8eeeeeeeeeeeeeeeeeeeeee-tabs.md"
    (repo / rel).write_text("---\nid: 01m8eeeeeeeeeeeeeeeeeeeeee\nkind: fact\nscope: repo\n"
                            "created: 2026-11-20T10:00:00Z\nevidence: ['user:the team lead']\n---\n"
                            "Releases are cut on Tuesdays.\r\n\n\tAfter the freeze, never before.\n")
    git(repo, "add", "-A")
    res = _commit(repo, "-m", "a clean fact")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("agent", ["bot\x1b[31m", "bot\x01", "a" * 201])
def test_episode_start_refuses_an_agent_no_write_could_carry_and_writes_nothing(
        repo: Path, cli: Callable[..., CliResult], agent: str) -> None:
    before = store_files(repo)
    code, err, _ = cli("episode", "start", "--agent", agent, "--task", "fix the build", "--json-out", cwd=repo)
    assert code == 2 and err["error"]["code"] == ("too_large" if len(agent) > 200 else "bad_chars"), err
    assert err["error"]["field"] == "agent"
    assert store_files(repo) == before
    assert not (repo / ".memory" / ".local" / "current_episode").exists()
    code, err, _ = cli("episode", "start", "--json-out", cwd=repo, env={"MEMSTORE_AUTHOR": agent})
    assert code == 2 and store_files(repo) == before


def test_an_episode_header_with_a_control_character_never_becomes_an_author(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    """A header that arrived through git (hand-edited, from a clone) names an agent with an
    escape: writes of that episode fall back to the git user instead of failing on an author the
    agent never set."""
    code, started, _ = cli("episode", "start", "--agent", "planner", "--json-out", cwd=repo)
    assert code == 0, started
    path = repo / started["path"]
    rows = path.read_text().splitlines()
    header = json.loads(rows[0]) | {"agent": "planner\x1b]0;pwned\x07"}
    path.write_text("\n".join([json.dumps(header), *rows[1:]]) + "\n")
    env = {"MEMSTORE_EPISODE": started["episode"], "GIT_AUTHOR_NAME": "x"}
    git(repo, "config", "user.name", "Dana")
    code, wrote, stderr = cli("write", "--kind", "fact", "--evidence", "user:ops", "--text",
                              "Releases are cut on Tuesdays after the freeze.", "--json-out", cwd=repo, env=env)
    assert code == 0, (wrote, stderr)
    code, shown, _ = cli("show", wrote["id"], "--json-out", cwd=repo)
    assert shown["memory"]["author"] == "Dana", shown


def test_mcp_refuses_control_characters_in_a_query_and_an_agent(repo: Path) -> None:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "memstore", "mcp"], cwd=str(repo),
                                   env=dict(os.environ))
    before = store_files(repo)

    async def main() -> list[Any]:
        with anyio.fail_after(120):
            async with stdio_client(params) as streams, ClientSession(*streams) as s:
                await s.initialize()
                return [await s.call_tool("memory_read", {"query": "where is \x00 the config"}),
                        await s.call_tool("memory_read", {"query": "colour \x1b[31m red"}),
                        await s.call_tool("memory_read", {"query": "start of \x01 heading"}),
                        await s.call_tool("memory_context", {"task": "fix \x1b]0;x\x07 the build"}),
                        await s.call_tool("episode_start", {"agent": "bot\x1b[2J", "task": "t"})]

    for result in anyio.run(main):
        data = json.loads(result.content[0].text)
        assert result.is_error and data["error"]["code"] == "bad_chars", data
    assert store_files(repo) == before


def test_a_repo_owned_by_another_user_is_named_with_the_fix_never_read_as_no_repo(
        tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    """git refuses a repository another uid owns ("dubious ownership"). memstore used to take
    that for "no repository": reads answered from the global store alone, a write went on with
    no repo store. Every verb now answers ``unsafe_repo`` naming the repo and git's fix, and
    nothing is written (the global store included); once the user trusts it, all works."""
    if os.getuid() != 0:
        pytest.skip("needs root to give the repo to another uid")
    repo = make_git_repo(tmp_path / "theirs")
    code, _, stderr = cli("init", "--json-out", cwd=repo)
    assert code == 0, stderr
    # autonomous: in review mode a global write waits for `memstore approve`
    code, wrote, _ = cli("write", "--scope", "global", "--kind", "fact", "--evidence", "user:ops", "--text",
                         "The global store answers when the repo store is silent.", "--json-out", cwd=repo,
                         env={"MEMSTORE_WRITE_MODE": "autonomous"})
    assert code == 0, wrote
    subprocess.run(["chown", "-R", "1234:1234", str(repo)], check=True)
    probe = subprocess.run(["git", "status"], cwd=repo, capture_output=True, text=True, check=False)
    assert probe.returncode != 0 and "dubious ownership" in probe.stderr  # git itself refuses it
    home = Path(os.environ["HOME"])
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file() and ".index" not in p.parts}
    for argv in (["read", "global store answers"], ["list"], ["show", wrote["id"]], ["context"],
                 ["write", "--kind", "fact", "--evidence", "user:x", "--text", "A fact with nowhere to go."],
                 ["write", "--scope", "global", "--kind", "fact", "--evidence", "user:x", "--text",
                  "A global fact written from their repo."],
                 ["episode", "start"], ["check"], ["snapshot", "--out", "snap.md"], ["guide", "--install"]):
        code, err, stderr = cli(*argv, "--json-out", cwd=repo)
        assert code == 2 and err["error"]["code"] == "unsafe_repo", (argv, err, stderr)
        assert err["error"]["repo"] == str(repo)
        assert f"git config --global --add safe.directory {repo}" in err["error"]["hint"]
    after = {p: p.read_bytes() for p in home.rglob("*") if p.is_file() and ".index" not in p.parts}
    assert after == before
    assert not (repo / "snap.md").exists() and not (repo / "AGENTS.md").exists()
    git(repo, "config", "--global", "--add", "safe.directory", str(repo))
    code, ans, _ = cli("read", "global store answers", "--json-out", cwd=repo)
    assert code == 0 and [r["id"] for r in ans["results"]] == [wrote["id"]], ans


def test_the_daemon_refuses_control_characters_and_unbounded_files_and_keeps_answering(tmp_path: Path) -> None:
    """Through a real daemon: a query with a control character (argv and the wire's own read
    request) is ``bad_chars``; ``--json`` naming /dev/zero or a FIFO (read in the daemon, from the
    client's folder) and stdin from /dev/zero are refused at once, and the daemon answers the
    next read as before."""
    from daemonworld import Env, _seed

    life = Env(tmp_path / "daemon")
    proc = None
    try:
        with life.environ():
            repo = life.make_repo("repo")
            _seed(life, repo, "delta")
        proc = life.start("--idle", "600")
        os.mkfifo(repo.parent / "fifo")
        served = life.status()["requests"]
        for argv in (["read", "where is \x1b[2J the config"], ["read", "start \x01 here"],
                     ["read", "--json", "/dev/zero"], ["read", "--json", "../fifo"]):
            code, err, stderr = life.cli(*argv, "--json-out", cwd=repo)
            assert code == 2 and err["error"]["code"] in ("bad_chars", "bad_input"), (argv, err, stderr)
        with open("/dev/zero", "rb") as zero:
            piped = subprocess.run([sys.executable, "-m", "memstore", "read", "--json", "-"], cwd=repo, stdin=zero,
                                   env=life.env(), capture_output=True, check=False, timeout=120)
        assert piped.returncode == 2 and json.loads(piped.stdout)["error"]["code"] == "too_large", piped.stderr
        wired = life.forward("read", repo, request={"op": "read", "query": "sqlite \x00 migration"})
        assert wired["answer"]["error"]["code"] == "bad_chars", wired
        assert life.status()["requests"] >= served + 5  # the daemon answered them, not the CLI in-process
        code, ans, _ = life.cli("read", "sqlite migration fails", "--json-out", cwd=repo)
        assert code == 0 and ans["results"], ans
    finally:
        life.cleanup()
        if proc is not None:
            proc.wait(timeout=30)
