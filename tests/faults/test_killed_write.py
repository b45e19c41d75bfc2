"""A daemon killed in the middle of a write: kill -9 a real `memstore serve` the moment the
memory (or event) file it writes appears, while the CLI that sent the write waits for its answer.
The CLI then runs the write in-process under the id it fixed before the first attempt, so the
write happens once: one file, staged, and the one id the CLI acknowledges is that file's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemonworld import Env, _poll
from test_mcp import answer, run_mcp

from memstore.store.workspace import open_workspace
from memstore.verbs import api

pytestmark = [pytest.mark.model]

TOPICS = ["the payments webhook retries three times with exponential backoff",
          "the nightly backup job uploads a pg_dump of the orders database to the cold bucket",
          "feature flags are read from LaunchDarkly on every request and never cached in workers",
          "the search service rebuilds its synonym table from the glossary sheet every Monday",
          "the mobile build signs release artifacts with the key kept in the CI secret store",
          "the staging cluster scales to zero nodes on weekends to save on compute",
          "invoices are rendered to PDF by a headless Chromium sidecar, not by the API pods",
          "the analytics events topic keeps seven days of messages before compaction"]


@pytest.fixture
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    own = Env(tmp_path_factory.mktemp("killw"))
    own.repo = own.make_repo("repo")  # type: ignore[attr-defined]
    # Each trial starts the daemon it kills: the in-process fallback starts none of its own.
    (own.home / ".memory").mkdir(exist_ok=True)
    (own.home / ".memory" / "config.yaml").write_text("daemon:\n  autostart: false\n")
    try:
        yield own
    finally:
        own.cleanup()


def _new_files(folder: Path, before: set[str], suffix: str) -> list[str]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(n for n in names if n.endswith(suffix) and not n.startswith(".") and n not in before)


def _staged(repo: Path) -> set[str]:
    out = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=repo, capture_output=True, text=True,
                         check=True).stdout
    return set(out.split())


def _killed_mid_write(world: Env, folder: Path, suffix: str, *args: str) -> tuple[int, Any, str, list[str]]:
    """Run ``memstore ARGS`` through a fresh daemon and kill -9 that daemon as soon as a new file
    shows in ``folder``: (exit code, JSON answer, stderr, the new files once the CLI is done)."""
    repo: Path = world.repo  # type: ignore[attr-defined]
    daemon = world.start("--idle", "600")
    assert _poll(lambda: world.status().get("pid") == daemon.pid, timeout=60), world.log()
    before = set(_new_files(folder, set(), suffix))
    # MEMSTORE_DAEMON unset: the call goes to the daemon, and the config's autostart: false holds.
    env = {k: v for k, v in world.env().items() if k != "MEMSTORE_DAEMON"}
    cli = subprocess.Popen([sys.executable, "-m", "memstore", *args, "--json-out"], cwd=repo, env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _kill_when_a_file_shows(daemon, folder, before, suffix, until=lambda: cli.poll() is not None)
    out, err = cli.communicate(timeout=300)
    import json

    answer = json.loads(out) if out.strip() else None
    return cli.returncode, answer, err, _new_files(folder, before, suffix)


def _kill_when_a_file_shows(daemon: subprocess.Popen[bytes], folder: Path, before: set[str], suffix: str,
                            until: Callable[[], bool]) -> None:
    """kill -9 ``daemon`` the moment a new file shows in ``folder`` (or once ``until`` holds)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not until() and not _new_files(folder, before, suffix):
        time.sleep(0.0005)
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(timeout=30)


def _write_trials(world: Env, trials: list[tuple[str, bool]]) -> None:
    repo: Path = world.repo  # type: ignore[attr-defined]
    folder = repo / ".memory" / "facts"
    for text, allow_duplicate in trials:
        extra = ["--allow-duplicate"] if allow_duplicate else []
        rc, answer, err, files = _killed_mid_write(world, folder, ".md", "write", "--kind", "fact", "--evidence",
                                                   "user:seen", "--text", text, *extra)
        assert rc == 0 and answer["ok"], (answer, err, world.log())
        # One file, and the id acknowledged is its id: no second copy, no `duplicate` of itself.
        assert len(files) == 1 and files[0].startswith(answer["id"] + "-"), (files, answer)
        assert f".memory/facts/{files[0]}" in _staged(repo), _staged(repo)
        assert answer["path"].endswith(files[0]) and answer["mode"] == "review"
        assert all(s["id"] != answer["id"] for s in answer.get("similar", [])), answer
    rc, listed, err = world.cli("list", cwd=repo, MEMSTORE_DAEMON="0")
    assert rc == 0 and listed["count"] == len(trials), listed
    rc, report, err = world.cli("check", cwd=repo, MEMSTORE_DAEMON="0")
    assert rc == 0 and report["ok"], report or err


def test_a_write_whose_daemon_is_killed_mid_write_is_stored_once(world: Env) -> None:
    _write_trials(world, [(TOPICS[0], False), (TOPICS[1], True)])


@pytest.mark.slow
def test_a_write_whose_daemon_is_killed_mid_write_is_stored_once_in_many_trials(world: Env) -> None:
    _write_trials(world, [(text, i % 2 == 1) for i, text in enumerate(TOPICS)])


def test_an_update_whose_daemon_is_killed_mid_write_is_recorded_once(world: Env) -> None:
    repo: Path = world.repo  # type: ignore[attr-defined]
    with world.environ():
        ws = open_workspace(cwd=repo, env=world.env())
        target = api.write(ws, {"op": "write", "memory": {"kind": "fact", "scope": "repo", "text": TOPICS[2],
                                                          "evidence_refs": ["user:seen"]}})["id"]
    for voter in ("ana", "ben"):
        rc, answer, err, files = _killed_mid_write(world, repo / ".memory" / "events", ".yaml", "update",
                                                   "--type", "utility_vote", "--memory", target, "--vote", "1",
                                                   "--author", voter)
        assert rc == 0 and answer["ok"], (answer, err, world.log())
        assert files == [f"{answer['id']}.yaml"], (files, answer)
        assert f".memory/events/{files[0]}" in _staged(repo)
        assert answer["effect"]["memory_id"] == target, answer
    rc, shown, err = world.cli("show", target, cwd=repo, MEMSTORE_DAEMON="0")
    assert rc == 0 and shown["memory"]["derived"]["utility"]["votes"] == 2, shown  # one per voter, not three or four


def test_an_mcp_write_and_update_whose_daemon_is_killed_mid_write_are_made_once(world: Env) -> None:
    """The MCP server forwards to the daemon too, and retries in-process under the same id."""
    repo: Path = world.repo  # type: ignore[attr-defined]
    got: dict[str, Any] = {}
    for tool, folder, suffix in (("memory_write", repo / ".memory" / "facts", ".md"),
                                 ("memory_update", repo / ".memory" / "events", ".yaml")):
        daemon = world.start("--idle", "600")
        assert _poll(lambda: world.status().get("pid") == daemon.pid, timeout=60), world.log()  # noqa: B023
        before = set(_new_files(folder, set(), suffix))
        done = threading.Event()
        killer = threading.Thread(target=_kill_when_a_file_shows, args=(daemon, folder, before, suffix, done.is_set))
        killer.start()
        request: dict[str, Any] = ({"memory": {"kind": "fact", "scope": "repo", "text": TOPICS[3],
                                               "evidence_refs": ["user:seen"]}} if tool == "memory_write" else
                                   {"type": "utility_vote", "memory_id": got["memory_write"]["id"], "vote": 1})

        async def script(s: Any, tool: str = tool, request: dict[str, Any] = request) -> dict[str, Any]:
            return answer(await s.call_tool(tool, request))

        try:
            got[tool] = run_mcp(repo, script, env=world.env())
        finally:
            done.set()
            killer.join(timeout=150)
        files = _new_files(folder, before, suffix)
        assert got[tool]["ok"] and len(files) == 1 and files[0].startswith(got[tool]["id"]), (got, files)
        assert f".memory/{folder.name}/{files[0]}" in _staged(repo)
