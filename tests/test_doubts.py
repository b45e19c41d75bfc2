"""Doubts travel with a memory (SPEC §10): disputed, unconfirmed, stale (by cited lines) and voted
down for this problem show the same on every surface an agent or a person looks at — read JSON,
read text, `context`, `snapshot --markdown`, the prompt and file hooks, `review` — and a failed
tactic a later voted-up solution overtook is shown as history. Through the real CLI and hooks
on a real git repo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import CliResult, git, reopen, run_on_tty, write_req

from memstore.verbs import api

pytestmark = pytest.mark.model

PATIENT = {"MEMSTORE_HOOK_BUDGET": "300"}
LOW = "The payments sandbox key rotates every Monday at 06:00 UTC, so integration tests fail early on Mondays."
OLD_LIMIT = "The payment webhook retry limit is three attempts before the event is dropped."
NEW_LIMIT = "The payment webhook retry limit is five attempts before the event goes to the dead-letter queue."
PROBLEM = "Refund requests hang forever when the payment provider answers 409 Conflict to the refund call."
DOWN = "Wrap the refund call in a retry loop with exponential backoff until the provider stops answering 409."
TACTIC = "Raising the HTTP client timeout for the refund call did not help: the 409 comes back at once."
UP = "Send an idempotency key with each refund call; the provider then answers 200 with the existing refund."
NEAR = "Lines seven and eight of ledger.py set the ROUNDING and CURRENCY flags of the ledger."
FAR = "The block from line 126 to 180 of ledger.py is the table of tax rates per country code."
LEDGER = [f"RATE_{n} = {n}" for n in range(1, 201)]


def _write(repo: Path, kind: str, text: str, evidence: list[str], **extra: Any) -> str:
    return api.write(reopen(repo), write_req(kind, text, evidence=evidence, **extra))["id"]


def _update(repo: Path, request: dict[str, Any], author: str = "agent-a") -> None:
    api.update(reopen(repo), {"op": "update", "evidence_refs": ["user:seen in the session"], **request}, author=author)


def _ledger(repo: Path, lines: list[str]) -> None:
    (repo / "src" / "ledger.py").write_text("\n".join(lines) + "\n")


@pytest.fixture
def world(repo: Path) -> dict[str, str]:
    (repo / "src" / "webhooks.py").write_text("RETRIES = 3\n")
    (repo / "src" / "sandbox.py").write_text("KEY_ROTATES = 'monday'\n")
    (repo / "src" / "refunds.py").write_text("def refund():\n    pass\n")
    _ledger(repo, LEDGER)
    git(repo, "add", "src")
    git(repo, "commit", "-q", "-m", "code")
    ids = {
        "old": _write(repo, "fact", OLD_LIMIT, ["file:src/webhooks.py"]),
        "new": _write(repo, "fact", NEW_LIMIT, ["file:src/webhooks.py"]),
        "low": _write(repo, "fact", LOW, ["file:src/sandbox.py"], memory_extra={"confidence": 0.3}),
        "problem": _write(repo, "problem", PROBLEM, ["file:src/refunds.py"]),
        "near": _write(repo, "fact", NEAR, ["file:src/ledger.py#L7-L8"]),
        "far": _write(repo, "fact", FAR, ["file:src/ledger.py#L126-L180"]),
    }
    ids["tactic"] = _write(repo, "failed_tactic", TACTIC, ["file:src/refunds.py"], links={"problem_id": ids["problem"]})
    ids["down"] = _write(repo, "solution", DOWN, ["file:src/refunds.py"], links={"problem_id": ids["problem"]})
    ids["up"] = _write(repo, "solution", UP, ["file:src/refunds.py"], links={"problem_id": ids["problem"]})
    _update(repo, {"type": "link", "memory_id": ids["new"], "relation": {"type": "contradicts", "id": ids["old"]}})
    _update(repo, {"type": "utility_vote", "memory_id": ids["down"], "problem_id": ids["problem"], "vote": -0.5})
    _update(repo, {"type": "utility_vote", "memory_id": ids["up"], "problem_id": ids["problem"], "vote": 1})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memories")
    # a change on line 5 and one line added on top: neither citation's lines changed
    _ledger(repo, ["import decimal", *LEDGER[:4], "RATE_5 = 'five'", *LEDGER[5:]])
    return ids


def _doubts(item: dict[str, Any]) -> list[str]:
    return [d["doubt"] for d in item.get("doubts", [])]


def _read(cli: Callable[..., CliResult], repo: Path, query: str, *args: str) -> dict[str, dict[str, Any]]:
    rc, out, err = cli("read", query, *args, cwd=repo)
    assert rc == 0, err
    return {r["id"]: r for r in out["results"]}


def _hook(event: str, payload: dict[str, Any], repo: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "memstore", "integrate", "claude", "--hook", event],
                          input=json.dumps(payload), capture_output=True, text=True, cwd=repo, check=False,
                          env={**os.environ, **PATIENT}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"] if proc.stdout.strip() else ""


def _line_of(text: str, mem_id: str) -> str:
    """The line that heads the memory ``mem_id`` (not a line that only names it as a link)."""
    return next(line for line in text.splitlines() if mem_id in line and "why:" not in line)


def test_read_answers_carry_confidence_review_and_doubts(repo: Path, world: dict[str, str],
                                                         cli: Callable[..., CliResult]) -> None:
    got = _read(cli, repo, "payment webhook retry limit attempts")
    assert world["old"] in got and world["new"] in got, got
    for side in ("old", "new"):
        assert _doubts(got[world[side]]) == ["disputed"]
    assert got[world["new"]]["doubts"][0]["why"] == f"contradicted by {world['old']}"

    got = _read(cli, repo, LOW)
    low = got[world["low"]]
    assert low["confidence"] == 0.3 and low["review"] is True and _doubts(low) == ["unconfirmed"]

    got = _read(cli, repo, PROBLEM, "--problem", world["problem"])
    assert _doubts(got[world["down"]]) == ["voted_down"] and _doubts(got[world["up"]]) == []
    tactic = got[world["tactic"]]
    assert tactic["links"]["superseded_by"] == world["up"] and tactic["note"].startswith("history:")

    got = _read(cli, repo, NEAR)
    assert got[world["near"]]["stale"] is None and _doubts(got[world["near"]]) == []
    got = _read(cli, repo, FAR)
    assert got[world["far"]]["stale"] is None
    _ledger(repo, ["import decimal", *LEDGER[:149], "RATE_150 = 'changed'", *LEDGER[150:]])  # inside L126-L180
    got = _read(cli, repo, FAR)
    assert _doubts(got[world["far"]]) == ["stale"] and got[world["far"]]["stale"]["evidence"] == [
        "file:src/ledger.py#L126-L180"]


def test_read_text_names_each_doubt(repo: Path, world: dict[str, str]) -> None:
    for query, key, words in ((OLD_LIMIT, "old", "(disputed)"), (LOW, "low", "(unconfirmed)"),
                              (NEAR, "near", None)):
        rc, out, _ = run_on_tty(["read", query], cwd=repo)
        text = out.decode()
        assert rc == 0 and world[key][:10] in text, text
        line = _line_of(text, world[key][:10])
        assert (words in line) if words else ("(" not in line.split("score")[1]), line
    rc, out, _ = run_on_tty(["read", PROBLEM, "--problem", world["problem"]], cwd=repo)
    text = out.decode()
    assert "voted down for this problem" in _line_of(text, world["down"][:10])
    assert _line_of(text, world["tactic"][:10]).lstrip().startswith("HISTORY failed_tactic")  # under its problem


def test_context_lists_disputes_apart_and_flags_the_rest(repo: Path, world: dict[str, str],
                                                         cli: Callable[..., CliResult]) -> None:
    rc, ctx, err = cli("context", cwd=repo)
    assert rc == 0, err
    facts = {m["id"]: m for m in ctx["facts"]}
    disputed = {m["id"]: m for m in ctx["disputed"]}
    assert world["old"] not in facts and world["new"] not in facts
    assert set(disputed) == {world["old"], world["new"]}
    assert all(_doubts(m) == ["disputed"] for m in disputed.values())
    assert _doubts(facts[world["low"]]) == ["unconfirmed"]
    assert facts[world["near"]]["stale"] is None and facts[world["far"]]["stale"] is None
    assert [m["id"] for m in ctx["tactics_history"]] == [world["tactic"]]
    assert world["tactic"] not in {m["id"] for m in ctx["failed_tactics"]}

    proc = subprocess.run([sys.executable, "-m", "memstore", "integrate", "claude", "--hook", "session-start"],
                          input=json.dumps({"session_id": "ctx", "cwd": str(repo)}), capture_output=True, text=True,
                          cwd=repo, env={**os.environ, **PATIENT}, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    current = text.split("Current facts:")[1].split("\n\n")[0]
    assert world["old"] not in current and world["new"] not in current
    assert "(disputed)" in _line_of(text, world["old"]) and "(unconfirmed)" in _line_of(text, world["low"])
    assert "stale" not in _line_of(text, world["near"]) and "stale" not in _line_of(text, world["far"])


def test_snapshot_markdown_never_shows_a_doubted_memory_as_current_or_best(
        repo: Path, world: dict[str, str], cli: Callable[..., CliResult]) -> None:
    rc, md, err = cli("snapshot", "--markdown", cwd=repo)
    assert rc == 0, err
    current = md.split("## Current facts")[1].split("## ")[0]
    disputed = md.split("## Disputed")[1].split("## ")[0]
    assert world["old"][:10] not in current and world["new"][:10] not in current
    assert world["old"][:10] in disputed and world["new"][:10] in disputed
    assert "(unconfirmed)" in _line_of(md, world["low"][:10])
    assert _line_of(md, world["up"][:10]).startswith("- **Solution:**")
    assert _line_of(md, world["down"][:10]).startswith("- Voted down for this problem:")
    assert _line_of(md, world["tactic"][:10]).startswith("- Failed before:")
    assert "stale" not in _line_of(md, world["near"][:10]) and "stale" not in _line_of(md, world["far"][:10])
    _ledger(repo, ["import decimal", *LEDGER[:6], "RATE_7 = 'seven'", *LEDGER[7:]])  # inside L7-L8
    rc, md, err = cli("snapshot", "--markdown", cwd=repo)
    assert rc == 0, err
    assert "stale" in _line_of(md, world["near"][:10]) and "stale" not in _line_of(md, world["far"][:10])


def test_the_prompt_and_file_hooks_say_the_same(repo: Path, world: dict[str, str]) -> None:
    text = _hook("prompt", {"session_id": "p1", "cwd": str(repo), "hook_event_name": "UserPromptSubmit",
                            "prompt": "what is the payment webhook retry limit before an event is dropped?"}, repo)
    assert "(disputed)" in _line_of(text, world["old"]), text
    text = _hook("prompt", {"session_id": "p2", "cwd": str(repo), "hook_event_name": "UserPromptSubmit",
                            "prompt": LOW}, repo)
    assert "(unconfirmed)" in _line_of(text, world["low"]), text

    def read_file(session: str, name: str) -> str:
        return _hook("file", {"session_id": session, "cwd": str(repo), "hook_event_name": "PreToolUse",
                              "tool_name": "Read", "tool_input": {"file_path": str(repo / "src" / name)}}, repo)

    text = read_file("f1", "webhooks.py")
    assert "(disputed)" in _line_of(text, world["old"]) and "(disputed)" in _line_of(text, world["new"])
    assert "(unconfirmed)" in _line_of(read_file("f2", "sandbox.py"), world["low"])
    text = read_file("f3", "refunds.py")
    assert "voted down for this problem" in _line_of(text, world["down"])
    text = read_file("f4", "ledger.py")
    assert "stale" not in _line_of(text, world["near"]) and "stale" not in _line_of(text, world["far"])
    _ledger(repo, ["import decimal", *LEDGER[:149], "RATE_150 = 'changed'", *LEDGER[150:]])
    text = read_file("f5", "ledger.py")
    assert "stale" not in _line_of(text, world["near"]) and "stale" in _line_of(text, world["far"])


def test_review_shows_the_doubts_of_the_memories_a_change_touches(repo: Path, world: dict[str, str],
                                                                  cli: Callable[..., CliResult]) -> None:
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "src" / "webhooks.py").write_text("RETRIES = 5\n")
    (repo / "src" / "sandbox.py").write_text("KEY_ROTATES = 'tuesday'\n")
    git(repo, "commit", "-q", "-am", "retry five times, rotate on tuesday")
    rc, out, err = cli("review", "--base", "main", "--format", "json", cwd=repo)
    assert rc == 0, err
    touched = {t["id"]: t for t in out["sections"]["touched"]}
    assert _doubts(touched[world["old"]]) == ["disputed"] and _doubts(touched[world["new"]]) == ["disputed"]
    assert _doubts(touched[world["low"]]) == ["unconfirmed"]
    rc, md, err = cli("review", "--base", "main", cwd=repo)
    assert rc == 0, err
    assert "*(disputed)*" in _line_of(md, world["old"][:10]) and "*(unconfirmed)*" in _line_of(md, world["low"][:10])


def test_a_running_daemon_answers_the_hooks_with_line_level_staleness(tmp_path: Path) -> None:
    """The hooks an agent runs are answered by the daemon, which keeps the workspace warm: an
    edit on line 5 leaves a citation of L7-L8 current there too, and an edit inside it is seen
    by the next call."""
    from daemonworld import Env, commit_all

    life = Env(tmp_path / "doubtd")
    proc = None
    try:
        with life.environ():
            repo = life.make_repo("repo")
            (repo / "src").mkdir(exist_ok=True)
            _ledger(repo, LEDGER)
            commit_all(repo, "code")
            near = _write(repo, "fact", NEAR, ["file:src/ledger.py#L7-L8"])
            old = _write(repo, "fact", OLD_LIMIT, ["file:src/ledger.py#L100-L101"])
            new = _write(repo, "fact", NEW_LIMIT, ["file:src/ledger.py#L100-L101"])
            _update(repo, {"type": "link", "memory_id": new, "relation": {"type": "contradicts", "id": old}})
            commit_all(repo)
        proc = life.start("--idle", "600")
        _ledger(repo, ["import decimal", *LEDGER[:4], "RATE_5 = 'five'", *LEDGER[5:]])

        def hook(event: str, payload: dict[str, Any]) -> str:
            out = subprocess.run([sys.executable, "-m", "memstore", "integrate", "claude", "--hook", event],
                                 input=json.dumps({"cwd": str(repo), **payload}), capture_output=True, text=True,
                                 cwd=repo, env=life.env(), check=False, timeout=120)
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]

        before = life.status()["requests"]
        read = {"hook_event_name": "PreToolUse", "tool_name": "Read",
                "tool_input": {"file_path": str(repo / "src" / "ledger.py")}}
        text = hook("file", {"session_id": "d1", **read})
        assert "stale" not in _line_of(text, near) and "(disputed)" in _line_of(text, old)
        assert life.status()["requests"] == before + 2  # the hook's one call (and the status asked before it)
        _ledger(repo, ["import decimal", *LEDGER[:6], "RATE_7 = 'seven'", *LEDGER[7:]])
        text = hook("file", {"session_id": "d2", **read})
        assert "stale" in _line_of(text, near)
        text = hook("prompt", {"session_id": "d3", "hook_event_name": "UserPromptSubmit", "prompt": NEW_LIMIT})
        assert "(disputed)" in _line_of(text, new)
    finally:
        life.cleanup()
        if proc is not None:
            proc.wait(timeout=30)
