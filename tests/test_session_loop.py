"""The agent loop's rough edges (issue #15.1-3, 5): `context` served by the daemon and driven by
the task, who writes are by, one episode per agent in a shared checkout, and `reflect` asking
for votes only on memories the session did not write itself. Real CLI subprocesses, real git."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PROBLEM, SOLUTION, TACTIC, CliResult, docs_text, git, write_req

from memstore.store import episodes
from memstore.store.workspace import open_workspace
from memstore.surfaces import client
from memstore.verbs import api

# The task in other words than the memories, as an agent types it at session start.
TASK = "alembic upgrade in the test suite: column already exists"
UNRELATED = ["Add CSV export of invoices", "Billing worker: retry on 503 from the payment API",
             "Cache the exchange rates for an hour", "Rename InvoiceRow to InvoiceLine",
             "Docs: how to run the invoice export locally"]


def seed_problem(repo: Path) -> dict[str, str]:
    ws = open_workspace(cwd=repo)
    problem = api.write(ws, write_req("problem", PROBLEM))["id"]
    solution = api.write(ws, write_req("solution", SOLUTION, links={"problem_id": problem}))["id"]
    tactic = api.write(ws, write_req("failed_tactic", TACTIC, links={"problem_id": problem}))["id"]
    return {"problem": problem, "solution": solution, "tactic": tactic}


def on_a_busy_branch(repo: Path) -> None:
    """A feature branch about other work: its name and five commit subjects share no word with TASK."""
    git(repo, "checkout", "-q", "-b", "feature/invoice-export-csv")
    for i, subject in enumerate(UNRELATED):
        (repo / f"notes{i}.txt").write_text(subject + "\n")
        git(repo, "add", f"notes{i}.txt")
        git(repo, "commit", "-q", "-m", subject)


# -- 1. context -------------------------------------------------------------------------------------
@pytest.mark.model
def test_context_task_drives_the_query_like_an_ambient_read(repo: Path, cli: Callable[..., CliResult]) -> None:
    ids = seed_problem(repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memstore: seed")
    on_a_busy_branch(repo)
    code, ctx, err = cli("context", "--task", TASK, cwd=repo)
    assert code == 0, err
    code, read, err = cli("read", TASK, "--mode", "ambient", cwd=repo)
    assert code == 0, err
    found = [r["id"] for r in ctx["relevant"]]
    assert found and found == [r["id"] for r in read["results"]]
    assert {ids["problem"], ids["solution"], ids["tactic"]} <= set(found)
    assert ctx["query"] == TASK and ctx["query_from"] == "task"
    # the open episode's task stands in for --task, branch and subjects still left out
    code, started, err = cli("episode", "start", "--agent", "claude-code", "--task", TASK, cwd=repo)
    code, ctx, err = cli("context", cwd=repo)
    assert code == 0, err
    assert ctx["query"] == TASK and [r["id"] for r in ctx["relevant"]] == found
    assert ctx["episode"] == started["episode"]


@pytest.mark.model
def test_context_answers_the_shape_docs_json_documents(repo: Path, cli: Callable[..., CliResult]) -> None:
    seed_problem(repo)
    pref = write_req("preference", "Invoices are rendered with WeasyPrint, never wkhtmltopdf.")
    api.write(open_workspace(cwd=repo), pref)
    code, ctx, err = cli("context", "--task", TASK, cwd=repo)
    assert code == 0, err
    doc = docs_text("json.md").split("## context", 1)[1].split("## ", 1)[0]
    sample = json.loads(re.sub(r"/\*.*?\*/", "", doc.split("```json", 1)[1].split("```", 1)[0]))
    assert set(ctx) - {"warnings", "note"} == set(sample), set(ctx) ^ set(sample)
    shown = [item for key in ("preferences", "facts", "failed_tactics", "open_problems") for item in ctx[key]]
    assert shown and all(set(item) == set(sample["preferences"][0]) for item in shown), shown
    assert ctx["failed_tactics"] == [] or ctx["failed_tactics"][0]["kind"] == "failed_tactic"


def test_context_without_a_task_reads_for_the_branch(repo: Path, cli: Callable[..., CliResult]) -> None:
    on_a_busy_branch(repo)
    code, ctx, err = cli("context", cwd=repo)
    assert code == 0, err
    assert ctx["query_from"] == "branch" and ctx["query"].startswith("feature invoice export csv")


def test_context_naming_a_missing_episode_is_a_clear_error(repo: Path, cli: Callable[..., CliResult]) -> None:
    code, out, _ = cli("context", cwd=repo, env={"MEMSTORE_EPISODE": "01m7qmgvt9txwmxsa4g8kr1ap8"})
    assert code == 3 and out["error"]["code"] == "not_found" and out["error"]["field"] == "episode"


@pytest.fixture
def daemon_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A real `memstore serve` in its own runtime dir (AF_UNIX paths are short: not under tmp_path)."""
    rdir = Path(f"/tmp/ms-loop-{os.getpid()}-{tmp_path.name[-10:]}")
    env = {**os.environ, "MEMSTORE_RUNTIME_DIR": str(rdir), "MEMSTORE_DAEMON": "1"}
    client.ensure_runtime_dir(env)
    log = open(rdir / "test-daemon.out", "ab")  # noqa: SIM115 - closed right after the spawn
    proc = subprocess.Popen([sys.executable, "-m", "memstore", "serve"], env=env, stdin=subprocess.DEVNULL,
                            stdout=log, stderr=log, start_new_session=True)
    log.close()
    try:
        assert client.wait_until_up(120, env=env), (rdir / "test-daemon.out").read_text()
        yield env
    finally:
        client.stop(env=env)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        shutil.rmtree(rdir, ignore_errors=True)


@pytest.mark.model
@pytest.mark.slow
def test_context_is_answered_by_the_daemon(repo: Path, daemon_env: dict[str, str],
                                           cli: Callable[..., CliResult]) -> None:
    """`context` was run in-process on every call (imports, catalog, index and model: seconds),
    while `read` beside it went to the warm daemon. Its speed is measured in bench/perf.py."""
    seed_problem(repo)
    code, started, _ = cli("episode", "start", "--agent", "claude-code", "--task", TASK, cwd=repo)
    env = {k: daemon_env[k] for k in ("MEMSTORE_RUNTIME_DIR", "MEMSTORE_DAEMON")}
    assert client.status(env=daemon_env)["workspaces"] == []
    code, ctx, err = cli("context", cwd=repo, env=env)
    assert code == 0, err
    # the daemon opened the repo's workspace to answer (in-process, it would still have none)
    assert [w["repo"] for w in client.status(env=daemon_env)["workspaces"]] == [str(repo / ".memory")]
    assert ctx["episode"] == started["episode"] and ctx["relevant"]
    # the same answer as in-process, its ambient read logged to the episode either way
    code, local, err = cli("context", cwd=repo, env={"MEMSTORE_DAEMON": "0"})
    assert [r["id"] for r in local["relevant"]] == [r["id"] for r in ctx["relevant"]]
    rows = [json.loads(line) for line in (repo / started["path"]).read_text().splitlines()]
    assert [r.get("op") for r in rows[1:]] == ["read", "read"]
    # a terminal render works through the daemon too (not JSON)
    proc = subprocess.run([sys.executable, "-m", "memstore", "context", "--task", TASK], cwd=repo,
                          env={**daemon_env}, capture_output=True, text=True, check=False, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and proc.stdout.startswith("{")  # piped: JSON, as in-process


# -- 2. author ----------------------------------------------------------------------------------------
def test_cli_writes_and_votes_in_an_episode_carry_its_agent(repo: Path, cli: Callable[..., CliResult]) -> None:
    assert cli("episode", "start", "--agent", "claude-code", "--task", "fix the fixture", cwd=repo)[0] == 0
    code, wrote, err = cli("write", "--kind", "problem", "--text", PROBLEM, "--evidence", "user:seen it",
                           "--allow-duplicate", cwd=repo)
    assert code == 0, err
    assert "author: claude-code" in (repo / wrote["path"]).read_text()
    code, voted, err = cli("update", "--json", "-", cwd=repo, input=json.dumps({
        "type": "utility_vote", "memory_id": wrote["id"], "vote": 1, "evidence_refs": ["user:it helped"]}))
    assert code == 0, err
    assert "author: claude-code" in (repo / voted["path"]).read_text()
    code, diff, err = cli("diff", "HEAD", cwd=repo)
    assert code == 0, err
    shown = json.dumps(diff)
    assert "claude-code" in shown and "unknown" not in shown
    # MEMSTORE_AUTHOR and an explicit --author still win
    code, wrote, _ = cli("write", "--kind", "fact", "--text", "The fixture lives in tests/conftest.py.",
                         "--evidence", "file:src/app.py", "--author", "ada", "--allow-duplicate", cwd=repo)
    assert "author: ada" in (repo / wrote["path"]).read_text()


def test_outside_an_episode_the_author_is_the_git_user(repo: Path, cli: Callable[..., CliResult]) -> None:
    git(repo, "config", "user.name", "Grace Hopper")
    code, wrote, err = cli("write", "--kind", "fact", "--text", "Tests run with pytest -n 2.",
                           "--evidence", "file:src/app.py", "--allow-duplicate", cwd=repo)
    assert code == 0, err
    assert "author: Grace Hopper" in (repo / wrote["path"]).read_text()


# -- 3. two agents, one checkout --------------------------------------------------------------------
def rows_of(repo: Path, path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (repo / path).read_text().splitlines()]


def test_a_second_start_does_not_take_over_an_active_episode(repo: Path, cli: Callable[..., CliResult]) -> None:
    code, first, _ = cli("episode", "start", "--agent", "claude-code", "--task", "one", cwd=repo)
    code, second, _ = cli("episode", "start", "--agent", "codex", "--task", "two", cwd=repo)
    assert code == 0
    assert first["current"] is True and second["current"] is False
    assert second["in_use"] == first["episode"] and f"MEMSTORE_EPISODE={second['episode']}" in second["warning"]
    assert episodes.current_id(open_workspace(cwd=repo).store("repo")) == first["episode"]
    # an explicit --replace does take over
    code, third, _ = cli("episode", "start", "--agent", "codex", "--replace", cwd=repo)
    assert third["current"] is True and third["previous"] == first["episode"]


def test_an_abandoned_episode_is_replaced(repo: Path, cli: Callable[..., CliResult]) -> None:
    _, first, _ = cli("episode", "start", "--agent", "claude-code", cwd=repo)
    old = os.path.getmtime(repo / first["path"]) - episodes.ACTIVE_SECONDS - 60
    os.utime(repo / first["path"], (old, old))
    _, second, _ = cli("episode", "start", "--agent", "claude-code", cwd=repo)
    assert second["current"] is True and second["previous"] == first["episode"]


def test_two_interleaved_cli_sessions_keep_separate_logs(repo: Path, cli: Callable[..., CliResult]) -> None:
    assert cli("hooks", "install", cwd=repo)[0] == 0
    git(repo, "commit", "-q", "-m", "memstore: init")
    code, a, _ = cli("episode", "start", "--agent", "claude-code", "--task", "a", cwd=repo)
    code, b, _ = cli("episode", "start", "--agent", "codex", "--task", "b", cwd=repo)
    env_a, env_b = {"MEMSTORE_EPISODE": a["episode"]}, {"MEMSTORE_EPISODE": b["episode"]}
    for i in range(3):
        assert cli("episode", "log", "--source", "tool", "--content", f"a{i}", cwd=repo, env=env_a)[0] == 0
        assert cli("episode", "log", "--source", "tool", "--content", f"b{i}", cwd=repo, env=env_b)[0] == 0
    code, wrote, _ = cli("write", "--kind", "fact", "--text", "Agent b found the retry limit in settings.py.",
                         "--evidence", f"event:{b['episode']}:2", "--allow-duplicate", cwd=repo, env=env_b)
    assert code == 0 and "author: codex" in (repo / wrote["path"]).read_text()
    # b's commit: its git hooks see b's MEMSTORE_EPISODE, so the git event is b's too
    (repo / "settings.py").write_text("RETRIES = 3\n")
    git(repo, "add", "settings.py")
    subprocess.run(["git", "commit", "-q", "-m", "Retry three times"], cwd=repo, check=True,
                   env={**os.environ, **env_b})
    assert cli("episode", "end", "--outcome", "success", cwd=repo, env=env_b)[0] == 0
    assert cli("episode", "end", "--outcome", "partial", cwd=repo, env=env_a)[0] == 0
    assert [r["content"] for r in rows_of(repo, a["path"]) if "seq" in r] == ["a0", "a1", "a2"]
    b_rows = [r for r in rows_of(repo, b["path"]) if "seq" in r]
    assert [r["content"] for r in b_rows[:3]] == ["b0", "b1", "b2"]
    # b's write is b's event (a's log holds only a's), then its commit
    assert [(r["source"], r.get("op")) for r in b_rows[3:]] == [("memstore", "write"), ("git", None)]
    assert b_rows[3]["id"] == wrote["id"] and "Retry three times" in b_rows[4]["content"]
    assert rows_of(repo, a["path"])[-1]["outcome"] == "partial" and rows_of(repo, b["path"])[-1]["outcome"] == "success"


# -- 5. reflect, the guide's order, the MCP entry ------------------------------------------------------
@pytest.mark.model
def test_reflect_does_not_ask_for_votes_on_what_the_session_wrote(repo: Path, cli: Callable[..., CliResult]) -> None:
    ws = open_workspace(cwd=repo)
    earlier = api.write(ws, write_req("problem", PROBLEM, memory_extra={"author": "ada"}))["id"]
    assert cli("episode", "start", "--agent", "claude-code", "--task", TASK, cwd=repo)[0] == 0
    code, mine, err = cli("write", "--kind", "solution", "--text", SOLUTION, "--problem", earlier,
                          "--evidence", "user:it passed", "--allow-duplicate", cwd=repo)
    assert code == 0, err
    code, read, err = cli("read", TASK, cwd=repo)
    assert {earlier, mine["id"]} <= {r["id"] for r in read["results"]}
    code, reflected, err = cli("reflect", cwd=repo)
    assert code == 0, err
    assert [r["id"] for r in reflected["reads"]] == [earlier]
    assert [m["id"] for m in reflected["written"]] == [mine["id"]]


def test_the_guide_starts_the_episode_before_the_context(repo: Path, cli: Callable[..., CliResult]) -> None:
    _, out, _ = cli("guide", "--json-out", cwd=repo)
    text = out["text"]
    assert text.index("memstore episode start") < text.index("memstore context")


def test_the_mcp_entry_names_the_server_by_absolute_path(repo: Path, cli: Callable[..., CliResult]) -> None:
    """An MCP client starts the server without the shell's PATH: a bare `memstore` from a
    virtualenv is not found there."""
    _, out, _ = cli("guide", "--json-out", cwd=repo)
    entry = out["mcp_server"]
    assert Path(entry["command"]).is_absolute() and os.access(entry["command"], os.X_OK)
    assert entry["args"][-1] == "mcp"
    proc = subprocess.run([entry["command"], *entry["args"][:-1], "--version"], capture_output=True, text=True,
                          check=False, timeout=60, env={"PATH": "/nonexistent", "HOME": os.environ["HOME"]})
    assert proc.returncode == 0 and proc.stdout.startswith("memstore ")
    assert '"command": "memstore"' not in docs_text()
