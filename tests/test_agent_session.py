"""An agent's whole session as an agent runs it (issue #15): a real MCP client (the official SDK)
drives `python -m memstore mcp` over stdio through the loop — episode, context, a read on a
problem, the problem, a failed tactic and the solution written, reflect — the git hooks record
the episode on a real `git commit`; then a second session in a fresh `git clone` asks about the
same problem in other words. And two agents in one checkout keep separate episodes."""

from __future__ import annotations

import json
import os
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import PROBLEM, SOLUTION, TACTIC, git, run_cli
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

pytestmark = [pytest.mark.model, pytest.mark.slow]

TIMEOUT = 240  # server starts and model loads on a loaded 2-core machine
TASK = "fix the failing test suite after adding the tracking_code migration"
# The second session's question: the same problem, none of the words the memories use for it.
OTHER_WORDS = "my new migration breaks pytest because the column is already there"


def server(cwd: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "memstore", "mcp"], cwd=str(cwd),
                                 env=dict(os.environ))


def ok(result: types.CallToolResult) -> dict[str, Any]:
    assert result.content and isinstance(result.content[0], types.TextContent)
    data = json.loads(result.content[0].text)
    assert not result.is_error, data
    assert data["ok"] is True and result.structured_content == data
    return data


async def open_session(stack: AsyncExitStack, cwd: Path) -> ClientSession:
    streams = await stack.enter_async_context(stdio_client(server(cwd)))
    session = await stack.enter_async_context(ClientSession(*streams))
    await session.initialize()
    return session


def run(script: Any) -> Any:
    async def main() -> Any:
        with anyio.fail_after(TIMEOUT):
            async with AsyncExitStack() as stack:
                return await script(stack)

    return anyio.run(main)


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_session_is_remembered_and_a_fresh_clone_finds_it(repo: Path, tmp_path: Path) -> None:
    env = dict(os.environ)
    assert run_cli(["hooks", "install"], cwd=repo, env=env)[0] == 0
    git(repo, "commit", "-q", "-m", "memstore: init")

    async def first(stack: AsyncExitStack) -> dict[str, Any]:
        s = await open_session(stack, repo)
        out: dict[str, Any] = {"start": ok(await s.call_tool("episode_start", {"agent": "claude-code", "task": TASK}))}
        out["context"] = ok(await s.call_tool("memory_context", {}))
        log = {}
        for key, source, content in (
                ("ask", "user", "The tests fail since I added the tracking_code migration; fix it."),
                ("fail", "tool", "pytest: DuplicateColumn: column tracking_code of relation shipments already exists"),
                ("tactic", "tool", "dropped and recreated the test database: the same DuplicateColumn error"),
                ("fix", "tool", "db_schema fixture now runs alembic upgrade head on a fresh database: 112 passed")):
            log[key] = ok(await s.call_tool("episode_log", {"source": source, "content": content}))["ref"]
            if key == "fail":  # met a problem: ask before trying fixes
                out["read"] = ok(await s.call_tool("memory_read", {"query": "DuplicateColumn tracking_code already "
                                                                            "exists in the test suite"}))
        problem = ok(await s.call_tool("memory_write", {"memory": {
            "kind": "problem", "scope": "repo", "text": PROBLEM, "evidence_refs": [log["fail"]]}}))
        tactic = ok(await s.call_tool("memory_write", {"memory": {
            "kind": "failed_tactic", "scope": "repo", "text": TACTIC, "links": {"problem_id": problem["id"]},
            "evidence_refs": [log["tactic"]]}}))
        solution = ok(await s.call_tool("memory_write", {"memory": {
            "kind": "solution", "scope": "repo", "text": SOLUTION, "links": {"problem_id": problem["id"]},
            "confidence": 0.9, "evidence_refs": [log["fix"], log["ask"]]}}))
        out.update(problem=problem, tactic=tactic, solution=solution)
        # the agent commits its work; the hooks log the commit to the session's episode
        (repo / "tests").mkdir()
        (repo / "tests" / "conftest.py").write_text("# db_schema: alembic upgrade head on a fresh database\n")
        git(repo, "add", "tests/conftest.py")
        git(repo, "commit", "-q", "-m", "Build the test schema with alembic upgrade head")
        out["reflect"] = ok(await s.call_tool("memory_reflect", {}))
        out["end"] = ok(await s.call_tool("episode_end", {"outcome": "success"}))
        return out

    got = run(first)
    episode = got["start"]["episode"]
    assert got["start"]["current"] is True
    assert got["context"]["episode"] == episode and got["context"]["query"] == TASK
    assert got["read"]["results"] == []  # nothing known yet: an empty answer is a correct answer
    for key in ("problem", "tactic", "solution"):
        assert "author: claude-code" in (repo / got[key]["path"]).read_text()
    reflect = got["reflect"]
    assert {m["id"] for m in reflect["written"]} == {got[k]["id"] for k in ("problem", "tactic", "solution")}
    assert reflect["reads"] == []
    git_rows = [e for e in reflect["events"] if e["source"] == "git"]
    assert len(git_rows) == 1 and "Build the test schema with alembic upgrade head" in git_rows[0]["content"]
    # the episode, ended, is staged beside the memories; the next commit takes it to the remote
    git(repo, "commit", "-q", "-m", "memstore: the session's memories and episode")
    tracked = git(repo, "ls-files", ".memory").split()
    assert got["end"]["path"] in tracked
    assert all(got[k]["path"] in tracked for k in ("problem", "tactic", "solution"))
    sources = [r.get("source") for r in rows(repo / got["end"]["path"])]
    ops = [r.get("op") for r in rows(repo / got["end"]["path"])]
    assert sources.count("git") == 1 and ops.count("read") == 1  # the commit; the read
    assert ops.count("write") == 3  # the problem, the tactic and the solution, each an event of the session

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    assert not (clone / ".memory" / ".index").exists()  # projections are rebuilt, never cloned

    async def second(stack: AsyncExitStack) -> dict[str, Any]:
        s = await open_session(stack, clone)
        out = {"start": ok(await s.call_tool("episode_start", {"agent": "codex", "task": "make CI green again"}))}
        out["read"] = ok(await s.call_tool("memory_read", {"query": OTHER_WORDS}))
        out["reflect"] = ok(await s.call_tool("memory_reflect", {}))
        return out

    again = run(second)
    results = again["read"]["results"]
    kinds = [r["kind"] for r in results]
    ids = [r["id"] for r in results]
    assert got["solution"]["id"] in ids and got["tactic"]["id"] in ids
    # what worked first, what failed after it, marked as a watch-out
    assert next(k for k in kinds if k != "problem") == "solution"
    assert ids.index(got["solution"]["id"]) < ids.index(got["tactic"]["id"])
    assert "watch-out" in results[ids.index(got["tactic"]["id"])]["note"]
    # this session did not write them: reflect offers them for votes
    assert {got["solution"]["id"], got["tactic"]["id"]} <= {r["id"] for r in again["reflect"]["reads"]}


def test_two_agents_in_one_checkout_keep_separate_episodes(repo: Path) -> None:
    async def both(stack: AsyncExitStack) -> dict[str, Any]:
        a = await open_session(stack, repo)
        b = await open_session(stack, repo)
        out: dict[str, Any] = {"a": ok(await a.call_tool("episode_start", {"agent": "claude-code", "task": "a"}))}
        out["b"] = ok(await b.call_tool("episode_start", {"agent": "codex", "task": "b"}))
        for i in range(2):
            ok(await a.call_tool("episode_log", {"source": "tool", "content": f"a{i}"}))
            ok(await b.call_tool("episode_log", {"source": "tool", "content": f"b{i}"}))
        ok(await b.call_tool("memory_read", {"query": "what b asks"}))
        ok(await a.call_tool("memory_read", {"query": "what a asks"}))
        out["b_wrote"] = ok(await b.call_tool("memory_write", {"memory": {
            "kind": "fact", "scope": "repo", "text": "The retry limit is set in settings.py.",
            "evidence_refs": ["file:src/app.py"]}}))
        out["a_reflect"] = ok(await a.call_tool("memory_reflect", {}))
        out["b_end"] = ok(await b.call_tool("episode_end", {"outcome": "success"}))
        out["a_end"] = ok(await a.call_tool("episode_end", {"outcome": "partial"}))
        return out

    got = run(both)
    assert got["a"]["current"] is True and got["b"]["current"] is False and got["b"]["in_use"] == got["a"]["episode"]
    a_rows = rows(repo / got["a"]["path"])
    b_rows = rows(repo / got["b"]["path"])
    assert [r["content"] for r in a_rows if r.get("source") == "tool"] == ["a0", "a1"]
    assert [r["content"] for r in b_rows if r.get("source") == "tool"] == ["b0", "b1"]
    assert [r["query"] for r in a_rows if r.get("op") == "read"] == ["what a asks"]
    assert [r["query"] for r in b_rows if r.get("op") == "read"] == ["what b asks"]
    assert a_rows[-1]["outcome"] == "partial" and b_rows[-1]["outcome"] == "success"
    assert got["a_reflect"]["episode"] == got["a"]["episode"]
    assert "author: codex" in (repo / got["b_wrote"]["path"]).read_text()
