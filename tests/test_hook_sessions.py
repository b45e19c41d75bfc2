"""The learning loop closes by itself: an agent session recorded as each agent sends its hooks
(Claude Code, Codex; payloads in their documented shapes, docs/agents.md) runs through the exact
commands `memstore integrate` wrote, as the agent runs them (`sh -c`, JSON on stdin), against a
real daemon; the session becomes an episode, `reflect --session` speaks of that session (its
injections with a vote request each, the failing-then-passing test as a problem -> solution
candidate), and `memstore vote` lands the votes where the next read weighs them."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import git, run_cli
from daemonworld import Env

from memstore.store.workspace import open_workspace
from memstore.verbs import api

pytestmark = [pytest.mark.model, pytest.mark.slow]

PROBLEM = ("pytest fails from the repo root with ModuleNotFoundError: No module named 'shop' while collecting "
           "tests/test_cart.py")
SOLUTION = ("Set pythonpath = src under [tool.pytest.ini_options] in pyproject.toml so the tests import the "
            "shop package from src/")
CART_FACT = "Cart totals in src/shop/cart.py are integer cents; never add prices as floats."
# A coloured pytest log pasted into the prompt: ESC sequences and a NUL, as a terminal copies them.
PASTED = ("pytest fails again, here is the log:\n\x1b[31mE   ModuleNotFoundError: No module named 'shop'\x1b[0m\n"
          "\x1b[1mERROR collecting tests/test_cart.py\x1b[0m\x00\nwhy can pytest not import shop?")


def _seed(world: Env, repo: Path) -> dict[str, str]:
    (repo / "src" / "shop").mkdir(parents=True)
    (repo / "src" / "shop" / "cart.py").write_text("def total(items):\n    return sum(i.cents for i in items)\n")
    (repo / "pyproject.toml").write_text("[project]\nname = 'shop'\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "shop")
    ws = open_workspace(cwd=repo, env=world.env())

    def w(kind: str, text: str, evidence: list[str], **links: str) -> str:
        memory: dict[str, Any] = {"kind": kind, "scope": "repo", "text": text, "evidence_refs": evidence}
        if links:
            memory["links"] = links
        return str(api.write(ws, {"op": "write", "memory": memory, "allow_duplicate": True})["id"])

    problem = w("problem", PROBLEM, ["user:seen in CI"])
    return {"problem": problem, "solution": w("solution", SOLUTION, ["user:it worked"], problem_id=problem),
            "fact": w("fact", CART_FACT, ["file:src/shop/cart.py"])}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    life = Env(tmp_path_factory.mktemp("loop"))
    with life.environ():
        for agent in ("claude", "codex"):
            repo = life.make_repo(agent)
            setattr(life, f"ids_{agent}", _seed(life, repo))
    for agent in ("claude", "codex"):
        code, _, err = life.cli("integrate", agent, cwd=life.base / agent)
        assert code == 0, err
    life.proc = life.start("--idle", "600")  # type: ignore[attr-defined]
    yield life
    life.cleanup()
    life.proc.wait(timeout=30)  # type: ignore[attr-defined]


class Agent:
    """Runs the hooks `integrate` wrote for one agent, as the agent does: each command of the event's
    groups whose matcher takes the tool, through `sh -c`, with the payload on stdin."""

    def __init__(self, world: Env, repo: Path, settings: Path, session: str, **env: str) -> None:
        self.world, self.repo, self.session, self.env = world, repo, session, env
        self.hooks = json.loads(settings.read_text())["hooks"]

    def run(self, event: str, tool: str | None = None, **fields: Any) -> list[str]:
        payload = {"session_id": self.session, "transcript_path": None, "cwd": str(self.repo),
                   "hook_event_name": event, **({"tool_name": tool} if tool else {}), **fields}
        outs = []
        for group in self.hooks.get(event, []):
            matcher = group.get("matcher")
            if matcher and tool and tool not in matcher.split("|"):
                continue
            for hook in group["hooks"]:
                proc = subprocess.run(hook["command"], shell=True, input=json.dumps(payload), capture_output=True,
                                      text=True, cwd=self.repo, env=self.world.env(**self.env), timeout=300)
                assert proc.returncode == 0, proc.stderr
                outs.append(proc.stdout)
        return outs


def _context(outs: list[str]) -> str:
    return "".join(json.loads(o)["hookSpecificOutput"]["additionalContext"] for o in outs if o.strip())


def _events(world: Env, repo: Path, episode: str) -> list[dict[str, Any]]:
    code, shown, err = world.cli("episode", "show", episode, "--json-out", cwd=repo)
    assert code == 0, err
    return list(shown["events"])


def _close_the_loop(world: Env, repo: Path, ids: dict[str, str], session: str, reason: str,
                    env: dict[str, str]) -> dict[str, Any]:
    """What the agent does with the Stop hook's reason: reflect on its session, vote on every
    memory it was given, all in one call; then the next read."""
    assert f"reflect --session {session}" in reason
    code, out, err = world.cli("reflect", "--session", session, "--json-out", cwd=repo, **env)
    assert code == 0, err
    given = [m for group in out["injected"] for m in group["memories"]]
    votes = []
    for m in given:
        assert m["vote"]["memory_id"] == m["id"] and m["vote"]["type"] == "utility_vote"
        votes.append({**m["vote"], "vote": 1, "rationale": "it named the fix"})
    proc = subprocess.run([*world_python(), "-m", "memstore", "vote"], input=json.dumps({"votes": votes}),
                          capture_output=True, text=True, cwd=repo, env=world.env(**env), timeout=120)
    assert proc.returncode == 0, proc.stderr
    recorded = json.loads(proc.stdout)
    code, read, err = world.cli("read", PROBLEM, "--json-out", cwd=repo)
    assert code == 0, err
    return {"reflect": out, "given": given, "votes": recorded, "read": read}


def world_python() -> list[str]:
    import sys

    return [sys.executable]


def _check_loop(world: Env, repo: Path, ids: dict[str, str], got: dict[str, Any], episode: str) -> None:
    reflect, given = got["reflect"], got["given"]
    assert reflect["episode"] == episode
    events = _events(world, repo, episode)
    tools = [e for e in events if e.get("op") == "tool"]
    failed = next(e for e in tools if e.get("outcome") == "failed")
    passed = next(e for e in tools if e.get("outcome") == "ok" and e.get("command") == failed["command"])
    assert failed["command"].startswith("pytest") and failed["exit_code"] == 1
    assert any(e.get("edit") and "src/shop/cart.py" in e.get("files", []) for e in tools)
    # the candidate lesson cites the failing and the passing run
    (lesson,) = [x for x in reflect["lessons"] if x["kind"] == "problem_solution"]
    ref = f"event:{episode}:"
    assert lesson["evidence"] == [ref + str(failed["seq"]), ref + str(passed["seq"])]
    assert lesson["files"] == ["src/shop/cart.py"]
    # every memory the hooks injected is offered for a vote (100 %), grouped by what brought it
    injected = {mid for e in events if e.get("op") == "inject" for mid in e["results"]}
    assert injected and {m["id"] for m in given} == injected
    assert ids["problem"] in injected and ids["fact"] in injected
    by_file = next(g for g in reflect["injected"] if g["event"] == "file")
    assert by_file["files"] == ["src/shop/cart.py"] and ids["fact"] in [m["id"] for m in by_file["memories"]]
    # the problem the session met is the one a vote names (never the problem itself)
    solution_vote = next((m["vote"] for m in given if m["id"] == ids["solution"]), None)
    if solution_vote is not None:
        assert solution_vote["problem_id"] == ids["problem"]
    assert next(m["vote"] for m in given if m["id"] == ids["problem"])["problem_id"] is None
    # the votes landed, all of them, were logged to the session, and the next read weighs them
    assert got["votes"]["count"] == len(given) and got["votes"]["skipped"] == []
    voted = [e for e in _events(world, repo, episode) if e.get("op") == "vote"]
    assert sorted(e["memory_id"] for e in voted) == sorted(injected)
    util = {r["id"]: r["utility"] for r in got["read"]["results"]}
    assert util[ids["problem"]]["votes"] == 1 and util[ids["problem"]]["global"] > 0


def test_a_claude_code_session_closes_the_loop(world: Env, tmp_path: Path) -> None:
    repo, ids = world.base / "claude", world.ids_claude  # type: ignore[attr-defined]
    # an older session, ended: reflect must never fall back to it
    code, old, err = world.cli("episode", "start", "--agent", "claude-code", "--task", "old work", cwd=repo)
    assert code == 0, err
    for i in range(18):
        world.cli("episode", "log", "--source", "tool", "--content", f"old event {i}", cwd=repo)
    world.cli("episode", "end", "--outcome", "success", cwd=repo)
    env_file = tmp_path / "claude-env"
    claude = Agent(world, repo, repo / ".claude" / "settings.json", "c0ffee-1", CLAUDE_ENV_FILE=str(env_file))

    start = claude.run("SessionStart", source="startup")
    assert "Long-term memory" in "".join(start) or start  # the context as plain text
    exported = env_file.read_text()
    assert exported.startswith("export MEMSTORE_EPISODE=")
    episode = exported.split("=", 1)[1].strip()
    assert episode != old["episode"]

    told = _context(claude.run("UserPromptSubmit", prompt=PASTED))
    assert ids["problem"] in told  # the pasted log's escapes no longer silence the hook
    claude.run("PostToolUseFailure", "Bash", tool_use_id="t1", tool_input={"command": "pytest -q tests/test_cart.py"},
               error="Exit code 1\nE   ModuleNotFoundError: No module named 'shop'\n1 error in 0.12s")
    cited = _context(claude.run("PreToolUse", "Read", tool_use_id="t2",
                                tool_input={"file_path": str(repo / "src" / "shop" / "cart.py")}))
    assert ids["fact"] in cited
    (repo / "src" / "shop" / "cart.py").write_text("def total(items):\n    return sum(int(i.cents) for i in items)\n")
    claude.run("PostToolUse", "Edit", tool_use_id="t3",
               tool_input={"file_path": str(repo / "src" / "shop" / "cart.py"), "old_string": "i.cents",
                           "new_string": "int(i.cents)"},
               tool_response={"filePath": str(repo / "src" / "shop" / "cart.py"), "success": True})
    claude.run("PostToolUse", "Bash", tool_use_id="t4", tool_input={"command": "pytest -q tests/test_cart.py"},
               tool_response={"stdout": "3 passed in 0.10s", "stderr": "", "interrupted": False})
    (stop,) = claude.run("Stop", stop_hook_active=False)
    reason = json.loads(stop)["reason"]

    got = _close_the_loop(world, repo, ids, "c0ffee-1", reason, {"MEMSTORE_EPISODE": episode})
    _check_loop(world, repo, ids, got, episode)
    prompt = next(e for e in _events(world, repo, episode) if e.get("op") == "prompt")
    assert "\x1b" not in prompt["content"] and "\x00" not in prompt["content"]
    assert "No module named 'shop'" in prompt["content"]

    # the session ends: its episode is closed and staged, and a real commit (the git hooks
    # integrate installed, the pre-commit check among them) takes it with the work
    claude.run("SessionEnd", reason="prompt_input_exit")
    code, shown, err = world.cli("episode", "show", episode, "--json-out", cwd=repo)
    assert code == 0 and shown["ended"]["outcome"] == "session ended (prompt_input_exit)", err
    assert shown["path"] in git(repo, "diff", "--cached", "--name-only").split()
    git(repo, "add", "src/shop/cart.py")
    commit = subprocess.run(["git", "commit", "-q", "-m", "Cart totals: integer cents"], cwd=repo,
                            capture_output=True, text=True, env=world.env(), check=False)
    assert commit.returncode == 0, commit.stderr
    assert shown["path"] in git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()


def test_a_codex_session_closes_the_loop(world: Env) -> None:
    repo, ids = world.base / "codex", world.ids_codex  # type: ignore[attr-defined]
    codex = Agent(world, repo, repo / ".codex" / "hooks.json", "019a-codex-thread")
    common = {"model": "gpt-5-codex", "turn_id": "turn-1"}
    codex.run("SessionStart", source="startup", **common)
    told = _context(codex.run("UserPromptSubmit", prompt="pytest cannot import shop: No module named 'shop' when "
                              "collecting tests/test_cart.py", **common))
    assert ids["problem"] in told
    codex.run("PostToolUse", "Bash", tool_use_id="call_1", tool_input={"command": "pytest -q tests/test_cart.py"},
              tool_response="Exit code: 1\nWall time: 0.4 seconds\nOutput:\nE   ModuleNotFoundError: No module "
                            "named 'shop'\n1 error in 0.12s", **common)
    patch = ("*** Begin Patch\n*** Update File: src/shop/cart.py\n@@\n-    return sum(i.cents for i in items)\n"
             "+    return sum(int(i.cents) for i in items)\n*** End Patch\n")
    cited = _context(codex.run("PreToolUse", "apply_patch", tool_use_id="call_2", tool_input={"command": patch},
                               **common))
    assert ids["fact"] in cited
    (repo / "src" / "shop" / "cart.py").write_text("def total(items):\n    return sum(int(i.cents) for i in items)\n")
    codex.run("PostToolUse", "apply_patch", tool_use_id="call_2", tool_input={"command": patch},
              tool_response="Success. Updated the following files:\nM src/shop/cart.py", **common)
    codex.run("PostToolUse", "Bash", tool_use_id="call_3", tool_input={"command": "pytest -q tests/test_cart.py"},
              tool_response="Exit code: 0\nWall time: 0.3 seconds\nOutput:\n3 passed in 0.10s", **common)
    (stop,) = codex.run("Stop", stop_hook_active=False, last_assistant_message="Fixed.", **common)
    reason = json.loads(stop)["reason"]
    code, listed, err = world.cli("episode", "list", "--json-out", cwd=repo)
    assert code == 0, err
    (mine,) = [e for e in listed["episodes"] if e["agent"] == "codex"]
    got = _close_the_loop(world, repo, ids, "019a-codex-thread", reason, {})
    _check_loop(world, repo, ids, got, mine["episode"])


def test_reflect_never_falls_back_to_an_ended_episode(repo: Path) -> None:
    env = {**__import__("os").environ}
    for args in (("episode", "start", "--agent", "claude-code", "--task", "old"),
                 ("episode", "log", "--source", "tool", "--content", "pytest: 1 failed"),
                 ("episode", "end", "--outcome", "success")):
        assert run_cli(args, cwd=repo, env=env)[0] == 0
    code, out, err = run_cli(("reflect", "--json-out"), cwd=repo, env=env)
    assert code == 3 and out["error"]["code"] == "not_found", out
    code, out, err = run_cli(("reflect", "--session", "never-seen", "--json-out"), cwd=repo, env=env)
    assert code == 3 and out["error"]["field"] == "session", err


def test_a_pasted_log_does_not_silence_the_prompt_hook_but_a_write_still_refuses_it(world: Env) -> None:
    repo, ids = world.base / "claude", world.ids_claude  # type: ignore[attr-defined]
    agent = Agent(world, repo, repo / ".claude" / "settings.json", "pasted-log-1")
    told = _context(agent.run("UserPromptSubmit", prompt=PASTED))
    assert ids["problem"] in told
    # what the hook cleans is only what it reads: a write of the same text is refused, nothing written
    before = sorted(p.name for p in (repo / ".memory" / "problems").iterdir())
    request = {"op": "write", "memory": {"kind": "problem", "scope": "repo", "text": PASTED,
                                         "evidence_refs": ["user:pasted"]}}
    code, out, err = run_cli(("write", "--json", "-", "--json-out"), cwd=repo, env=world.env(),
                             input=json.dumps(request))
    assert code == 2 and out["error"]["code"] == "bad_chars", err
    assert sorted(p.name for p in (repo / ".memory" / "problems").iterdir()) == before


def test_a_codex_session_with_no_end_is_ended_once_idle_when_another_opens(world: Env) -> None:
    """Codex sends no session end: its episode stays open until, idle for
    ``episodes.idle_end_minutes`` (120), another session of the repo opens one and ends it, staged
    like any ended episode. A session still busy beside it is left open."""
    repo = world.base / "codex"
    common = {"model": "gpt-5-codex", "turn_id": "turn-1"}

    def episode_of(session: str) -> dict[str, Any]:
        code, listed, err = world.cli("episode", "list", "--json-out", cwd=repo)
        assert code == 0, err
        (mine,) = [e for e in listed["episodes"] if e["episode"] == opened[session]]
        return mine

    opened: dict[str, str] = {}
    for session in ("idle-thread", "busy-thread"):
        Agent(world, repo, repo / ".codex" / "hooks.json", session).run(
            "UserPromptSubmit", prompt=f"{session}: why does the cart total round down", **common)
        code, listed, err = world.cli("episode", "list", "--json-out", cwd=repo)
        assert code == 0, err
        opened[session] = next(e["episode"] for e in listed["episodes"] if e["agent"] == "codex"
                               and e["episode"] not in opened.values() and e["ended"] is None)
    assert episode_of("idle-thread")["ended"] is None  # busy-thread opened beside it: both live
    idle_file = repo / episode_of("idle-thread")["path"]
    three_hours_ago = time.time() - 3 * 3600
    os.utime(idle_file, (three_hours_ago, three_hours_ago))
    Agent(world, repo, repo / ".codex" / "hooks.json", "next-thread").run(
        "UserPromptSubmit", prompt="next-thread: add a test for the cart total", **common)
    idle, busy = episode_of("idle-thread"), episode_of("busy-thread")
    assert idle["ended"] is not None and idle["outcome"] == "unknown: no session end, idle 180 min", idle
    assert busy["ended"] is None
    staged = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=repo, capture_output=True, text=True,
                            check=True).stdout.split()
    assert idle["path"] in staged
