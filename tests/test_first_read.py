"""The first read in a clone of a store larger than KW_DEFER, through the CLI and a running
daemon: it answers at once, partial (a probe of the model, not the whole wait), with a keyword
hit for a rare identifier from the scan lane while the Whoosh index is built in the background;
once the background work ends, reads equal those of a store indexed in full. A daemon killed
mid-build loses nothing. Real git clone, real daemon, real CLI, real model."""

from __future__ import annotations

import os
import random
import signal
import subprocess
from pathlib import Path

import pytest
from daemonworld import Env, _poll, clone, commit_all, ranked

from memstore import gitops
from memstore.index.embedding import EMBED_PROBE
from memstore.index.keyword_build import KW_DEFER
from memstore.index.scanlane import EAGER_CHARS
from memstore.read.retrieve import CANDIDATES_FIRST
from memstore.store.ids import ALPHABET
from memstore.store.workspace import open_workspace
from memstore.verbs import api

pytestmark = [pytest.mark.model, pytest.mark.slow]

N = 360
assert N > KW_DEFER
RARE = "QuillwortRotator.rotate_frobnicator_tokens"
TARGET = f"`{RARE}()` rotates the zanzibar tokens every night at 02:00 UTC."
WORDS = ["cache", "worker", "queue", "schema", "index", "migration", "deploy", "token", "session", "build",
         "config", "retry", "timeout", "client", "server", "router", "handler", "fixture", "module", "parser"]
QUERIES = [RARE, "rotate_frobnicator_tokens", "zanzibar tokens rotation", "worker queue retry timeout"]


def _id(i: int) -> str:
    return "01m6gbcm3h832wbgwh16z" + "".join(ALPHABET[(i >> (5 * k)) & 31] for k in range(4, -1, -1))


def _origin(base: Path, long: bool = False) -> Path:
    root = base / "origin"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
    gitops.toplevel.cache_clear()
    api.init(open_workspace(cwd=root))
    rng = random.Random(3)
    for i in range(N):
        text = TARGET if i == N // 3 else f"Note {i}: " + " ".join(rng.choice(WORDS) for _ in range(30))
        if long and i != N // 3:
            # Past EAGER_CHARS in all, at a short text's embedding cost: the model reads a word of
            # over 100 characters as one unknown token.
            text += " " + "".join(rng.choice(WORDS) for _ in range(520))
        tags = ", ".join(rng.sample(WORDS, 2))
        (root / ".memory" / "facts" / f"{_id(i)}.md").write_text(
            f"---\nid: {_id(i)}\nkind: fact\nscope: repo\ncreated: 2026-11-01T10:00:00Z\n"
            f"author: dana\nconfidence: 0.8\ntags: [{tags}]\n---\n{text}\n")
    commit_all(root)
    return root


def _daemon_log(world: Env) -> str:
    path = world.rdir / "daemon.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _settled(world: Env, repo: Path) -> bool:
    """Every memory has a vector and the keyword build was swapped in (its folder is gone)."""
    rc, status, _ = world.cli("daemon", "status", cwd=repo)
    root = str((repo / ".memory").resolve())
    stores = [s for w in status.get("workspaces", []) for s in w["stores"] if w["repo"] == root] if rc == 0 else []
    if not stores or stores[0]["embedded"] != stores[0]["total"]:
        return False
    world.cli("read", "anything", cwd=repo)  # a read swaps a finished build in
    return not _leftovers(repo)


def _leftovers(repo: Path) -> list[str]:
    return sorted(p.name for p in (repo / ".memory" / ".index").glob("keyword.*-*"))


def _wants(world: Env, repo: Path) -> dict[str, list[tuple[str, float]]]:
    """The answers of a store indexed in full, in-process (it embeds everything first)."""
    out = {}
    for query in QUERIES:
        rc, answer, err = world.cli("read", query, cwd=repo, MEMSTORE_DAEMON="0")
        assert rc == 0 and "partial" not in answer, err
        out[query] = ranked(answer)
    return out


def _answers_as_warm(world: Env, repo: Path, want: dict[str, list[tuple[str, float]]]) -> None:
    """Every query, read through the daemon once its work is done, as a warm index answers it."""
    for query in QUERIES:
        rc, later, err = world.cli("read", query, cwd=repo)
        assert rc == 0 and "partial" not in later, err
        assert ranked(later) == want[query], query


@pytest.mark.parametrize("long", [False, True], ids=["short", "long"])
def test_the_first_read_answers_from_the_scan_lane_and_then_as_a_full_index(tmp_path: Path, long: bool) -> None:
    """Long memories (more text than EAGER_CHARS): the scan lane analyses only the memories the
    query's terms may be in, and still finds the one that holds the identifier."""
    world = Env(tmp_path / "first")
    with world.environ():
        origin = _origin(world.base, long)
    chars = sum(len(p.read_text().split("---\n", 2)[2]) for p in (origin / ".memory").glob("*/*.md"))
    assert (chars > EAGER_CHARS) == long
    warm, cold = clone(origin, "warm"), clone(origin, "cold")
    want = _wants(world, warm)
    assert want[RARE][0][0] == _id(N // 3)
    proc = world.start("--idle", "600")
    try:
        rc, first, err = world.cli("read", RARE, cwd=cold, MEMSTORE_READ_WAIT="5")
        assert rc == 0, err
        # A probe of the model and the query's best keyword hits, not the five seconds this read
        # was allowed to wait.
        assert (1 <= first["partial"]["embedded"] <= EMBED_PROBE + CANDIDATES_FIRST
                < first["partial"]["total"] == N), first["partial"]
        assert first["results"][0]["id"] == _id(N // 3) and first["results"][0]["text"] == TARGET
        assert f"building the keyword index of {N} memories in the background" in _daemon_log(world)

        assert _poll(lambda: _settled(world, cold), timeout=180, every=1.0), _daemon_log(world)[-3000:]
        assert f"keyword index of {N} memories built" in _daemon_log(world)
        assert (cold / ".memory" / ".index" / "keyword" / "VERSION").is_file()
        _answers_as_warm(world, cold, want)
    finally:
        world.cleanup()
        proc.wait(timeout=30)


def test_a_daemon_killed_mid_build_loses_nothing(tmp_path: Path) -> None:
    """The build's folder is left behind by a kill: the next daemon removes it, builds again
    and answers as a full index."""
    world = Env(tmp_path / "killed")
    with world.environ():
        origin = _origin(world.base)
    warm, cold = clone(origin, "warm"), clone(origin, "cold")
    want = _wants(world, warm)
    proc = world.start("--idle", "600")
    try:
        rc, first, err = world.cli("read", RARE, cwd=cold)
        assert rc == 0 and first["results"][0]["id"] == _id(N // 3), err
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        # Whatever the kill left (its build's folder, an old index mid-swap): a fresh daemon
        # clears it and builds again.
        dead = [f"keyword.next-{proc.pid}-1", f"keyword.old-{proc.pid}"]
        for name in dead:
            (cold / ".memory" / ".index" / name).mkdir(exist_ok=True)
            (cold / ".memory" / ".index" / name / "_MAIN_1.toc").write_text("partial")
        world.cleanup()
        proc = world.start("--idle", "600")
        rc, again, err = world.cli("read", RARE, cwd=cold)
        assert rc == 0 and again["results"][0]["id"] == _id(N // 3), err
        assert not set(dead) & set(_leftovers(cold)), _leftovers(cold)
        assert _poll(lambda: _settled(world, cold), timeout=180, every=1.0), _daemon_log(world)[-3000:]
        _answers_as_warm(world, cold, want)
    finally:
        world.cleanup()
        proc.wait(timeout=30)


def test_a_large_build_runs_in_one_writer_while_the_scan_lane_answers(tmp_path: Path) -> None:
    """Over Whoosh's bulk size (2,000) the build still runs in its thread, one writer (one
    segment): a daemon's thread must not fork writer processes. Until it is swapped in, the
    scan lane answers; after, the index gives the same hits and nothing is left beside it."""
    from memstore.index.store_index import StoreIndex
    from memstore.read import ranking

    n = 2100
    root = tmp_path / "big"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
    gitops.toplevel.cache_clear()
    ws = open_workspace(cwd=root)
    api.init(ws)
    rng = random.Random(5)
    for i in range(n):
        text = TARGET if i == 7 else f"Note {i}: " + " ".join(rng.choice(WORDS) for _ in range(12))
        (root / ".memory" / "facts" / f"{_id(i)}.md").write_text(
            f"---\nid: {_id(i)}\nkind: fact\nscope: repo\ncreated: 2026-11-01T10:00:00Z\n---\n{text}\n")
    si = StoreIndex(open_workspace(cwd=root).catalog("repo"), None, ranking.RankingParams())
    si.defer_saves = True  # as the daemon's
    si.refresh()
    assert si.scan is not None and si.lane is si.scan
    queries = [RARE, "worker queue retry", "zanzibar"]
    scanned = {q: [(h.id, h.score) for h in si.scan.hits(q, 10)] for q in queries}
    assert scanned[RARE][0][0] == _id(7)
    def swapped() -> bool:
        si.refresh(walk=False)  # starts the planned build, then swaps the finished one in
        return si.scan is None

    assert _poll(swapped, timeout=180, every=0.2)
    assert si.lane is si.keyword is not None
    assert len(list(si.keyword.searcher.reader().leaf_readers())) == 1
    for q in queries:
        assert [(h.id, h.score) for h in si.keyword.hits(q, 10)] == scanned[q], q
    assert not list(si.dir.glob("keyword.*-*"))
    si.close()
