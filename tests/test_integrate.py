"""`memstore integrate claude|codex|cursor|generic` through the real CLI in real git repos: the files
each agent reads, parsed back against the documented shapes; merged into the user's files and
given back byte for byte by --remove; idempotent; the git hooks run by a real `git commit`; the
Claude Code hooks run the way Claude Code runs them; refusals that write nothing."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import anyio
import mcp_types as types
import pytest
import yaml
from conftest import REPO_ROOT, CliResult, git, make_git_repo
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from memstore.git import hooks
from memstore.verbs.guide import portable_argv

PY = sys.executable


def tree(root: Path) -> dict[str, bytes]:
    """Every file of the work tree (not .git/, not the disposable .index/), with its bytes."""
    out = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if rel.parts[0] == ".git" or ".index" in rel.parts or p.is_dir():
            continue
        out[rel.as_posix()] = p.read_bytes() if not p.is_symlink() else b"->" + os.readlink(p).encode()
    return out


def dirs(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir() and ".git" not in p.parts}


def states(ans: dict) -> dict[str, str]:
    return {f["path"]: f["state"] for f in ans["files"]}


def manifest(repo: Path) -> Path:
    return repo / ".git" / "memstore" / "integrate.json"


def mcp_entry() -> dict:
    """The committed MCP entry: the launcher (no path of this machine), the repo from the server's cwd."""
    argv = portable_argv("mcp")
    return {"command": argv[0], "args": argv[1:]}


def hook(agent: str, event: str) -> str:
    """A committed hook command: `sh -c LAUNCHER memstore integrate <agent> --hook <event>`."""
    return shlex.join(portable_argv("integrate", agent, "--hook", event))


def recorded_python(repo: Path) -> str:
    return subprocess.run(["git", "config", "--get", "memstore.python"], cwd=repo, capture_output=True,
                          text=True, check=False).stdout.strip()


def commit(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "commit", "-q", *args], cwd=repo, capture_output=True, text=True, check=False)


# -- each agent's files, in the documented shapes -------------------------------------------------------
def test_claude_writes_hooks_mcp_and_guide_and_a_second_run_changes_nothing(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    code, ans, err = cli("integrate", "claude", cwd=repo / "src")  # from a subfolder: the repo root's files
    assert code == 0, err
    assert states(ans) == {".claude/settings.json": "created", ".mcp.json": "created", "CLAUDE.md": "created"}
    settings = json.loads((repo / ".claude/settings.json").read_text())
    # {"hooks": {event: [{"matcher"?, "hooks": [{"type": "command", "command": ...}]}]}}
    def command(event: str) -> list[dict]:
        return [{"type": "command", "command": hook("claude", event)}]

    # SessionStart without `compact` (reported not injected): PreCompact marks, the next prompt re-injects
    assert settings["hooks"] == {
        "SessionStart": [{"matcher": "startup|clear", "hooks": command("session-start")}],
        "UserPromptSubmit": [{"hooks": command("prompt")}],
        "PreToolUse": [{"matcher": "Read|Edit|Write|MultiEdit", "hooks": command("file")}],
        # every tool call's outcome, succeeded or failed, goes to the session's episode
        "PostToolUse": [{"hooks": command("tool")}],
        "PostToolUseFailure": [{"hooks": command("tool")}],
        "PreCompact": [{"hooks": command("compact")}],
        "Stop": [{"hooks": command("stop")}],
        "SessionEnd": [{"hooks": command("end")}],  # closes the session's episode
    }
    # {"mcpServers": {name: {"command", "args"}}}; this machine's Python is in the clone's git config only
    servers = json.loads((repo / ".mcp.json").read_text())["mcpServers"]
    assert servers == {"memstore": mcp_entry()}
    assert recorded_python(repo) == PY
    for rel in (".claude/settings.json", ".mcp.json", "CLAUDE.md"):
        text = (repo / rel).read_text()
        assert PY not in text and str(repo) not in text and str(REPO_ROOT) not in text, rel
    guide = (repo / "CLAUDE.md").read_text()
    assert guide.startswith("<!-- memstore:begin") and "## Long-term memory (memstore)" in guide
    assert guide.rstrip().endswith("<!-- memstore:end -->")
    assert ans["git_hooks"]["hooks"] == dict.fromkeys(("pre-commit", "post-commit", "post-merge", "post-checkout"),
                                                      "installed")
    assert hooks.status(repo)["installed"]

    before = tree(repo)
    code, again, _ = cli("integrate", "claude", cwd=repo)
    assert code == 0 and set(states(again).values()) == {"unchanged"}
    assert set(again["git_hooks"]["hooks"].values()) == {"unchanged"}
    assert tree(repo) == before

    code, gone, _ = cli("integrate", "claude", "--remove", cwd=repo)
    assert code == 0 and states(gone) == dict.fromkeys((".claude/settings.json", ".mcp.json", "CLAUDE.md"), "removed")
    assert not (repo / ".claude").exists() and not (repo / ".mcp.json").exists()
    assert not hooks.status(repo)["installed"] and not manifest(repo).exists() and recorded_python(repo) == ""
    code, twice, _ = cli("integrate", "claude", "--remove", cwd=repo)
    assert code == 0 and set(states(twice).values()) == {"absent"}


def test_codex_writes_a_toml_table_and_agents_md(repo: Path, cli: Callable[..., CliResult]) -> None:
    code, ans, err = cli("integrate", "codex", cwd=repo)
    assert code == 0, err
    assert states(ans) == {".codex/config.toml": "created", ".codex/hooks.json": "created", "AGENTS.md": "created"}
    config = tomllib.loads((repo / ".codex/config.toml").read_text())
    assert config == {"mcp_servers": {"memstore": mcp_entry()}}  # [mcp_servers.<name>] command, args
    # .codex/hooks.json: Claude Code's shape; SessionStart runs again after a compaction (source `compact`)
    assert json.loads((repo / ".codex/hooks.json").read_text()) == {"hooks": {
        "SessionStart": [{"matcher": "startup|clear|compact",
                          "hooks": [{"type": "command", "command": hook("codex", "session-start")}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": hook("codex", "prompt")}]}],
        "PreToolUse": [{"matcher": "apply_patch|Edit|Write",
                        "hooks": [{"type": "command", "command": hook("codex", "file")}]}],
        "PostToolUse": [{"hooks": [{"type": "command", "command": hook("codex", "tool")}]}],
        "Stop": [{"hooks": [{"type": "command", "command": hook("codex", "stop")}]}]}}
    assert "## Long-term memory (memstore)" in (repo / "AGENTS.md").read_text()
    code, again, _ = cli("integrate", "codex", cwd=repo)
    assert set(states(again).values()) == {"unchanged"}
    code, gone, _ = cli("integrate", "codex", "--remove", cwd=repo)
    assert set(states(gone).values()) == {"removed"} and not (repo / ".codex").exists()


def test_cursor_writes_mcp_json_and_a_rule_with_frontmatter(repo: Path, cli: Callable[..., CliResult]) -> None:
    before, before_dirs = tree(repo), dirs(repo)
    code, ans, err = cli("integrate", "cursor", cwd=repo)
    assert code == 0, err
    assert states(ans) == {".cursor/mcp.json": "created", ".cursor/hooks.json": "created",
                           ".cursor/rules/memstore.mdc": "created"}
    assert json.loads((repo / ".cursor/mcp.json").read_text()) == {"mcpServers": {"memstore": {
        **mcp_entry(), "env": {"MEMSTORE_REPO": "${workspaceFolder}"}}}}  # Cursor interpolates it
    assert json.loads((repo / ".cursor/hooks.json").read_text()) == {"version": 1, "hooks": {
        "sessionStart": [{"command": hook("cursor", "session-start")}],
        "postToolUse": [{"command": hook("cursor", "file")}],
        "postToolUseFailure": [{"command": hook("cursor", "tool")}],
        "stop": [{"command": hook("cursor", "stop")}],
        "sessionEnd": [{"command": hook("cursor", "end")}]}}
    rule = (repo / ".cursor/rules/memstore.mdc").read_text()
    head, sep, body = rule.removeprefix("---\n").partition("\n---\n")
    assert rule.startswith("---\n") and sep
    front = yaml.safe_load(head)  # description (string), globs, alwaysApply (a boolean, not "true")
    assert set(front) == {"description", "globs", "alwaysApply"}
    assert isinstance(front["description"], str) and front["description"] and front["alwaysApply"] is True
    assert "## Long-term memory (memstore)" in body
    code, gone, _ = cli("integrate", "cursor", "--remove", cwd=repo)
    assert set(states(gone).values()) == {"removed"}
    assert tree(repo) == before and dirs(repo) == before_dirs  # the folders it made are gone too


def test_generic_and_claude_share_mcp_json_until_the_last_one_goes(repo: Path, cli: Callable[..., CliResult]) -> None:
    before = tree(repo)
    assert cli("integrate", "claude", cwd=repo)[0] == 0
    code, ans, _ = cli("integrate", "generic", cwd=repo)
    assert states(ans) == {"AGENTS.md": "created", ".mcp.json": "unchanged"}
    code, ans, _ = cli("integrate", "generic", "--remove", cwd=repo)
    assert states(ans) == {"AGENTS.md": "removed", ".mcp.json": "kept (also used by claude)"}
    assert ans["git_hooks"] == {"state": "kept"} and hooks.status(repo)["installed"]
    assert json.loads((repo / ".mcp.json").read_text())["mcpServers"]["memstore"] == mcp_entry()
    code, ans, _ = cli("integrate", "claude", "--remove", cwd=repo)
    assert code == 0 and states(ans)[".mcp.json"] == "removed" and not hooks.status(repo)["installed"]
    assert tree(repo) == before


def test_each_configured_mcp_server_starts_and_answers_in_the_project(
        repo: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    config = repo / ".memory" / "config.yaml"  # a setting only this repo's store has: the server found it
    config.write_text(config.read_text().replace("write_mode: review", "write_mode: autonomous", 1))
    for agent in ("claude", "codex", "cursor"):
        assert cli("integrate", agent, cwd=repo)[0] == 0
    entries = {
        ".mcp.json": json.loads((repo / ".mcp.json").read_text())["mcpServers"]["memstore"],
        ".cursor/mcp.json": json.loads((repo / ".cursor/mcp.json").read_text())["mcpServers"]["memstore"],
        ".codex/config.toml": tomllib.loads((repo / ".codex/config.toml").read_text())["mcp_servers"]["memstore"],
    }
    elsewhere = tmp_path / "elsewhere"  # Cursor may start the server in any folder: ${workspaceFolder} names it
    elsewhere.mkdir()

    async def check(entry: dict) -> tuple[set[str], str]:
        env = {k: v.replace("${workspaceFolder}", str(repo)) for k, v in entry.get("env", {}).items()}
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env={**os.environ, **env},
                                       cwd=str(elsewhere if env else repo / "src"))  # Claude Code, Codex: the project
        with anyio.fail_after(120):
            async with stdio_client(params) as streams, ClientSession(*streams) as session:
                await session.initialize()
                tools = {t.name for t in (await session.list_tools()).tools}
                result = await session.call_tool("memory_guide", {})
                assert not result.is_error and isinstance(result.content[0], types.TextContent)
                return tools, result.content[0].text

    for rel, entry in entries.items():
        tools, guide = anyio.run(check, entry)
        assert {"memory_read", "memory_write", "memory_context", "memory_reflect"} <= tools, rel
        assert "Long-term memory (memstore)" in guide and "**autonomous** mode" in guide, rel


# -- merged into the user's files, and given back ------------------------------------------------------------
USER_SETTINGS = """{
    "permissions": {"allow": ["Bash(npm test)"]},
    "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./lint.sh"}]}],
              "SessionStart": [{"hooks": [{"type": "command", "command": "echo hello"}]}]}
}"""
USER_MCP = '{"mcpServers": {"github": {"command": "npx", "args": ["-y", "gh-mcp"]},\n' \
           ' "memstore": {"command": "memstore", "args": ["mcp"],\n' \
           '              "env": {"MEMSTORE_AUTHOR": "claude-code", "PYTHONPATH": "./evil"}}}}'
USER_TOML = """# my codex settings
model = "o4"   # keep this comment

[mcp_servers.docs]
command = "docs-mcp"
args = ["--port", "0"]
"""


def test_merge_keeps_the_users_content_and_remove_restores_it_byte_for_byte(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    (repo / ".claude").mkdir()
    (repo / ".claude/settings.json").write_text(USER_SETTINGS)
    (repo / ".mcp.json").write_text(USER_MCP)
    (repo / "CLAUDE.md").write_text("# House rules\n\nNo tabs.")  # no final newline
    (repo / ".codex").mkdir()
    (repo / ".codex/config.toml").write_text(USER_TOML)
    (repo / "AGENTS.md").write_text("# Agents\n")
    before = tree(repo)

    code, ans, err = cli("integrate", "claude", cwd=repo)
    assert code == 0, err
    assert states(ans) == dict.fromkeys((".claude/settings.json", ".mcp.json", "CLAUDE.md"), "updated")
    settings = json.loads((repo / ".claude/settings.json").read_text())
    assert settings["permissions"] == {"allow": ["Bash(npm test)"]}
    pre = settings["hooks"]["PreToolUse"]  # theirs first and as it was, ours after it
    assert pre[0] == json.loads(USER_SETTINGS)["hooks"]["PreToolUse"][0] and len(pre) == 2
    start = settings["hooks"]["SessionStart"]
    assert start[0] == {"hooks": [{"type": "command", "command": "echo hello"}]} and len(start) == 2
    servers = json.loads((repo / ".mcp.json").read_text())["mcpServers"]
    assert servers["github"] == {"command": "npx", "args": ["-y", "gh-mcp"]}
    # the bare `memstore` entry is replaced by the launcher's; its MEMSTORE_* env stays, nothing else
    # (a PYTHONPATH from someone's commit would run their code under our command)
    assert servers["memstore"] == {**mcp_entry(), "env": {"MEMSTORE_AUTHOR": "claude-code"}}
    assert (repo / "CLAUDE.md").read_text().startswith("# House rules\n\nNo tabs.\n\n<!-- memstore:begin")

    code, ans, err = cli("integrate", "codex", cwd=repo)
    assert code == 0, err
    text = (repo / ".codex/config.toml").read_text()
    assert text.startswith(USER_TOML)  # appended: every byte of the user's file stays
    config = tomllib.loads(text)
    assert config["model"] == "o4" and config["mcp_servers"]["docs"] == {"command": "docs-mcp", "args": ["--port", "0"]}
    assert config["mcp_servers"]["memstore"] == mcp_entry()
    assert (repo / "AGENTS.md").read_text().startswith("# Agents\n\n<!-- memstore:begin")

    after = tree(repo)
    assert cli("integrate", "claude", cwd=repo)[1]["files"] and tree(repo) == after  # idempotent
    assert set(states(cli("integrate", "codex", cwd=repo)[1]).values()) == {"unchanged"}

    code, ans, _ = cli("integrate", "claude", "--remove", cwd=repo)
    assert set(states(ans).values()) == {"restored"}
    code, ans, _ = cli("integrate", "codex", "--remove", cwd=repo)
    assert states(ans) == {".codex/config.toml": "restored", ".codex/hooks.json": "removed", "AGENTS.md": "restored"}
    assert tree(repo) == before


def test_remove_after_the_user_edited_takes_out_only_ours(repo: Path, cli: Callable[..., CliResult]) -> None:
    (repo / ".mcp.json").write_text(USER_MCP)
    assert cli("integrate", "generic", cwd=repo)[0] == 0
    data = json.loads((repo / ".mcp.json").read_text())
    data["mcpServers"]["later"] = {"command": "added-after"}
    (repo / ".mcp.json").write_text(json.dumps(data))
    with (repo / "AGENTS.md").open("a") as fh:
        fh.write("\nA note the user added below the section.\n")
    code, ans, _ = cli("integrate", "generic", "--remove", cwd=repo)
    assert code == 0 and states(ans) == {"AGENTS.md": "restored", ".mcp.json": "restored"}
    assert json.loads((repo / ".mcp.json").read_text()) == {"mcpServers": {
        "github": {"command": "npx", "args": ["-y", "gh-mcp"]}, "later": {"command": "added-after"}}}
    assert (repo / "AGENTS.md").read_text() == "A note the user added below the section.\n"


# -- the git hooks, and a fresh clone ------------------------------------------------------------------------------
def test_one_command_in_a_fresh_clone_installs_the_hooks_and_a_commit_runs_them(
        tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    origin = make_git_repo(tmp_path / "origin")
    code, ans, err = cli("integrate", "claude", cwd=origin)  # no store yet: integrate creates it
    assert code == 0, err and ans["store"]["state"] == "created"
    git(origin, "add", "-A")
    res = commit(origin, "-m", "memstore for claude")
    assert res.returncode == 0, res.stderr

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    assert not hooks.status(clone)["installed"]
    code, ans, err = cli("integrate", "claude", cwd=clone)
    assert code == 0, err
    # the committed files name no checkout: all is as committed; this clone's Python goes in its git config
    assert states(ans) == {".claude/settings.json": "unchanged", ".mcp.json": "unchanged", "CLAUDE.md": "unchanged"}
    assert hooks.status(clone)["installed"] and recorded_python(clone) == PY
    assert git(clone, "status", "--porcelain") == ""

    code, started, err = cli("episode", "start", "--agent", "claude-code", "--task", "fix the app", cwd=clone)
    assert code == 0, err
    (clone / "src" / "app.py").write_text("def main():\n    return 43\n")
    git(clone, "add", "src/app.py")
    res = commit(clone, "-m", "return 43")  # the real hooks run: pre-commit checks, post-commit logs
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in (clone / started["path"]).read_text().splitlines()]
    assert rows[-1]["source"] == "git" and rows[-1]["git"]["message"] == "return 43"

    # --remove in the clone takes our entries out of the committed files (it never wrote them here first)
    code, ans, _ = cli("integrate", "claude", "--remove", cwd=clone)
    assert states(ans) == dict.fromkeys((".claude/settings.json", ".mcp.json", "CLAUDE.md"), "removed")
    assert not hooks.status(clone)["installed"]


def test_hooks_path_set_is_refused_before_anything_is_written(repo: Path, cli: Callable[..., CliResult]) -> None:
    git(repo, "config", "core.hooksPath", ".githooks")
    before = tree(repo)
    code, ans, _ = cli("integrate", "claude", cwd=repo)
    assert code == 4 and ans["error"]["code"] == "hooks_path_set"
    assert tree(repo) == before and not manifest(repo).exists()
    code, ans, err = cli("integrate", "claude", "--hooks-path-ok", cwd=repo)
    assert code == 0, err and (repo / ".githooks" / "pre-commit").exists()


# -- the Claude Code hooks, run as Claude Code runs them --------------------------------------------------------
def run_hook(repo: Path, event: str, payload: dict) -> subprocess.CompletedProcess[str]:
    """The command from .claude/settings.json, through a shell, with the hook's JSON on stdin."""
    settings = json.loads((repo / ".claude/settings.json").read_text())
    command = settings["hooks"][event][-1]["hooks"][0]["command"]
    return subprocess.run(["sh", "-c", command], input=json.dumps(payload), capture_output=True, text=True,
                          cwd=repo, check=False)


def test_claude_session_start_injects_context_and_stop_asks_once_after_work(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    assert cli("integrate", "claude", cwd=repo)[0] == 0
    git(repo, "add", "-A")
    assert commit(repo, "-m", "integrated").returncode == 0
    base = {"session_id": "sess-1", "cwd": str(repo), "transcript_path": "/dev/null"}
    res = run_hook(repo, "SessionStart", {**base, "hook_event_name": "SessionStart", "source": "startup"})
    assert res.returncode == 0 and "Current code is ground truth" in res.stdout  # stdout becomes context
    assert "untrusted data" in res.stdout

    stop = {**base, "hook_event_name": "Stop", "stop_hook_active": False}
    res = run_hook(repo, "Stop", stop)
    assert res.returncode == 0 and res.stdout == ""  # nothing changed yet: nothing to reflect on
    (repo / "src" / "app.py").write_text("def main():\n    return 0\n")
    res = run_hook(repo, "Stop", stop)
    answer = json.loads(res.stdout)
    assert res.returncode == 0 and answer["decision"] == "block"
    assert f"{PY} -P -m memstore reflect --session sess-1" in answer["reason"] and "memory_reflect" in answer["reason"]
    assert run_hook(repo, "Stop", {**stop, "stop_hook_active": True}).stdout == ""  # the turn it caused
    assert run_hook(repo, "Stop", stop).stdout == ""  # once per session
    other = run_hook(repo, "Stop", {**stop, "session_id": "sess-2"})
    assert other.stdout == ""  # a session that began before: counted from its first stop

    bad = subprocess.run(["sh", "-c", f"{PY} -m memstore integrate claude --hook stop"], input="not json",
                         capture_output=True, text=True, cwd=repo, check=False)
    assert bad.returncode == 0 and bad.stdout == "" and "stop hook skipped" in bad.stderr  # fails open


# -- refusals: a clear error, nothing written ------------------------------------------------------------------------
@pytest.mark.parametrize(("agent", "rel", "content", "code"), [
    ("claude", ".mcp.json", '{"mcpServers": {"a": 1},', "bad_agent_file"),
    ("claude", ".claude/settings.json", '{"hooks": []}', "bad_agent_file"),
    ("cursor", ".cursor/mcp.json", '["not", "an", "object"]', "bad_agent_file"),
    ("codex", ".codex/config.toml", 'model = "o4\n', "bad_agent_file"),
    ("codex", ".codex/hooks.json", '{"hooks": {"Stop": {}}}', "bad_agent_file"),
    ("cursor", ".cursor/hooks.json", '{"version": 1, "hooks": []}', "bad_agent_file"),
    ("codex", ".codex/config.toml", '[mcp_servers.memstore]\ncommand = "mine"\n', "conflict"),
    ("codex", ".codex/config.toml", 'mcp_servers = { other = { command = "x" } }\n', "conflict"),
    ("generic", "AGENTS.md", "<!-- memstore:begin -->\nno end marker\n", "bad_markers"),
    ("generic", "AGENTS.md", "caf\udce9 latin-1\n", "bad_agent_file"),
])
def test_a_file_that_does_not_parse_is_refused_and_nothing_is_written(
        repo: Path, cli: Callable[..., CliResult], agent: str, rel: str, content: str, code: str) -> None:
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_bytes(content.encode("utf-8", "surrogateescape"))  # \udce9: a raw 0xE9
    before = tree(repo)
    status, ans, err = cli("integrate", agent, cwd=repo)
    assert status in (2, 4) and ans["error"]["code"] == code and rel in ans["error"]["message"]
    assert f"memstore: {code}:" in err
    assert tree(repo) == before and not hooks.status(repo)["installed"] and not manifest(repo).exists()


@pytest.mark.parametrize("link", [".mcp.json", ".claude"])
def test_a_symlinked_target_is_refused_and_its_target_untouched(
        repo: Path, tmp_path: Path, cli: Callable[..., CliResult], link: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "settings.json").write_text('{"mine": true}')
    (outside / ".mcp.json").write_text('{"mine": true}')
    (repo / link).symlink_to(outside / ".mcp.json" if link == ".mcp.json" else outside)
    before, before_outside = tree(repo), tree(outside)
    code, ans, _ = cli("integrate", "claude", cwd=repo)
    assert code == 2 and ans["error"]["code"] == "not_regular" and link in ans["error"]["message"]
    assert tree(repo) == before and tree(outside) == before_outside
    assert not hooks.status(repo)["installed"] and not manifest(repo).exists()


def test_outside_a_git_repo_is_refused(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    code, ans, _ = cli("integrate", "generic", cwd=plain)
    assert code == 2 and ans["error"]["code"] == "not_a_repo"
    assert list(plain.iterdir()) == []
    code, ans, _ = cli("integrate", "nobody", cwd=plain)
    assert code == 2 and ans["error"]["code"] == "usage"
