"""`memstore history ID`: who wrote a memory, when, in which episode and commit; its votes, links,
supersession and archival, read from git and the store's events. Real repo, real CLI, real
`git commit` with memstore's hooks installed, and the MCP tool."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import CliResult, git, run_on_tty, store_files
from mcp import ClientSession
from test_mcp import ok, run_mcp

EV = ("--allow-duplicate",)


def _write(cli: Callable[..., CliResult], repo: Path, *args: str, **env: str) -> str:
    rc, out, err = cli("write", *args, *EV, cwd=repo, env=env)
    assert rc == 0, err
    return out["id"]


def test_history_tells_a_solution_s_whole_story(repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, _, err = cli("hooks", "install", cwd=repo)
    assert rc == 0, err
    rc, started, err = cli("episode", "start", "--agent", "claude-code", "--task", "fix the export", cwd=repo)
    assert rc == 0, err
    ep = started["episode"]
    rc, logged, _ = cli("episode", "log", "--source", "tool", "--content", "export OK after batching", cwd=repo)
    problem = _write(cli, repo, "--kind", "problem", "--text", "The nightly export dies with MemoryError.",
                     "--evidence", "user:it died again", MEMSTORE_EPISODE=ep)
    solution = _write(cli, repo, "--kind", "solution", "--problem", problem, "--text",
                      "Stream the export in batches of 10k rows.", "--evidence", logged["ref"], MEMSTORE_EPISODE=ep)
    fact = _write(cli, repo, "--kind", "fact", "--text", "The export job runs at 02:00 UTC.", "--evidence", "user:x")
    rc, _, err = cli("episode", "end", "--outcome", "success", cwd=repo)
    assert rc == 0, err
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memory: export lesson")  # the pre-commit hook runs
    head = git(repo, "rev-parse", "HEAD").strip()
    for args, who in ((("--type", "utility_vote", "--memory", solution, "--problem", problem, "--vote", "1",
                        "--evidence", "user:worked in prod"), "dana"),
                      (("--type", "link", "--memory", solution, "--link", f"depends_on:{fact}", "--evidence",
                        "user:only at night"), "dana"),
                      (("--type", "archive", "--memory", solution, "--rationale", "the export was rewritten",
                        "--evidence", f"commit:{head}"), "lee")):
        rc, _, err = cli("update", *args, cwd=repo, env={"MEMSTORE_AUTHOR": who})
        assert rc == 0, err

    rc, h, err = cli("history", solution[:10], cwd=repo)
    assert rc == 0, err
    assert h["memory"]["id"] == solution and h["content_trust"] == "untrusted-data"
    created = h["created"]
    assert created["by"] == "claude-code" and created["episodes"] == [ep]
    assert created["commit"]["subject"] == "memory: export lesson"
    assert created["commit"]["sha"] == head
    (vote,) = h["votes"]
    assert (vote["by"], vote["vote"], vote["problem"], vote["evidence"]) == ("dana", 1.0, problem,
                                                                            ["user:worked in prod"])
    assert h["links"]["problem"] == problem and h["relations"]["out"][0]["id"] == fact
    assert h["archived"]["by"] == "lee" and h["archived"]["why"] == "the export was rewritten"
    assert [t["what"] for t in h["timeline"]] == ["created", "vote", "link", "archived"]

    rc, hp, _ = cli("history", problem, cwd=repo)
    assert rc == 0 and hp["solutions"] == [solution] and hp["archived"] is None
    assert "solution written for it" in [t["what"] for t in hp["timeline"]]
    assert hp["created"]["episodes"] == [ep]  # by the episode's agent while it was open

    rc, shown, _ = cli("show", solution, cwd=repo)
    assert rc == 0 and shown["memory"]["derived"]["archive"]["by"] == "lee"
    assert shown["memory"]["derived"]["archive"]["why"] == "the export was rewritten"
    rc, text, _ = run_on_tty(["history", solution], cwd=repo)
    assert rc == 0 and b"archived by lee" in text and b"vote +1 by dana" in text and b"episode " + ep.encode() in text
    rc, text, _ = run_on_tty(["show", solution], cwd=repo)
    assert rc == 0 and b"archived by lee" in text and b"the export was rewritten" in text


def test_history_follows_the_supersession_chain(repo: Path, cli: Callable[..., CliResult]) -> None:
    old = _write(cli, repo, "--kind", "fact", "--text", "The driver is asyncpg.", "--evidence", "user:a")
    change = _write(cli, repo, "--kind", "change", "--change-target", old, "--text", "Moved from asyncpg to psycopg.",
                    "--evidence", "user:b")
    new = _write(cli, repo, "--kind", "fact", "--supersedes", old, "--via-change", change, "--text",
                 "The driver is psycopg 3.", "--evidence", "user:c")
    rc, h_old, _ = cli("history", old, cwd=repo)
    assert rc == 0 and h_old["supersession"]["chain"] == [new] and h_old["supersession"]["head"] == new
    assert h_old["changes"] == [change] and h_old["created"]["commit"] is None  # not committed yet
    assert {t["what"] for t in h_old["timeline"]} >= {"created", "change written about it",
                                                      "superseded by a newer fact"}
    rc, h_new, _ = cli("history", new, cwd=repo)
    assert rc == 0 and h_new["supersession"]["supersedes"] == [old] and h_new["supersession"]["head"] is None


def test_history_of_a_bad_or_unknown_id_is_a_clear_error_and_writes_nothing(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    before = store_files(repo)
    rc, out, err = cli("history", "zz", cwd=repo)
    assert rc == 2 and out["error"]["code"] == "bad_id" and "Traceback" not in err
    rc, out, _ = cli("history", "0000000000", cwd=repo)
    assert rc == 3 and out["error"]["code"] == "not_found"
    assert store_files(repo) == before


def test_the_mcp_tool_answers_the_same_history(repo: Path, cli: Callable[..., CliResult]) -> None:
    fact = _write(cli, repo, "--kind", "fact", "--text", "Staging runs in eu-west-1.", "--evidence", "user:ops")
    rc, by_cli, _ = cli("history", fact, cwd=repo)

    async def script(s: ClientSession) -> dict[str, Any]:
        return ok(await s.call_tool("memory_history", {"id": fact[:8]}))

    by_mcp = run_mcp(repo, script)
    assert rc == 0 and by_mcp == by_cli
