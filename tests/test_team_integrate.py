"""A team commits what `memstore integrate` writes: a teammate's clone at another path, with another
HOME and memstore in a virtualenv at another path, runs the same commands without changing a tracked
file, and the committed hook commands and MCP servers start and answer there. Plus the per-prompt,
per-file and compaction hooks, and each agent's own hook format (Codex, Cursor)."""

from __future__ import annotations

import json
import os
import shlex
import site
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from conftest import REPO_ROOT, CliResult, git, make_git_repo
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import memstore
from memstore.verbs.guide import portable_argv

PY = sys.executable
AGENTS = ("claude", "codex", "cursor", "generic")
COMMITTED = (".claude/settings.json", ".mcp.json", "CLAUDE.md", ".codex/config.toml", ".codex/hooks.json",
             "AGENTS.md", ".cursor/mcp.json", ".cursor/hooks.json", ".cursor/rules/memstore.mdc")


def other_venv(root: Path) -> Path:
    """A virtualenv at another path whose python sees memstore and its dependencies through a .pth
    (not PYTHONPATH): another install, another interpreter path."""
    subprocess.run([PY, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    (purelib,) = (root / "lib").glob("python*/site-packages")
    paths = [*site.getsitepackages(), str(Path(memstore.__file__).resolve().parents[1])]
    (purelib / "memstore-test.pth").write_text("\n".join(paths) + "\n")
    return root / "bin" / "python"


def machine_env(home: Path) -> dict[str, str]:
    """Another person's machine: another HOME and global store, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "HOME": str(home), "MEMSTORE_HOME": str(home / ".memory"), "XDG_CONFIG_HOME": str(home / ".config")}


def run_hook(command: str, payload: dict, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A committed hook command line, through a shell, the hook's JSON on stdin, as the agents run it."""
    return subprocess.run(["sh", "-c", command], input=json.dumps(payload), capture_output=True, text=True,
                          cwd=cwd, env=env, check=False, timeout=120)


def claude_command(repo: Path, event: str) -> str:
    settings = json.loads((repo / ".claude/settings.json").read_text())
    return str(settings["hooks"][event][-1]["hooks"][0]["command"])


async def mcp_read(entry: dict, cwd: Path, env: dict[str, str]) -> dict:
    """Start a committed MCP entry, initialize, and call memory_read over stdio."""
    params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd=str(cwd), env=env)
    with anyio.fail_after(120):
        async with stdio_client(params) as streams, ClientSession(*streams) as session:
            await session.initialize()
            result = await session.call_tool("memory_read", {"query": "why does the app return 42"})
            assert not result.is_error and isinstance(result.content[0], types.TextContent)
            return dict(json.loads(result.content[0].text))


def test_a_teammates_clone_with_another_venv_and_home_changes_no_tracked_file_and_its_hooks_and_servers_answer(
        tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    a = make_git_repo(tmp_path / "alice" / "work" / "app")
    for agent in AGENTS:
        code, _, err = cli("integrate", agent, cwd=a)
        assert code == 0, err
    git(a, "add", "-A")
    git(a, "commit", "-q", "-m", "memstore for our agents")
    for rel in COMMITTED:  # nothing of Alice's machine went into git
        text = (a / rel).read_text()
        assert str(tmp_path) not in text and PY not in text and str(REPO_ROOT) not in text, rel

    b = tmp_path / "bob" / "src" / "app-clone"
    git(tmp_path, "clone", "-q", str(a), str(b))
    bob_python = other_venv(tmp_path / "bob" / "venvs" / "memstore")
    env = machine_env(tmp_path / "bob" / "home")
    for agent in AGENTS:
        proc = subprocess.run([str(bob_python), "-m", "memstore", "integrate", agent], cwd=b, env=env,
                              capture_output=True, text=True, check=False, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert {f["state"] for f in json.loads(proc.stdout)["files"]} == {"unchanged"}, proc.stdout
    assert git(b, "status", "--porcelain") == ""  # no tracked file changed on Bob's machine
    assert git(b, "config", "--get", "memstore.python").strip() == str(bob_python)  # his, in his clone only

    # The guide's way to run memstore, as an agent would type it in Bob's clone, reaches his venv.
    guide = (b / "CLAUDE.md").read_text()
    spelled = '"$(git config memstore.python)" -P -m memstore'
    assert spelled in guide and spelled in (b / "AGENTS.md").read_text()
    res = subprocess.run(["sh", "-c", f"{spelled} context"], cwd=b / "src", env=env, capture_output=True,
                         text=True, check=False, timeout=120)
    assert res.returncode == 0 and json.loads(res.stdout)["ok"] is True, res.stderr

    # The committed hooks, run as the agents run them, reach memstore through Bob's venv.
    base = {"session_id": "bob-1", "cwd": str(b), "transcript_path": "/dev/null"}
    start = run_hook(claude_command(b, "SessionStart"), {**base, "source": "startup"}, b, env)
    assert start.returncode == 0 and "Current code is ground truth" in start.stdout, start.stderr
    for event, extra in (("UserPromptSubmit", {"prompt": "fix the app"}),
                         ("PreToolUse", {"tool_name": "Read", "tool_input": {"file_path": str(b / "src/app.py")}}),
                         ("Stop", {"stop_hook_active": False})):
        res = run_hook(claude_command(b, event), {**base, **extra}, b, env)
        assert res.returncode == 0 and "skipped" not in res.stderr, (event, res.stderr)
    codex = json.loads((b / ".codex/hooks.json").read_text())["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    res = run_hook(codex, {**base, "hook_event_name": "SessionStart", "source": "startup"}, b, env)
    assert "Current code is ground truth" in json.loads(res.stdout)["hookSpecificOutput"]["additionalContext"]
    cursor = json.loads((b / ".cursor/hooks.json").read_text())["hooks"]["sessionStart"][0]["command"]
    res = run_hook(cursor, {"conversation_id": "c-1", "workspace_roots": [str(b)]}, b / ".cursor", env)
    assert "Current code is ground truth" in json.loads(res.stdout)["additional_context"]

    # The committed MCP servers start and answer: Claude Code and Codex start them in the project,
    # Cursor anywhere with ${workspaceFolder} interpolated.
    elsewhere = tmp_path / "bob" / "elsewhere"
    elsewhere.mkdir()
    claude_entry = json.loads((b / ".mcp.json").read_text())["mcpServers"]["memstore"]
    codex_entry = tomllib.loads((b / ".codex/config.toml").read_text())["mcp_servers"]["memstore"]
    cursor_entry = json.loads((b / ".cursor/mcp.json").read_text())["mcpServers"]["memstore"]
    cursor_env = {k: v.replace("${workspaceFolder}", str(b)) for k, v in cursor_entry["env"].items()}
    for entry, cwd, server_env in ((claude_entry, b, env), (codex_entry, b / "src", env),
                                   (cursor_entry, elsewhere, {**env, **cursor_env})):
        answer = anyio.run(mcp_read, entry, cwd, server_env)
        assert answer["ok"] is True and "results" in answer, answer

    # Alice pulls nothing new and integrates again: her tracked files do not move either.
    for agent in AGENTS:
        assert cli("integrate", agent, cwd=a)[0] == 0
    assert git(a, "status", "--porcelain") == ""


def test_the_launcher_falls_back_to_memstore_on_the_path_then_python3(tmp_path: Path) -> None:
    repo = make_git_repo(tmp_path / "repo")  # no integrate here: no memstore.python recorded
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "memstore").write_text("#!/bin/sh\necho \"memstore on PATH: $*\"\n")
    (bin_dir / "memstore").chmod(0o755)
    (bin_dir / "python3").write_text("#!/bin/sh\necho \"python3: $*\"\n")
    (bin_dir / "python3").chmod(0o755)
    base = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    command = shlex.join(portable_argv("context", "--limit", "3"))
    res = subprocess.run(["sh", "-c", command], cwd=repo, env=base, capture_output=True, text=True, check=False)
    assert res.stdout == "memstore on PATH: context --limit 3\n"
    (bin_dir / "memstore").unlink()
    res = subprocess.run(["sh", "-c", command], cwd=repo, env=base, capture_output=True, text=True, check=False)
    assert res.stdout == "python3: -P -m memstore context --limit 3\n"
    git(repo, "config", "memstore.python", str(bin_dir / "python3"))  # the recorded Python comes first
    (bin_dir / "memstore").write_text("#!/bin/sh\necho wrong\n")
    (bin_dir / "memstore").chmod(0o755)
    res = subprocess.run(["sh", "-c", command], cwd=repo, env=base, capture_output=True, text=True, check=False)
    assert res.stdout == "python3: -P -m memstore context --limit 3\n"


# The JSON each agent documents for its hook events (Claude Code's and Codex's hooks reference,
# Cursor's hooks docs); an event not named here gets the fields every event carries.
def hook_payload(agent: str, event: str, repo: Path) -> dict:
    if agent == "cursor":
        return {"conversation_id": "c-1", "generation_id": "g-1", "hook_event_name": event,
                "workspace_roots": [str(repo)], "tool_name": "Read",
                "tool_input": {"file_path": str(repo / "src/app.py")}, "tool_output": "", "status": "completed",
                "loop_count": 0}
    base = {"session_id": "s-1", "transcript_path": "/dev/null", "cwd": str(repo), "hook_event_name": event}
    extra = {"SessionStart": {"source": "startup"}, "UserPromptSubmit": {"prompt": "fix the app"},
             "PreCompact": {"trigger": "manual", "custom_instructions": ""}, "Stop": {"stop_hook_active": False}}
    return {**base, "tool_name": "Read", "tool_input": {"file_path": str(repo / "src/app.py")}, **extra.get(event, {})}


def committed_hooks(repo: Path) -> list[tuple[str, str, str]]:
    """(agent, event, command) for every hook command the clone's committed files hold."""
    out = []
    for agent, rel in (("claude", ".claude/settings.json"), ("codex", ".codex/hooks.json"),
                       ("cursor", ".cursor/hooks.json")):
        for event, entries in json.loads((repo / rel).read_text())["hooks"].items():
            for entry in entries:
                out += [(agent, event, h["command"]) for h in entry.get("hooks", [entry])]
    return out


def test_committed_hooks_exit_0_for_a_teammate_without_memstore_and_say_once_how_to_install_it(
        tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    """A teammate's clone gets the committed hooks before memstore: no memstore.python in the clone,
    no memstore on the PATH, a python3 (a fresh venv's, first on the PATH) without the module. Every
    hook exits 0 (an agent shows a hook error for any other code, on every prompt and file tool
    call); session-start alone prints one line, in its agent's format, saying how to install it."""
    a = make_git_repo(tmp_path / "alice" / "app")
    for agent in ("claude", "codex", "cursor"):
        code, _, err = cli("integrate", agent, cwd=a)
        assert code == 0, err
    git(a, "add", "-A")
    git(a, "commit", "-q", "-m", "memstore for our agents")
    b = tmp_path / "bob" / "app"
    git(tmp_path, "clone", "-q", str(a), str(b))
    bare = tmp_path / "bob" / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(bare)], check=True, capture_output=True)
    env = {**machine_env(tmp_path / "bob" / "home"), "PATH": f"{bare / 'bin'}:/usr/bin:/bin"}
    probe = subprocess.run(["sh", "-c", "command -v memstore; python3 -P -c 'import memstore'"], cwd=b, env=env,
                           capture_output=True, text=True, check=False)
    assert probe.stdout == "" and "No module named 'memstore'" in probe.stderr, probe  # Bob's machine as said

    hooks = committed_hooks(b)
    assert {agent for agent, _, _ in hooks} == {"claude", "codex", "cursor"} and len(hooks) >= 10
    starts = 0
    for agent, event, command in hooks:
        res = run_hook(command, hook_payload(agent, event, b), b, env)
        assert res.returncode == 0, (agent, event, res.stderr)
        if "--hook session-start" not in command:
            assert res.stdout == "", (agent, event, res.stdout)
            continue
        starts += 1
        (line,) = res.stdout.splitlines()
        if agent == "claude":
            said = line  # SessionStart's stdout is the context
        elif agent == "codex":
            said = json.loads(line)["hookSpecificOutput"]["additionalContext"]
        else:
            said = json.loads(line)["additional_context"]
        assert "not installed" in said and "pipx install memstore-git" in said, said
        assert f"memstore integrate {agent}" in said
    assert starts == 3
    # The MCP server is no hook: without memstore it still fails, for the agent to show.
    entry = json.loads((b / ".mcp.json").read_text())["mcpServers"]["memstore"]
    res = subprocess.run([entry["command"], *entry["args"]], cwd=b, env=env, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, check=False, timeout=60)
    assert res.returncode != 0 and "No module named memstore" in res.stderr, res


def test_files_in_the_checkout_never_run_as_memstore(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    """The launcher runs inside a checkout whose files a pull request may have written: a
    ``memstore/`` folder there must not shadow the installed package, a bare repository committed
    inside it must not name the Python to run, and a committed ``.mcp.json`` must not move the
    launcher into a folder of its choosing."""
    repo = make_git_repo(tmp_path / "repo")
    assert cli("integrate", "claude", cwd=repo)[0] == 0
    (repo / "memstore").mkdir()
    (repo / "memstore" / "__init__.py").write_text("")
    (repo / "memstore" / "__main__.py").write_text("print('PWNED by the checkout')\n")
    command = shlex.join(portable_argv("--version"))
    res = subprocess.run(["sh", "-c", command], cwd=repo, capture_output=True, text=True, check=False)
    assert res.returncode == 0 and res.stdout.startswith("memstore ") and "PWNED" not in res.stdout, res
    # A bare repository committed as evil/, whose config names ./x as memstore.python.
    evil = repo / "evil"
    subprocess.run(["git", "init", "-q", "--bare", str(evil)], check=True)
    (evil / "x").write_text("#!/bin/sh\necho PWNED by a committed bare repo\n")
    (evil / "x").chmod(0o755)
    subprocess.run(["git", "config", "--file", str(evil / "config"), "memstore.python", "./x"], check=True)
    res = subprocess.run(["sh", "-c", command], cwd=repo, env={**os.environ, "MEMSTORE_REPO": "evil"},
                         capture_output=True, text=True, check=False)
    assert "PWNED" not in res.stdout, res
    for name in ("__main__.py", "__init__.py"):  # the test's own `python -m memstore` runs from here too
        (repo / "memstore" / name).unlink()
    (repo / "memstore").rmdir()
    mcp = json.loads((repo / ".mcp.json").read_text())
    mcp["mcpServers"]["memstore"]["env"] = {"MEMSTORE_REPO": "evil", "MEMSTORE_HOME": "evil",
                                            "MEMSTORE_AUTHOR": "ana"}
    (repo / ".mcp.json").write_text(json.dumps(mcp))
    assert cli("integrate", "claude", cwd=repo)[0] == 0
    assert json.loads((repo / ".mcp.json").read_text())["mcpServers"]["memstore"]["env"] == {"MEMSTORE_AUTHOR": "ana"}


# -- the per-prompt, per-file and compaction hooks ------------------------------------------------------
@pytest.mark.parametrize("agent", ["claude", "codex", "cursor"])
@pytest.mark.parametrize("event", ["prompt", "file", "compact"])
def test_prompt_file_and_compact_hooks_are_accepted_for_every_agent(
        repo: Path, cli: Callable[..., CliResult], agent: str, event: str) -> None:
    payload = {"session_id": "s", "cwd": str(repo), "prompt": "hello",
               "tool_name": "Read", "tool_input": {"file_path": str(repo / "src/app.py")}}
    code, _, err = cli("integrate", agent, "--hook", event, cwd=repo, input=json.dumps(payload))
    assert code == 0 and "invalid choice" not in err and "skipped" not in err, err


def test_claude_after_a_compaction_the_next_prompt_carries_the_context_once(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    assert cli("integrate", "claude", cwd=repo)[0] == 0
    base = {"session_id": "sess-c", "cwd": str(repo), "transcript_path": "/dev/null"}
    env = dict(os.environ)
    res = run_hook(claude_command(repo, "SessionStart"), {**base, "source": "startup"}, repo, env)
    assert "Current code is ground truth" in res.stdout
    prompt = {**base, "hook_event_name": "UserPromptSubmit", "prompt": "go on"}
    assert run_hook(claude_command(repo, "UserPromptSubmit"), prompt, repo, env).stdout == ""  # nothing to redo
    res = run_hook(claude_command(repo, "PreCompact"), {**base, "trigger": "auto"}, repo, env)
    assert res.returncode == 0 and res.stdout == ""
    res = run_hook(claude_command(repo, "UserPromptSubmit"), prompt, repo, env)
    assert res.returncode == 0 and "Current code is ground truth" in res.stdout  # stdout is context
    assert run_hook(claude_command(repo, "UserPromptSubmit"), prompt, repo, env).stdout == ""  # once
    other = run_hook(claude_command(repo, "UserPromptSubmit"), {**prompt, "session_id": "sess-d"}, repo, env)
    assert other.stdout == ""  # another session was not compacted


def test_cursor_stop_asks_with_a_followup_message_once_after_work(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    assert cli("integrate", "cursor", cwd=repo)[0] == 0
    stop = json.loads((repo / ".cursor/hooks.json").read_text())["hooks"]["stop"][0]["command"]
    payload = {"conversation_id": "conv-1", "workspace_roots": [str(repo)], "status": "completed"}
    env = dict(os.environ)
    assert run_hook(stop, payload, repo, env).stdout == ""  # first stop: counting starts
    (repo / "src" / "app.py").write_text("def main():\n    return 0\n")
    answer = json.loads(run_hook(stop, payload, repo, env).stdout)
    assert set(answer) == {"followup_message"} and "memory_reflect" in answer["followup_message"]
    assert run_hook(stop, payload, repo, env).stdout == ""


def test_cursor_post_tool_use_adds_the_memories_citing_the_file_and_remove_takes_it_out(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    from conftest import write_req

    from memstore.store.workspace import open_workspace
    from memstore.verbs import api

    assert cli("integrate", "cursor", cwd=repo)[0] == 0
    hooks_ = json.loads((repo / ".cursor/hooks.json").read_text())["hooks"]
    command = hooks_["postToolUse"][0]["command"]
    mid = api.write(open_workspace(cwd=repo), write_req(
        "fact", "Caching main()'s answer in src/app.py broke the reload path.",
        evidence=["file:src/app.py#L1-L2"]))["id"]
    base = {"conversation_id": "conv-f", "generation_id": "g-1", "hook_event_name": "postToolUse",
            "workspace_roots": [str(repo)], "tool_output": "{}"}
    env = {**os.environ, "MEMSTORE_HOOK_BUDGET": "300"}
    res = run_hook(command, {**base, "tool_name": "Read", "tool_input": {"file_path": str(repo / "src/app.py")}},
                   repo, env)
    answer = json.loads(res.stdout)
    assert res.returncode == 0 and set(answer) == {"additional_context"} and mid in answer["additional_context"]
    for tool, tool_input in (("Read", {"file_path": str(repo / "README.md")}), ("Shell", {"command": "ls"})):
        res = run_hook(command, {**base, "conversation_id": f"conv-{tool}", "tool_name": tool,
                                 "tool_input": tool_input}, repo, env)
        assert (res.returncode, res.stdout) == (0, "")  # a file nobody cites, a tool with no file: nothing
    assert cli("integrate", "cursor", "--remove", cwd=repo)[0] == 0
    assert not (repo / ".cursor/hooks.json").exists()


USER_CURSOR_HOOKS = '{"version": 1, "hooks": {"afterFileEdit": [{"command": "./format.sh"}],\n' \
                    ' "stop": [{"command": "./audit.sh"}]}}\n'


def test_cursor_hooks_merge_into_the_users_file_and_remove_restores_it(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    (repo / ".cursor").mkdir()
    (repo / ".cursor/hooks.json").write_text(USER_CURSOR_HOOKS)
    assert cli("integrate", "cursor", cwd=repo)[0] == 0
    data = json.loads((repo / ".cursor/hooks.json").read_text())
    assert data["version"] == 1 and data["hooks"]["afterFileEdit"] == [{"command": "./format.sh"}]
    assert data["hooks"]["stop"][0] == {"command": "./audit.sh"} and len(data["hooks"]["stop"]) == 2
    code, _, _ = cli("integrate", "cursor", "--remove", cwd=repo)
    assert code == 0 and (repo / ".cursor/hooks.json").read_text() == USER_CURSOR_HOOKS


def test_a_settings_file_from_an_older_memstore_gets_the_portable_hooks_without_duplicates(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    alice = "/home/alice/.venv/bin/python -m memstore integrate claude --hook "
    old = {"hooks": {
        "SessionStart": [{"matcher": "startup|clear|compact",
                          "hooks": [{"type": "command", "command": alice + "session-start"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": alice + "stop"}]}]}}
    (repo / ".claude").mkdir()
    (repo / ".claude/settings.json").write_text(json.dumps(old))
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {"memstore": {
        "command": "/home/alice/.venv/bin/python", "args": ["-m", "memstore", "mcp", "--repo", "/home/alice/app"]}}}))
    assert cli("integrate", "claude", cwd=repo)[0] == 0
    text = (repo / ".claude/settings.json").read_text() + (repo / ".mcp.json").read_text()
    assert "/home/alice" not in text
    hooks = json.loads((repo / ".claude/settings.json").read_text())["hooks"]
    assert all(len(groups) == 1 for groups in hooks.values())  # replaced, not added beside
    portable = shlex.join(portable_argv("integrate", "claude", "--hook", "stop"))
    assert hooks["Stop"] == [{"hooks": [{"type": "command", "command": portable}]}]
