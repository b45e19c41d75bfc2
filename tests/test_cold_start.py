"""A clone's first read: the daemon answers before every memory has a vector (keyword lane for
the rest, ``partial`` in the answer), embeds the rest in the background, and then answers as a
fully indexed store does. Progress bars appear on a terminal only. Real git clone, real daemon,
real CLI subprocesses, real model."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import run_on_tty
from daemonworld import Env, _poll, clone, commit_all, ranked
from mcp.client.session import ClientSession
from test_mcp import ok, run_mcp

from memstore import gitops
from memstore.store.ids import ALPHABET
from memstore.store.workspace import open_workspace
from memstore.verbs import api

pytestmark = [pytest.mark.model, pytest.mark.slow]

N = 400
TARGET = "The zanzibar frobnicator rotates its quillwort tokens every night at 02:00 UTC."
QUERY = "zanzibar frobnicator quillwort tokens"
WORDS = ["cache", "worker", "queue", "schema", "index", "migration", "deploy", "token", "session", "build",
         "config", "retry", "timeout", "client", "server", "router", "handler", "fixture", "module", "parser"]


def _id(i: int) -> str:
    return "01m6gbcm3h832wbgwh16z" + "".join(ALPHABET[(i >> (5 * k)) & 31] for k in range(4, -1, -1))


def _fact(i: int, text: str) -> str:
    return f"---\nid: {_id(i)}\nkind: fact\nscope: repo\ncreated: 2026-11-01T10:00:00Z\n---\n{text}\n"


def _origin(base: Path, n: int) -> Path:
    """A repo whose committed store holds ``n`` memories (written as files, as a teammate's
    commits bring them), one of them the TARGET."""
    root = base / "origin"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
    gitops.toplevel.cache_clear()
    api.init(open_workspace(cwd=root))
    rng = random.Random(7)
    facts = root / ".memory" / "facts"
    for i in range(n):
        text = TARGET if i == n // 2 else (
            f"Note {i}: " + " ".join(rng.choice(WORDS) for _ in range(40)) + f" (case {i}).")
        (facts / f"{_id(i)}.md").write_text(_fact(i, text))
    commit_all(root)
    return root


def _stores(status: dict[str, Any], repo: Path) -> list[dict[str, Any]]:
    root = str((repo / ".memory").resolve())
    return [s for w in status["workspaces"] if w["repo"] == root for s in w["stores"]]


def _all_embedded(world: Env, repo: Path) -> list[dict[str, Any]] | None:
    """The daemon's stores for ``repo`` once every memory has a vector, else None."""
    rc, status, _ = world.cli("daemon", "status", cwd=repo)
    stores = _stores(status, repo) if rc == 0 and status.get("running") else []
    return stores if stores and stores[0]["embedded"] == stores[0]["total"] else None


def test_a_clone_is_answered_before_its_vectors_exist(tmp_path: Path) -> None:
    world = Env(tmp_path / "cold")
    with world.environ():
        origin = _origin(world.base, N)
    warm, cold = clone(origin, "warm"), clone(origin, "cold")
    # The answer of a fully indexed store: in-process, which embeds everything before answering.
    rc, want, err = world.cli("read", QUERY, cwd=warm, MEMSTORE_DAEMON="0")
    assert rc == 0 and "partial" not in want, err
    assert _id(N // 2) in [r["id"] for r in want["results"]]
    proc = world.start("--idle", "600")
    try:
        rc, first, err = world.cli("read", QUERY, cwd=cold, MEMSTORE_READ_WAIT="0.2")
        assert rc == 0, err
        # Answered after at most the wait (plus one slice) of embedding, not after all of it.
        assert 0 < first["partial"]["embedded"] < first["partial"]["total"] == N, first.get("partial")
        assert "keyword-only" in first["guidance"]
        hit = next(r for r in first["results"] if r["id"] == _id(N // 2))
        assert hit["text"] == TARGET
        # The query's best keyword hits were embedded first: the answer judges them by their own
        # vectors, not by a sample of the store that has nothing to do with the query.
        assert first["stats"]["gate"]["passed"] and first["stats"]["gate"]["top_similarity"] > 0.5, first["stats"]
        assert all("no-vector-yet" not in r["reasons"] for r in first["results"][:3]), first["results"][:3]
        # What was embedded is on disk already: a killed daemon would not pay for it again.
        keys = next((cold / ".memory" / ".index" / "embeddings").glob("*.keys"))
        assert len(keys.read_text().split()) >= first["partial"]["embedded"]

        def done() -> list[dict[str, Any]] | None:
            rc, status, _ = world.cli("daemon", "status", cwd=cold)
            stores = _stores(status, cold) if rc == 0 else []
            return stores if stores and stores[0]["embedded"] == stores[0]["total"] else None

        stores = _poll(done, timeout=120, every=1.0)
        assert stores == [{"scope": "repo", "root": str((cold / ".memory").resolve()), "embedded": N,
                           "total": N, "embedding": False}], world.log()
        rc, later, err = world.cli("read", QUERY, cwd=cold, MEMSTORE_READ_WAIT="0.2")
        assert rc == 0, err
        assert "partial" not in later and later["guidance"] == want["guidance"], later.get("partial")
        assert ranked(later) == ranked(want)
    finally:
        world.cleanup()
        proc.wait(timeout=30)


def test_a_first_read_without_a_daemon_answers_partially_and_the_daemon_it_starts_embeds_the_rest(
        tmp_path: Path) -> None:
    """No daemon runs yet: the CLI answers in-process, waiting no longer than a read through the
    daemon would, and the daemon it starts (``serve --warm``) embeds the rest unasked."""
    world = Env(tmp_path / "nodaemon")
    with world.environ():
        origin = _origin(world.base, N)
    warm, cold = clone(origin, "warm"), clone(origin, "cold")
    try:
        rc, want, err = world.cli("read", QUERY, cwd=warm, MEMSTORE_DAEMON="0")
        assert rc == 0 and "partial" not in want, err
        rc, first, err = world.cli("read", QUERY, cwd=cold, MEMSTORE_READ_WAIT="0.2")
        assert rc == 0, err
        assert 0 < first["partial"]["embedded"] < N, first.get("partial")
        assert _id(N // 2) in [r["id"] for r in first["results"]]
        # The keyword lane answered from a scan; the Whoosh build is the daemon's (a one-shot
        # process would spend seconds on it at 10k memories before answering).
        assert _poll(lambda: f"keyword index of {N} memories built" in world.log(), timeout=180, every=0.5), \
            world.log()
        assert f"building the keyword index of {N} memories in the background" in world.log()

        assert _poll(lambda: _all_embedded(world, cold), timeout=180, every=1.0), world.log()
        rc, later, err = world.cli("read", QUERY, cwd=cold, MEMSTORE_READ_WAIT="0.2")
        assert rc == 0 and "partial" not in later, err
        assert ranked(later) == ranked(want)
    finally:
        world.cleanup()


def test_a_first_read_on_a_new_machine_prepares_the_model_outside_its_wait(tmp_path: Path) -> None:
    """No model export cached yet (a new install): preparing it takes seconds, once; the read's
    wait for vectors starts after it, so the first answer still carries the probe's vectors."""
    world = Env(tmp_path / "newmachine")
    with world.environ():
        origin = _origin(world.base, N)
    cold = clone(origin, "cold")
    cache = world.base / "new-cache"
    try:
        rc, first, err = world.cli("read", QUERY, cwd=cold, MEMSTORE_READ_WAIT="0.2", XDG_CACHE_HOME=str(cache))
        assert rc == 0, err
        assert list((cache / "memstore" / "onnx").glob("*.onnx")), "the export was not made in this read"
        assert 0 < first["partial"]["embedded"] < N, first.get("partial")
        assert _id(N // 2) in [r["id"] for r in first["results"]]
    finally:
        world.cleanup()


def test_an_mcp_session_without_a_daemon_answers_partially_and_starts_one(tmp_path: Path) -> None:
    """The MCP server's first read in a fresh clone, no daemon running: it waits no longer than
    the CLI would, answers partially, and the daemon it starts embeds the rest."""
    world = Env(tmp_path / "mcp")
    with world.environ():
        origin = _origin(world.base, N)
    cold = clone(origin, "cold")

    async def script(s: ClientSession) -> dict[str, Any]:
        return ok(await s.call_tool("memory_read", {"query": QUERY}))

    try:
        first = run_mcp(cold, script, env={**world.env(), "MEMSTORE_READ_WAIT": "0.2"})
        assert 0 < first["partial"]["embedded"] < N, first.get("partial")
        assert _id(N // 2) in [r["id"] for r in first["results"]]
        # The keyword lane answered from a scan; the Whoosh build is the daemon's (a one-shot
        # process would spend seconds on it at 10k memories before answering).
        assert _poll(lambda: f"keyword index of {N} memories built" in world.log(), timeout=180, every=0.5), \
            world.log()
        assert f"building the keyword index of {N} memories in the background" in world.log()

        assert _poll(lambda: _all_embedded(world, cold), timeout=180, every=1.0), world.log()
    finally:
        world.cleanup()


def _reindex_with_stderr_on(repo: Path, tty: bool) -> tuple[int, str, str]:
    """``memstore reindex`` with stderr piped, or on a pseudo-terminal: (exit code, stdout, stderr)."""
    cmd = [sys.executable, "-m", "memstore", "reindex"]
    if not tty:
        proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        return proc.returncode, proc.stdout, proc.stderr
    rc, shown, out = run_on_tty(["reindex"], cwd=repo, tty="stderr", columns=100)
    return rc, out.decode(), shown.decode(errors="replace")


def test_reindex_shows_a_bar_on_a_terminal_and_nothing_when_piped(tmp_path: Path) -> None:
    origin = _origin(tmp_path, 120)
    piped, shown = clone(origin, "piped"), clone(origin, "shown")
    rc, out, err = _reindex_with_stderr_on(piped, tty=False)
    assert rc == 0 and json.loads(out)["stores"][0]["vectors"] == 120
    assert "\r" not in err and len(err.splitlines()) == 1 and "(once" in err  # a line, no bar, piped
    rc, out, err = _reindex_with_stderr_on(shown, tty=True)
    assert rc == 0, err
    assert "embedding" in err and "memories/s" in err and "\r" in err, err[-500:]


def test_a_bad_read_wait_in_a_cloned_config_is_ignored_and_a_bad_variable_refused(tmp_path: Path) -> None:
    """A repo's config.yaml comes with the clone: a read_wait_seconds that is no number counts as
    the default. The user's own MEMSTORE_READ_WAIT that is no number is a clear error."""
    world = Env(tmp_path / "badwait")
    with world.environ():
        origin = _origin(world.base, 20)
    repo = clone(origin, "repo")
    (repo / ".memory" / "config.yaml").write_text("daemon:\n  read_wait_seconds: soon\n")
    try:
        rc, out, err = world.cli("read", QUERY, cwd=repo)
        assert rc == 0, err
        assert _id(10) in [r["id"] for r in out["results"]]
        rc, out, err = world.cli("read", QUERY, cwd=repo, MEMSTORE_READ_WAIT="soon", MEMSTORE_DAEMON="0")
        assert rc == 2 and out["error"]["code"] == "bad_config" and "MEMSTORE_READ_WAIT" in out["error"]["message"]
    finally:
        world.cleanup()
