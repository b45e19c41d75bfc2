"""`memstore mcp` as an MCP client meets it: a real `python -m memstore mcp` subprocess in a real
git repo, driven by the official SDK's stdio client. The same JSON contracts as the CLI, tool
errors carrying the CLI's error codes, and the agent loop (episodes, reflect) over MCP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import PROBLEM, SOLUTION, TACTIC, store_files
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from memstore.read.retrieve import GUIDANCE
from memstore.store.schemas import load_schema
from memstore.surfaces import client
from memstore.surfaces.mcp_server import SHORT_GUIDANCE

PARAPHRASE = "my new migration breaks pytest because the column is already there"
CLOSE = "alembic migration fails: column already exists"  # clears the bar with the problem alone
TIMEOUT = 120  # one server start plus a model load on a loaded machine

Session = Callable[[ClientSession], Awaitable[Any]]


def run_mcp(cwd: Path, script: Session, *, args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Any:
    """Start `python -m memstore mcp` in ``cwd`` and run ``script`` against it with the SDK client."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "memstore", "mcp", *args], cwd=str(cwd),
                                   env={**os.environ, **(env or {})})

    async def main() -> Any:
        with anyio.fail_after(TIMEOUT):
            async with stdio_client(params) as streams, ClientSession(*streams) as session:
                await session.initialize()
                return await script(session)

    return anyio.run(main)


def answer(result: types.CallToolResult) -> dict[str, Any]:
    """The tool's answer JSON: text content and structured content say the same thing."""
    assert result.content and isinstance(result.content[0], types.TextContent)
    data = json.loads(result.content[0].text)
    assert result.structured_content == data
    return data


def ok(result: types.CallToolResult) -> dict[str, Any]:
    data = answer(result)
    assert not result.is_error, data
    assert data["ok"] is True
    return data


def test_tools_schemas_instructions_and_guide(repo: Path) -> None:
    async def script(s: ClientSession) -> dict[str, Any]:
        listed = await s.list_tools()
        tools = {t.name: t for t in listed.tools}
        guide = await s.call_tool("memory_guide", {})
        bad = await s.call_tool("episode_log", {"source": "robot", "content": "x"})
        unknown = await s.call_tool("memory_forget", {})
        wire = listed.model_dump_json(by_alias=True, exclude_none=True)
        return {"tools": tools, "instructions": s.instructions, "guide": guide, "bad": bad, "unknown": unknown,
                "wire": wire}

    got = run_mcp(repo, script, env={"MEMSTORE_MAX_TEXT_CHARS": "3000"})
    tools = got["tools"]
    assert set(tools) == {"memory_read", "memory_write", "memory_update", "memory_context", "memory_guide",
                          "episode_start", "episode_log", "episode_end", "memory_reflect", "memory_vote",
                          "memory_history"}
    # One source of truth: the input schemas are the shipped request schemas, in compact form
    # (issue #15.4: the full ones, with $id and allOf, made the list ~15k characters).
    for verb in ("read", "write", "update"):
        schema = tools[f"memory_{verb}"].input_schema
        assert set(schema["properties"]) == set(load_schema(verb)["properties"])
        assert schema["required"] == load_schema(verb)["required"]
    for keyword in ('"$id"', '"$schema"', '"allOf"', '"$ref"', '"$defs"'):
        assert keyword not in got["wire"]
    # 14,920 before; a tool costs ~400-450 (memory_vote, memory_history), read.include_shared ~100
    assert len(got["wire"]) < 14_000
    # memory.text may be as long as a write accepts, no longer
    assert tools["memory_write"].input_schema["properties"]["memory"]["properties"]["text"]["maxLength"] == 3000
    assert "op" not in tools["memory_write"].input_schema.get("required", [])
    # a read logs to the episode: not read-only; the guide and the reflection are
    assert tools["memory_read"].annotations.read_only_hint is False
    assert tools["memory_context"].annotations.read_only_hint is False
    assert tools["memory_write"].annotations.read_only_hint is False
    assert tools["memory_guide"].annotations.read_only_hint is True
    assert tools["memory_reflect"].annotations.read_only_hint is True
    assert tools["memory_history"].annotations.read_only_hint is True
    assert got["instructions"].startswith(GUIDANCE)
    assert "memory_read" in got["instructions"]
    guide = got["guide"]
    assert not guide.is_error
    assert "Current code is ground truth" in guide.content[0].text and "memory_write" in guide.content[0].text
    assert guide.structured_content["ok"] is True
    assert got["bad"].is_error and answer(got["bad"])["error"]["code"] == "schema"
    assert got["unknown"].is_error and answer(got["unknown"])["error"]["code"] == "unknown_tool"


def test_write_read_vote_and_refusals(repo: Path, cli: Callable[..., Any]) -> None:
    before_refusals: dict[str, set[str]] = {}

    async def script(s: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        problem = ok(await s.call_tool("memory_write", {"memory": {
            "kind": "problem", "scope": "repo", "text": PROBLEM, "evidence_refs": ["file:src/app.py"]}}))
        solution = ok(await s.call_tool("memory_write", {"op": "write", "memory": {
            "kind": "solution", "scope": "repo", "text": SOLUTION, "confidence": 0.8,
            "links": {"problem_id": problem["id"][:10]}, "evidence_refs": ["user:the user confirmed it"]}}))
        tactic = ok(await s.call_tool("memory_write", {"memory": {
            "kind": "failed_tactic", "scope": "repo", "text": TACTIC, "links": {"problem_id": problem["id"]},
            "evidence_refs": ["user:tried it"]}}))
        out.update(problem=problem, solution=solution, tactic=tactic)
        out["read"] = ok(await s.call_tool("memory_read", {"query": PARAPHRASE}))
        out["vote"] = ok(await s.call_tool("memory_update", {
            "type": "utility_vote", "memory_id": solution["id"], "problem_id": problem["id"], "vote": 1,
            "evidence_refs": ["user:it worked"]}))
        out["reread"] = ok(await s.call_tool("memory_read", {"query": PARAPHRASE, "problem_id": problem["id"]}))

        before_refusals["files"] = store_files(repo)
        out["no_evidence"] = await s.call_tool("memory_write", {"memory": {
            "kind": "fact", "scope": "repo", "text": "The deploy script lives in ops/deploy.sh.", "evidence_refs": []}})
        out["secret"] = await s.call_tool("memory_write", {"memory": {
            "kind": "fact", "scope": "repo", "evidence_refs": ["user:x"],
            "text": "CI pushes with the token " + "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"}})
        out["schema"] = await s.call_tool("memory_write", {"memory": {"kind": "rumour", "text": "x"}})
        out["wrong_op"] = await s.call_tool("memory_write", {"op": "read", "memory": {}})
        out["duplicate"] = await s.call_tool("memory_write", {"memory": {
            "kind": "problem", "scope": "repo", "text": PROBLEM, "evidence_refs": ["user:again"]}})
        out["not_found"] = await s.call_tool("memory_update", {
            "type": "utility_vote", "memory_id": "zzzzzzzzzz", "vote": 1})
        out["after_files"] = store_files(repo)
        return out

    got = run_mcp(repo, script)
    problem, solution, tactic = got["problem"], got["solution"], got["tactic"]
    assert solution["path"].startswith(".memory/solutions/") and solution["mode"] == "review"
    # Not the MCP client library's name ("mcp"): no episode, no MEMSTORE_AUTHOR, no git user.name here.
    text = (repo / solution["path"]).read_text()
    assert "author: unknown" in text

    found = {r["id"]: r for r in got["read"]["results"]}
    assert problem["id"] in found and solution["id"] in found and tactic["id"] in found
    # the full guidance with the session's first read, a short reminder after it
    assert got["read"]["guidance"] == GUIDANCE
    assert got["reread"]["guidance"] == SHORT_GUIDANCE and len(SHORT_GUIDANCE) < len(GUIDANCE) / 2
    assert "watch-out" in found[tactic["id"]]["note"]
    assert got["vote"]["effect"]["utility"]["votes"] == 1
    assert got["vote"]["path"].startswith(".memory/events/")
    reread = {r["id"]: r for r in got["reread"]["results"]}
    assert reread[solution["id"]]["utility"]["votes"] == 1

    # The same answer the CLI gives for the same memory.
    rc, shown, err = cli("show", solution["id"], cwd=repo)
    assert rc == 0, err
    assert shown["memory"]["links"]["problem"] == problem["id"]

    # Refusals are tool errors with the CLI's codes, and write nothing.
    expected = {"no_evidence": "missing_evidence", "secret": "secret", "schema": "schema", "wrong_op": "schema",
                "duplicate": "duplicate", "not_found": "not_found"}
    for key, code in expected.items():
        result = got[key]
        assert result.is_error, key
        err_json = answer(result)
        assert err_json["ok"] is False and err_json["error"]["code"] == code, (key, err_json)
        assert err_json["error"]["message"]
    assert answer(got["no_evidence"])["error"]["field"] == "memory.evidence_refs"
    assert answer(got["duplicate"])["error"]["duplicates"][0]["id"] == problem["id"]
    assert got["after_files"] == before_refusals["files"]

    # The CLI refuses the same request with the same error JSON.
    req = {"op": "write", "memory": {"kind": "fact", "scope": "repo", "text": "The deploy script lives in ops/.",
                                     "evidence_refs": []}}
    rc, cli_err, _ = cli("write", "--json", "-", cwd=repo, input=json.dumps(req))
    assert rc == 2 and cli_err["error"]["code"] == "missing_evidence"
    assert cli_err["error"]["field"] == answer(got["no_evidence"])["error"]["field"]


def test_episode_loop_over_mcp(repo: Path) -> None:
    async def script(s: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["start"] = ok(await s.call_tool("episode_start", {"agent": "claude-code",
                                                              "task": "fix the flaky migration test"}))
        out["log"] = ok(await s.call_tool("episode_log", {"source": "tool", "content": "pytest: DuplicateColumn"}))
        out["empty_read"] = ok(await s.call_tool("memory_read", {"query": "DuplicateColumn on alembic upgrade"}))
        out["problem"] = ok(await s.call_tool("memory_write", {"memory": {
            "kind": "problem", "scope": "repo", "text": PROBLEM, "evidence_refs": [out["log"]["ref"]]}}))
        out["read"] = ok(await s.call_tool("memory_read", {"query": CLOSE}))
        out["context"] = ok(await s.call_tool("memory_context", {}))
        out["reflect"] = ok(await s.call_tool("memory_reflect", {}))
        out["end"] = ok(await s.call_tool("episode_end", {"outcome": "success"}))
        out["no_episode"] = await s.call_tool("episode_log", {"source": "note", "content": "after the end"})
        return out

    got = run_mcp(repo, script)
    episode = got["start"]["episode"]
    assert got["log"]["ref"] == f"event:{episode}:1"
    assert got["empty_read"]["results"] == []
    assert got["read"]["results"][0]["id"] == got["problem"]["id"]
    assert got["context"]["episode"] == episode and got["context"]["query"] == "fix the flaky migration test"
    reflect = got["reflect"]
    assert reflect["episode"] == episode and reflect["header"]["agent"] == "claude-code"
    assert "author: claude-code" in (repo / got["problem"]["path"]).read_text()
    # read back in the session that wrote it: listed as written, not offered for a vote
    assert got["problem"]["id"] not in [r["id"] for r in reflect["reads"]]
    assert [m["id"] for m in reflect["written"]] == [got["problem"]["id"]]
    assert any(e["source"] == "memstore" and "read" in e["content"] for e in reflect["events"])
    assert got["end"]["outcome"] == "success"
    assert got["no_episode"].is_error and answer(got["no_episode"])["error"]["code"] == "not_found"
    assert any(p.startswith("episodes/") for p in store_files(repo))


def test_store_option_and_bad_repo_option(tmp_path: Path, repo: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    async def script(s: ClientSession) -> dict[str, Any]:
        return ok(await s.call_tool("memory_write", {"allow_duplicate": True, "memory": {
            "kind": "fact", "scope": "repo", "text": "Notes kept in a store outside the repo.",
            "evidence_refs": ["user:x"]}}))

    # --repo: a client that cannot set the working directory names the repository instead.
    written = run_mcp(elsewhere, script, args=("--repo", str(repo)))
    assert (repo / written["path"]).is_file()
    # --store replaces the repo store, like the CLI's option.
    written = run_mcp(repo, script, args=("--store", str(tmp_path / "side-store")))
    assert Path(written["path"]).is_relative_to(tmp_path / "side-store") and Path(written["path"]).is_file()

    proc = subprocess.run([sys.executable, "-m", "memstore", "mcp", "--repo", str(tmp_path / "nope")], cwd=repo,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, check=False)
    assert proc.returncode == 2 and proc.stdout == "" and "bad_input" in proc.stderr


def test_a_call_answered_in_process_loads_the_store_with_the_collector_off(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The server is long-lived: before a daemon runs, each call loads the store in-process, and
    # the cyclic GC would rescan that load many times over (seconds at 100k memories). It must
    # be off during the call, back on after it, with nothing frozen (the store is dropped).
    import gc

    from memstore.surfaces.mcp_server import Backend

    monkeypatch.chdir(repo)
    backend = Backend()
    collections: list[int] = []
    frozen = gc.get_freeze_count()

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    for i in range(3):
        backend.verb("write", {"allow_duplicate": True, "memory": {
            "kind": "fact", "scope": "repo", "text": f"Fact {i}: the nightly export runs at 02:00 UTC from cron.",
            "evidence_refs": ["user:x"]}})
    gc.collect()
    gc.callbacks.append(count)
    try:
        answer = backend.verb("read", {"query": "when does the nightly export run", "include_global": False})
        in_read = list(collections)
        backend.context({"task": "move the nightly export"})
        in_context = list(collections)[len(in_read):]
        for _ in range(100):  # back on shortly after the answer
            if gc.isenabled():
                break
            time.sleep(0.05)
        assert gc.isenabled()
        junk = [[] for _ in range(5000)]
        for item in junk:
            item.append(junk)  # cycles: the collector, back on, runs
        del junk
    finally:
        gc.callbacks.remove(count)
    assert len(answer["results"]) == 3
    assert in_read == [] and in_context == [], (in_read, in_context)
    assert collections, "the collector did not come back on"
    assert gc.get_freeze_count() == frozen


@pytest.mark.slow
def test_reads_and_writes_go_through_a_running_daemon(tmp_path: Path, repo: Path) -> None:
    rdir = Path(f"/tmp/ms-mcp-{os.getpid()}-{tmp_path.name[-10:]}")  # AF_UNIX paths are short
    env = {**os.environ, "MEMSTORE_RUNTIME_DIR": str(rdir), "MEMSTORE_DAEMON": "1"}
    client.ensure_runtime_dir(env)
    log = open(rdir / "test-daemon.out", "ab")  # noqa: SIM115 - closed right after the spawn
    daemon = subprocess.Popen([sys.executable, "-m", "memstore", "serve"], env=env, stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log, start_new_session=True)
    log.close()
    try:
        assert client.wait_until_up(TIMEOUT, env=env), (rdir / "test-daemon.out").read_text()
        before = client.status(env=env)["requests"]

        async def script(s: ClientSession) -> dict[str, Any]:
            ok(await s.call_tool("episode_start", {"agent": "claude-code"}))
            written = ok(await s.call_tool("memory_write", {"memory": {
                "kind": "problem", "scope": "repo", "text": PROBLEM, "evidence_refs": ["user:x"]}}))
            read = ok(await s.call_tool("memory_read", {"query": CLOSE}))
            refused = await s.call_tool("memory_write", {"memory": {
                "kind": "fact", "scope": "repo", "text": "No evidence here at all.", "evidence_refs": []}})
            return {"written": written, "read": read, "refused": refused}

        t0 = time.monotonic()
        got = run_mcp(repo, script, env={"MEMSTORE_RUNTIME_DIR": str(rdir), "MEMSTORE_DAEMON": "1"})
        assert got["read"]["results"][0]["id"] == got["written"]["id"]
        assert got["refused"].is_error and answer(got["refused"])["error"]["code"] == "missing_evidence"
        assert client.status(env=env)["requests"] >= before + 3
        # the daemon writes it with the session's episode's agent as author
        assert "author: claude-code" in (repo / got["written"]["path"]).read_text()
        assert time.monotonic() - t0 < TIMEOUT
    finally:
        client.stop(env=env)
        if daemon.poll() is None:
            os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=30)
        import shutil

        shutil.rmtree(rdir, ignore_errors=True)


def test_a_file_name_that_is_not_utf8_is_answered_not_a_failed_call(repo: Path) -> None:
    """A hand-made file whose name holds the byte 0xE9 (Latin-1 ``é``): the CLI's JSON stays
    UTF-8 with the byte as ``\\udce9`` (``os.fsencode`` gives the name back) and the MCP call
    answers, the byte shown as its escape, instead of failing in the SDK's JSON writer."""
    mid = "01m8zz" + "q" * 20
    name = os.fsdecode(f"{mid}-caf".encode() + b"\xe9.md")
    (repo / ".memory" / "facts" / name).write_text(
        f"---\nid: {mid}\nkind: fact\nscope: repo\ncreated: 2026-11-20T10:00:00Z\nevidence: ['user:ops']\n"
        "---\nthe billing export runs nightly at 02:00 UTC\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "memstore", "list"], cwd=repo, capture_output=True, check=False,
                          env={**os.environ, "MEMSTORE_DAEMON": "0"}, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout.decode("utf-8"))  # strict: a raw 0xE9 byte would not decode
    assert os.fsencode(listed["memories"][0]["path"]) == b".memory/facts/" + os.fsencode(name)

    async def script(s: ClientSession) -> Any:
        return await s.call_tool("memory_read", {"query": "when does the billing export run"})

    got = ok(run_mcp(repo, script))
    assert got["results"][0]["id"] == mid
    assert got["results"][0]["path"] == f".memory/facts/{mid}-caf\\udce9.md"
