"""A path past the bounds (store/paths.py: 4096 bytes, 512 parts) is refused or ignored before
it touches the file system, on every surface that takes one: an agent hook's payload, the cwd
and --store a client sends the daemon, the CLI's and the MCP server's --store, a file cited as
evidence. Resolving `/proc/self/root` followed by 300,000 `/x` took `Path.resolve()` 16-100 s
and, in the daemon, held the global store's lock the while: every other repo's hooks ran out of
their budget and injected nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli, store_files, write_req
from daemonworld import Env, _poll

from memstore.surfaces import client

pytestmark = [pytest.mark.model]

HOSTILE = "/proc/self/root" + "/x" * 300_000
LONG = "/proc/self/root" + "/x" * 30_000  # an argument or variable holds at most 128 KiB (MAX_ARG_STRLEN)


def _hook(env: dict[str, str], cwd: Path, event: str, payload: dict[str, Any]) -> subprocess.Popen[str]:
    """The agent's hook command, started with ``payload`` on its stdin (a file: the hostile one
    is 600 KB, more than a pipe holds)."""
    data = cwd.parent / f"payload-{len(list(cwd.parent.glob('payload-*')))}.json"
    data.write_text(json.dumps(payload))
    with open(data) as stdin:
        return subprocess.Popen([sys.executable, "-m", "memstore", "integrate", "claude", "--hook", event], cwd=cwd,
                                env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _read_payload(repo: Path, session: str, file_path: str) -> dict[str, Any]:
    return {"session_id": session, "cwd": str(repo), "hook_event_name": "PreToolUse", "tool_name": "Read",
            "tool_input": {"file_path": file_path}}


def _cited_repo(world: Env, name: str) -> tuple[Path, str]:
    """A repo with one memory citing src/billing.py, written through the CLI in-process."""
    repo = world.make_repo(name)
    (repo / "src").mkdir()
    (repo / "src" / "billing.py").write_text("def charge():\n    return 1\n")
    rc, out, err = run_cli(["write", "--kind", "problem", "--evidence", "file:src/billing.py", "--text",
                            f"{name}: invoices are double-charged when the payment webhook is retried"],
                           cwd=repo, env=world.env(MEMSTORE_DAEMON="0"))
    assert rc == 0, err
    return repo, out["id"]


def test_a_hostile_file_path_stalls_no_other_repos_hook(tmp_path: Path) -> None:
    world = Env(tmp_path / "stall")
    proc = None
    try:
        with world.environ():
            hostile_repo, _ = _cited_repo(world, "repo_a")
            repo, mid = _cited_repo(world, "repo_b")
        proc = world.start("--idle", "600")
        env = world.env()
        billing = str(repo / "src" / "billing.py")
        # Its normal answer first (the workspace loaded): the memory citing the file.
        out, err = _hook(env, repo, "file", _read_payload(repo, "s0", billing)).communicate(timeout=120)
        assert mid in out, (out, err, world.log())
        before = world.status()["requests"]
        hostile = _hook(env, hostile_repo, "file", _read_payload(hostile_repo, "h1", HOSTILE))
        # The hostile request has reached the daemon (this status call and it), then another repo's
        # hook runs with its default 5 s budget: it answers with its injection, so it did not
        # run out of time (an overrun injects nothing).
        assert _poll(lambda: world.status()["requests"] >= before + 2, timeout=60), world.log()
        out, err = _hook(env, repo, "file", _read_payload(repo, "s1", billing)).communicate(timeout=120)
        assert mid in out and "additionalContext" in out, (out, err, world.log())
        h_out, h_err = hostile.communicate(timeout=300)
        assert hostile.returncode == 0 and h_out == "", (h_out, h_err)  # ignored: no file has that path
    finally:
        world.cleanup()
        if proc is not None:
            proc.wait(timeout=30)


def test_a_path_past_the_bounds_is_refused_on_every_surface_and_nothing_is_written(
        tmp_path: Path, repo: Path) -> None:
    """The CLI's --store, a cwd and a store sent to the daemon, a cited file: `path_too_long`,
    exit 2, nothing written; a hook payload's cwd: the hook injects nothing and exits 0."""
    import os

    env = dict(os.environ)
    before = store_files(repo)
    rc, out, _ = run_cli(["--store", LONG, "list"], cwd=repo, env=env, timeout=60)
    assert rc == 2 and out["error"]["code"] == "path_too_long", out
    rc, out, _ = run_cli(["write", "--json", "-"], cwd=repo, env=env, timeout=60, input=json.dumps(
        write_req("fact", "src/app.py holds main().", evidence=["file:src/" + "a/" * 600 + "app.py"])))
    assert rc == 2 and out["error"]["code"] == "path_too_long" and out["error"]["field"], out
    rc, out, _ = run_cli(["write", "--json", "-"], cwd=repo, env={**env, "MEMSTORE_STORE": LONG}, timeout=60,
                         input=json.dumps(write_req("fact", "src/app.py holds main().")))
    assert rc == 2 and out["error"]["code"] == "path_too_long", out
    assert store_files(repo) == before
    # An agent hook whose payload names a cwd past the bounds: fails open, at once.
    proc = _hook(env, repo, "file", {**_read_payload(repo, "c1", "src/app.py"), "cwd": HOSTILE})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out == "" and err == ""
    for args in (["--store", LONG, "mcp"], ["mcp", "--repo", LONG]):
        mcp = subprocess.run([sys.executable, "-m", "memstore", *args], cwd=repo, env=env,
                             input="", capture_output=True, text=True, timeout=60, check=False)
        assert mcp.returncode == 2 and "path_too_long" in mcp.stderr, mcp.stderr


def test_the_daemon_refuses_a_cwd_and_store_past_the_bounds(tmp_path: Path) -> None:
    world = Env(tmp_path / "dcwd")
    proc = None
    try:
        with world.environ():
            repo = world.make_repo("repo")
        before = store_files(repo)
        proc = world.start("--idle", "600")
        for cwd, store in ((HOSTILE, None), (str(repo), HOSTILE), (str(repo / ("x/" * 600)), None)):
            msg = {"verb": "write", "version": client.code_version(), "cwd": cwd, "store": store,
                   "env": client.forwarded_env(world.env()), "request": write_req("fact", "a fact")}
            reply = world.call(msg, timeout=60)
            assert reply["exit_code"] == 2 and reply["answer"]["error"]["code"] == "path_too_long", reply
        msg = {"verb": "list", "version": client.code_version(), "cwd": str(repo), "store": None,
               "env": {**client.forwarded_env(world.env()), "MEMSTORE_HOME": HOSTILE}, "args": {}}
        reply = world.call(msg, timeout=60)
        assert reply["exit_code"] == 2 and reply["answer"]["error"]["code"] == "path_too_long", reply
        assert store_files(repo) == before
    finally:
        world.cleanup()
        if proc is not None:
            proc.wait(timeout=30)


def test_the_bounds_are_4096_bytes_and_512_parts() -> None:
    from memstore.store.paths import MAX_PATH_BYTES, MAX_PATH_PARTS, bounded, path_fault

    assert (MAX_PATH_BYTES, MAX_PATH_PARTS) == (4096, 512)  # the figures docs/daemon.md and SECURITY.md give
    assert path_fault("/" + "a" * 4095) is None and path_fault("/" + "a" * 4096) is not None
    assert path_fault("é" * 2048) is None and "bytes" in (path_fault("é" * 2049) or "")  # bytes, not characters
    assert path_fault("a/" * 511 + "a") is None and "parts" in (path_fault("a/" * 512 + "a") or "")
    assert bounded(HOSTILE) is None and bounded(None) is None and bounded("src/app.py") == "src/app.py"
