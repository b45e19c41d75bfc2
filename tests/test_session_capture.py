"""What the agent hooks capture into a session's episode, without a daemon: the `tool` hook run as
`python -m memstore integrate <agent> --hook tool` with each agent's post-tool JSON on stdin; the
episode's bounds (secrets redacted before disk, a per-session cap whose drops are counted), the
heuristics `reflect` finds in it, and `memstore vote`'s all-or-nothing gate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import run_cli, store_files, write_req

from memstore.store.workspace import open_workspace
from memstore.verbs import api

SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"  # a GitHub token's shape, never a real one


def hook(repo: Path, agent: str, event: str, payload: dict[str, Any]) -> str:
    proc = subprocess.run([sys.executable, "-m", "memstore", "integrate", agent, "--hook", event],
                          input=json.dumps(payload), capture_output=True, text=True, cwd=repo, check=False,
                          env=dict(os.environ), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def bash(repo: Path, session: str, command: str, code: int, out: str = "") -> None:
    event = "PostToolUse" if code == 0 else "PostToolUseFailure"
    fields: dict[str, Any] = ({"tool_response": {"stdout": out, "stderr": "", "interrupted": False}} if code == 0
                              else {"error": f"Exit code {code}\n{out}"})
    assert hook(repo, "claude", "tool", {"session_id": session, "cwd": str(repo), "hook_event_name": event,
                                         "tool_name": "Bash", "tool_input": {"command": command}, **fields}) == ""


def edit(repo: Path, session: str, rel: str) -> None:
    hook(repo, "claude", "tool", {"session_id": session, "cwd": str(repo), "hook_event_name": "PostToolUse",
                                  "tool_name": "Edit", "tool_input": {"file_path": str(repo / rel)},
                                  "tool_response": {"filePath": str(repo / rel), "success": True}})


def episode_rows(repo: Path) -> list[dict[str, Any]]:
    (path,) = (repo / ".memory" / "episodes").glob("*/*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def reflect(repo: Path, session: str) -> dict[str, Any]:
    code, out, err = run_cli(("reflect", "--session", session, "--json-out"), cwd=repo, env=dict(os.environ))
    assert code == 0, err
    return dict(out)


def test_a_secret_in_a_tool_call_never_reaches_the_episode(repo: Path) -> None:
    bash(repo, "sec-1", f"curl -H 'Authorization: token {SECRET}' https://api.github.com/user", 22,
         f"curl: (22) 401 for token {SECRET}")
    text = "".join((repo / ".memory").rglob("*.jsonl").__next__().read_text())
    assert SECRET not in text and "REDACTED" in text
    rows = episode_rows(repo)
    assert rows[0]["session"] == "sec-1" and rows[0]["agent"] == "claude-code"
    assert rows[1]["outcome"] == "failed" and rows[1]["exit_code"] == 22


def test_past_the_session_cap_events_are_counted_in_the_episode(repo: Path) -> None:
    cfg = repo / ".memory" / "config.yaml"
    cfg.write_text(cfg.read_text() + "episodes:\n  max_session_events: 10\n")
    hook(repo, "claude", "session-start", {"session_id": "cap-1", "cwd": str(repo), "source": "startup"})
    (repo / "src" / "app.py").write_text("def main():\n    return 43\n")  # the Stop hook asks once the tree changed
    for i in range(13):
        bash(repo, "cap-1", f"echo {i}", 0, str(i))
    rows = episode_rows(repo)
    assert [r["seq"] for r in rows[1:]] == list(range(1, 11))  # 10 kept
    stop = json.loads(hook(repo, "claude", "stop", {"session_id": "cap-1", "cwd": str(repo),
                                                    "stop_hook_active": False}))
    assert "reflect --session cap-1" in stop["reason"]
    (dropped,) = [r for r in episode_rows(repo) if r.get("op") == "dropped"]
    assert dropped["dropped"] == 3 and dropped["cap"] == 10


def test_a_cursor_conversation_is_one_episode_and_a_failure_its_event(repo: Path) -> None:
    base = {"conversation_id": "conv-9", "generation_id": "gen-1", "workspace_roots": [str(repo)]}
    hook(repo, "cursor", "file", {**base, "hook_event_name": "postToolUse", "tool_name": "Read",
                                  "tool_input": {"file_path": str(repo / "src" / "app.py")}, "result_json": "{}"})
    hook(repo, "cursor", "tool", {**base, "hook_event_name": "postToolUseFailure", "tool_name": "Shell",
                                  "tool_input": {"command": "npm test"}, "error": "Process exited with code 1"})
    rows = episode_rows(repo)
    assert rows[0]["session"] == "conv-9" and rows[0]["agent"] == "cursor"
    assert [(r["tool"], r["outcome"]) for r in rows[1:]] == [("Read", "ok"), ("Shell", "failed")]
    assert rows[1]["files"] == ["src/app.py"] and rows[2]["exit_code"] == 1


def test_reflect_finds_a_reverted_tactic_and_a_command_given_up(repo: Path) -> None:
    edit(repo, "tac-1", "src/app.py")
    bash(repo, "tac-1", "pytest -q tests/test_app.py", 1, "1 failed")
    edit(repo, "tac-1", "src/app.py")
    bash(repo, "tac-1", "git checkout -- src/app.py", 0)
    for _ in range(2):
        bash(repo, "tac-1", "make lint", 2, "E501 line too long")
    out = reflect(repo, "tac-1")
    kinds = [x["kind"] for x in out["lessons"]]
    assert "problem_solution" not in kinds  # pytest never passed
    reverted = next(x for x in out["lessons"] if x["why"] == "edits undone by a revert")
    ep = out["episode"]
    assert reverted["evidence"][-1] == f"event:{ep}:4" and f"event:{ep}:3" in reverted["evidence"]
    given_up = [x for x in out["lessons"] if x["kind"] == "failed_tactic" and "make lint" in x["why"]]
    assert given_up and given_up[0]["evidence"] == [f"event:{ep}:5", f"event:{ep}:6"]
    (most,) = [x for x in out["lessons"] if x["kind"] == "most_edited"]
    assert most["files"][0]["path"] == "src/app.py" and most["files"][0]["edits"] == 2


def test_a_vote_batch_with_one_bad_vote_writes_nothing(repo: Path) -> None:
    ws = open_workspace(cwd=repo)
    good = api.write(ws, write_req("fact", "The CSV export streams rows; it never loads the table."))["id"]
    before = store_files(repo)
    env = dict(os.environ)
    for votes, code_, field in (
            ([{"memory_id": good, "vote": 1}, {"memory_id": good, "vote": 7}], 2, "votes[1].vote"),
            ([{"memory_id": good, "vote": 1}, {"memory_id": "01zzzzzzzzzzzzzzzzzzzzzzzz", "vote": -1}], 3,
             "votes[1].memory_id"),
            ([{"memory_id": good, "vote": 1}, {"type": "archive", "memory_id": good, "archived": True}], 2,
             "votes[1].type")):
        code, out, err = run_cli(("vote",), cwd=repo, env=env, input=json.dumps({"votes": votes}))
        assert code == code_ and out["error"]["field"] == field, (out, err)
        assert store_files(repo) == before  # nothing written, not even the good vote
    code, out, err = run_cli(("vote",), cwd=repo, env=env, input="{not json")
    assert code == 2 and out["error"]["code"] == "invalid_json"
    code, out, err = run_cli(("vote",), cwd=repo, env=env,
                             input=json.dumps([{"memory_id": good, "vote": 1}, {"memory_id": good, "vote": None}]))
    assert code == 0 and out["count"] == 1 and out["skipped"] == [1], err
    assert len(store_files(repo)) == len(before) + 1


def test_an_injection_the_episode_never_recorded_is_still_offered_for_a_vote(repo: Path) -> None:
    """A session under way when memstore was upgraded: its note (as the older hooks wrote it) says a
    memory was injected, but no episode event does. reflect still asks for its vote."""
    from memstore.verbs.recall import note_path, save_note

    mid = api.write(open_workspace(cwd=repo), write_req("fact", "Release builds run on Tuesdays."))["id"]
    save_note(note_path(repo, "old-1"), {"start": "x", "asked": False, "recalled": [mid]})
    bash(repo, "old-1", "pytest -q", 0, "1 passed")
    out = reflect(repo, "old-1")
    (group,) = out["injected"]
    assert group["event"] == "unrecorded" and [m["id"] for m in group["memories"]] == [mid]
    vote = {**group["memories"][0]["vote"], "vote": 1}
    code, ans, err = run_cli(("vote",), cwd=repo, env=dict(os.environ), input=json.dumps({"votes": [vote]}))
    assert code == 0 and ans["count"] == 1, err


def test_parallel_first_calls_of_a_session_open_one_episode(repo: Path) -> None:
    """An agent runs the hooks of parallel tool calls side by side: the session's first calls
    race to open its episode, and one episode holds every call."""
    from concurrent.futures import ThreadPoolExecutor

    def call(i: int) -> str:
        return hook(repo, "claude", "tool", {"session_id": "par-1", "cwd": str(repo), "hook_event_name": "PostToolUse",
                                             "tool_name": "Read", "tool_input": {"file_path": str(repo / f"m{i}.py")}})

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(call, range(4))) == [""] * 4
    rows = episode_rows(repo)  # exactly one episode file
    assert sorted(f for r in rows[1:] for f in r.get("files", [])) == [f"m{i}.py" for i in range(4)]
