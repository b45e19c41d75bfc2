"""Embedding in worker processes (index/encoder_pool.py), through the real daemon: the vectors are
byte-equal to those the daemon's own encoder makes, a worker killed mid-run costs nothing, no
worker outlives the daemon, and ``MEMSTORE_EMBED_WORKERS=0`` embeds in-process."""

from __future__ import annotations

import os
import random
import signal
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from daemonworld import Env, _poll, clone, commit_all

from memstore import gitops
from memstore.store.ids import ALPHABET
from memstore.store.workspace import open_workspace
from memstore.verbs import api

pytestmark = [pytest.mark.model, pytest.mark.slow]

WORDS = ["cache", "worker", "queue", "schema", "index", "migration", "deploy", "token", "session", "build",
         "config", "retry", "timeout", "client", "server", "router", "handler", "fixture", "module", "parser"]
QUERY = "queue worker retry timeout"
MARK = b"memstore.index.encoder_pool"
N = 800  # enough that the workers start (embedder.POOL_START_TEXTS)


def _id(i: int) -> str:
    return "01m6gbcm3h832wbgwh16z" + "".join(ALPHABET[(i >> (5 * k)) & 31] for k in range(4, -1, -1))


def _origin(base: Path, n: int) -> Path:
    """A repo whose committed store holds ``n`` facts of mixed lengths: most short, every tenth
    long enough to be cut at the model's 256 tokens."""
    root = base / "origin"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
    gitops.toplevel.cache_clear()
    api.init(open_workspace(cwd=root))
    rng = random.Random(11)
    facts = root / ".memory" / "facts"
    for i in range(n):
        words = 300 if i % 10 == 0 else rng.randrange(4, 40)
        text = f"Note {i}: " + " ".join(rng.choice(WORDS) for _ in range(words)) + "."
        (facts / f"{_id(i)}.md").write_text(
            f"---\nid: {_id(i)}\nkind: fact\nscope: repo\ncreated: 2026-11-01T10:00:00Z\n---\n{text}\n")
    commit_all(root)
    return root


def _stores(world: Env, repo: Path) -> list[dict[str, Any]]:
    root = str((repo / ".memory").resolve())
    status = world.status()
    return [s for w in status.get("workspaces", []) for s in w["stores"] if w["repo"] == root]


def _all_embedded(world: Env, repo: Path) -> bool:
    stores = _stores(world, repo)
    return bool(stores) and stores[0]["embedded"] == stores[0]["total"]


def _cache(repo: Path) -> dict[str, bytes]:
    """Text key -> the vector's bytes, as the embedding cache on disk holds them."""
    folder = repo / ".memory" / ".index" / "embeddings"
    keys = next(folder.glob("*.keys")).read_text().split()
    rows = np.fromfile(next(folder.glob("*.f32")), dtype=np.float32).reshape(-1, 384)
    return {k: rows[i].tobytes() for i, k in enumerate(keys)}


def _children(pid: int) -> list[int]:
    """Embedding workers whose parent is ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and MARK in cmd:
            out.append(int(entry.name))
    return out


def _workers_anywhere() -> set[int]:
    """Every live embedding worker on the machine (zombies count as gone)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if MARK in cmd and state != "Z":
                out.add(int(entry.name))
    return out


def _start(world: Env, workers: str, procs: list[subprocess.Popen[bytes]]) -> tuple[subprocess.Popen[bytes], int]:
    world.vars["MEMSTORE_EMBED_WORKERS"] = workers
    proc = world.start("--idle", "600")
    procs.append(proc)
    return proc, int(world.status()["pid"])


def _end(world: Env, procs: list[subprocess.Popen[bytes]]) -> None:
    world.cleanup()
    for proc in procs:
        proc.wait(timeout=60)


def _first_read(world: Env, repo: Path) -> dict[str, Any]:
    rc, answer, err = world.cli("read", QUERY, cwd=repo, MEMSTORE_READ_WAIT="0.1")
    assert rc == 0, err
    return answer


def test_vectors_from_the_workers_are_byte_equal_to_in_process_ones(tmp_path: Path) -> None:
    world = Env(tmp_path / "equal")
    with world.environ():
        origin = _origin(world.base, N)
    alone, pooled = clone(origin, "alone"), clone(origin, "pooled")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        proc, pid = _start(world, "0", procs)
        _first_read(world, alone)
        assert _poll(lambda: _all_embedded(world, alone), timeout=180, every=0.5), world.log()
        assert _children(pid) == []  # 0: the daemon's own encoder, no worker process
        rc, want, err = world.cli("read", QUERY, cwd=alone)
        assert rc == 0 and "partial" not in want, err
        world.stop()
        proc.wait(timeout=60)

        proc, pid = _start(world, "2", procs)
        seen: set[int] = set()
        first = _first_read(world, pooled)
        assert first.get("partial"), "the first read should answer before every vector exists"

        def done() -> bool:
            seen.update(_children(pid))
            return _all_embedded(world, pooled)

        assert _poll(done, timeout=180, every=0.05), world.log()
        assert len(seen) == 2, (seen, world.log())
        a, b = _cache(alone), _cache(pooled)
        assert len(a) == N and a == b
        rc, got, err = world.cli("read", QUERY, cwd=pooled)
        assert rc == 0 and "partial" not in got, err
        assert [(r["id"], r["score"]) for r in got["results"]] == [(r["id"], r["score"]) for r in want["results"]]
    finally:
        _end(world, procs)


def test_a_worker_killed_mid_run_loses_nothing(tmp_path: Path) -> None:
    world = Env(tmp_path / "kill")
    n = 2000
    with world.environ():
        origin = _origin(world.base, n)
    repo = clone(origin, "clone")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _, pid = _start(world, "2", procs)
        _first_read(world, repo)
        workers = _poll(lambda: (w if len(w := _children(pid)) == 2 else None), timeout=60, every=0.02) or []
        assert workers, world.log()
        stores = _stores(world, repo)
        os.kill(workers[0], signal.SIGKILL)
        assert stores[0]["embedded"] < n, "the run ended before the kill: nothing was shown"
        assert _poll(lambda: _all_embedded(world, repo), timeout=300, every=0.5), world.log()
        assert "embedding worker" in world.log() and "in-process" in world.log()
        cache = _cache(repo)
        assert len(cache) == n
        vecs = np.frombuffer(b"".join(cache.values()), dtype=np.float32).reshape(n, 384)
        assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-3)
        rc, got, err = world.cli("read", QUERY, cwd=repo)
        assert rc == 0 and "partial" not in got, err
    finally:
        _end(world, procs)


def test_no_worker_outlives_the_daemon(tmp_path: Path) -> None:
    world = Env(tmp_path / "exit")
    with world.environ():
        origin = _origin(world.base, 2000)
    stopped, killed = clone(origin, "stopped"), clone(origin, "killed")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        proc, pid = _start(world, "2", procs)
        _first_read(world, stopped)
        workers = _poll(lambda: (w if len(w := _children(pid)) == 2 else None), timeout=60, every=0.02) or []
        assert len(workers) == 2, world.log()
        world.stop()  # asked to stop mid-run
        proc.wait(timeout=60)
        assert _poll(lambda: not (set(workers) & _workers_anywhere()), timeout=15), workers

        proc, pid = _start(world, "2", procs)
        _first_read(world, killed)
        workers = _poll(lambda: (w if len(w := _children(pid)) == 2 else None), timeout=60, every=0.02) or []
        assert len(workers) == 2, world.log()
        os.kill(pid, signal.SIGKILL)  # no shutdown at all: the workers see their stdin close
        proc.wait(timeout=30)
        assert _poll(lambda: not (set(workers) & _workers_anywhere()), timeout=15), workers
    finally:
        _end(world, procs)


def test_a_bad_worker_count_is_warned_about_and_embedding_goes_on(tmp_path: Path) -> None:
    """``MEMSTORE_EMBED_WORKERS=lots``: a warning, the default count, and every vector made."""
    world = Env(tmp_path / "bad")
    with world.environ():
        origin = _origin(world.base, 100)
    repo = clone(origin, "clone")
    try:
        rc, answer, err = world.cli("read", QUERY, cwd=repo, MEMSTORE_DAEMON="0", MEMSTORE_EMBED_WORKERS="lots")
        assert rc == 0 and "partial" not in answer, err
        assert "MEMSTORE_EMBED_WORKERS='lots' is not a whole number" in err
        assert len(_cache(repo)) == 100
    finally:
        world.cleanup()


def test_background_vectors_are_each_memorys_own_text_alone(tmp_path: Path) -> None:
    """What the daemon's background embedding saves, through the worker processes (several
    requests in flight each), row by row: the vector filed under each memory's id is the
    encoder's own vector for that memory's text encoded alone. A read meanwhile is answered."""
    from memstore.index.embedder import Embedder
    from memstore.read.indexes import store_index
    from memstore.read.tuning import params_from_config

    world = Env(tmp_path / "rows")
    with world.environ():
        origin = _origin(world.base, N)
    repo = clone(origin, "clone")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        proc, _ = _start(world, "2", procs)
        assert _first_read(world, repo).get("partial"), "the first read should answer before every vector exists"
        rc, during, err = world.cli("read", QUERY, cwd=repo)
        assert rc == 0 and during["results"], err
        assert _poll(lambda: _all_embedded(world, repo), timeout=300, every=0.5), world.log()
        world.stop()  # saves the index on the way out
        proc.wait(timeout=60)
    finally:
        _end(world, procs)
    with world.environ():
        ws = open_workspace(cwd=repo)
        texts = {m.id: m.text for m in ws.catalog("repo").memories.values()}
        files = store_index(ws, "repo", params_from_config(ws.config)).files
        meta = files.read_meta()
        assert meta is not None
        saved, _ = files.saved_vectors(meta, 384)
        ids, rows = saved.row_ids(), saved.matrix()
        assert sorted(ids) == sorted(texts) and len(ids) == N
        own = Embedder(workers=0).encode([texts[mid] for mid in ids])  # one text a run: each its own
        assert np.allclose(rows, own, atol=1e-6), np.abs(rows - own).max()


def test_the_first_read_of_a_backlog_starts_the_workers_before_it_answers(tmp_path: Path) -> None:
    """A read that leaves a large backlog to the daemon starts the worker processes while it
    runs: they load the model meanwhile, so the background embedding finds them ready."""
    world = Env(tmp_path / "early")
    with world.environ():
        origin = _origin(world.base, N)
    repo = clone(origin, "clone")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _start(world, "2", procs)
        assert _first_read(world, repo).get("partial")
        assert _poll(lambda: _all_embedded(world, repo), timeout=300, every=0.5), world.log()
        log = world.log()
        started = log.index("embedding in 2 worker processes")
        behind = log.index("embedding the waiting memories in the background")
        assert started < behind, log
    finally:
        _end(world, procs)



def _embedding_under_way(world: Env, repo: Path) -> bool:
    stores = _stores(world, repo)
    return bool(stores) and stores[0]["embedding"] and 0 < stores[0]["embedded"] < stores[0]["total"]


@pytest.mark.parametrize("workers", ["2", "1"])
def test_the_keyword_build_of_a_clone_waits_for_its_background_embedding(tmp_path: Path, workers: str) -> None:
    """The keyword index of a fresh clone is built once the daemon's background embedding is
    done, not beside it (where it took most of the workers' share of the cores, or the GIL from
    the in-process encoder); reads meanwhile are answered from the scan lane, and afterwards
    from the built index with the same memories."""
    world = Env(tmp_path / f"order{workers}")
    n = 2000
    with world.environ():
        origin = _origin(world.base, n)
    repo = clone(origin, "clone")
    index = repo / ".memory" / ".index"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _start(world, workers, procs)
        _first_read(world, repo)
        seen: list[str] = []

        def watch() -> bool:
            # Looked at only while vectors are still coming: the build's folder, or its end.
            if _embedding_under_way(world, repo):
                seen.extend(p.name for p in index.glob("keyword.next-*"))
                if " memories built in " in world.log():
                    seen.append("built")
            return _all_embedded(world, repo)

        assert _poll(watch, timeout=300, every=0.05), world.log()
        assert seen == [], (seen, world.log())
        rc, during, err = world.cli("read", QUERY, cwd=repo)  # the scan lane (or the build, if done)
        assert rc == 0 and during["results"] and "partial" not in during, err
        assert _poll(lambda: f"keyword index of {n} memories built" in world.log(), timeout=120), world.log()
        log = world.log()
        assert log.index("embedded the waiting memories in") < log.index(f"keyword index of {n} memories built"), log
        rc, after, err = world.cli("read", QUERY, cwd=repo)
        assert rc == 0 and "partial" not in after, err
        assert [r["id"] for r in after["results"]] == [r["id"] for r in during["results"]]
    finally:
        _end(world, procs)


def test_a_backlog_over_the_threshold_builds_its_keyword_index_beside_the_embedding(tmp_path: Path) -> None:
    """Over ``MEMSTORE_BUILD_AFTER_EMBEDDING`` memories waiting for a vector (20,000 by default;
    lowered here), the daemon does not hold the keyword build for the embedding, which would
    leave the scan lane answering alone for as long as the workers take: the build runs beside
    it, and reads then come from the built index while vectors are still coming."""
    world = Env(tmp_path / "beside")
    n = 2000
    with world.environ():
        origin = _origin(world.base, n)
    repo = clone(origin, "clone")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        world.vars["MEMSTORE_BUILD_AFTER_EMBEDDING"] = "100"
        _start(world, "2", procs)
        _first_read(world, repo)
        built = f"keyword index of {n} memories built"
        done = "embedded the waiting memories in"
        assert _poll(lambda: built in world.log() or done in world.log(), timeout=300, every=0.05), world.log()
        log = world.log()
        assert built in log, log
        assert done not in log.split(built, 1)[0], log
    finally:
        _end(world, procs)


def test_a_keyword_index_rebuilt_mid_embedding_leaves_no_memory_without_a_vector(tmp_path: Path) -> None:
    """The keyword index deleted while the daemon embeds a clone (a person's `rm -rf`, or a
    build's folder set aside): the next read rebuilds it, and the daemon goes on embedding until
    every memory has its vector, instead of stopping with memories left waiting for good."""
    import shutil

    world = Env(tmp_path / "heal")
    n = 2000
    with world.environ():
        origin = _origin(world.base, n)
    repo = clone(origin, "clone")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _start(world, "2", procs)
        _first_read(world, repo)
        assert _poll(lambda: _embedding_under_way(world, repo), timeout=120, every=0.05), world.log()
        shutil.rmtree(repo / ".memory" / ".index" / "keyword")
        stores = _stores(world, repo)
        assert stores[0]["embedding"] and stores[0]["embedded"] < n, "the embedding ended first: nothing was shown"
        rc, _, err = world.cli("read", QUERY, cwd=repo)
        assert rc == 0, err
        assert "keyword index not found on disk" in world.log(), world.log()
        assert _poll(lambda: not _stores(world, repo)[0]["embedding"], timeout=300, every=0.5), world.log()
        stores = _stores(world, repo)
        assert stores[0]["embedded"] == stores[0]["total"] == n, (stores, world.log())
        assert _poll(lambda: f"keyword index of {n} memories built" in world.log(), timeout=120), world.log()
        rc, answer, err = world.cli("read", QUERY, cwd=repo)
        assert rc == 0 and answer["results"] and "partial" not in answer, err
    finally:
        _end(world, procs)


def test_the_workers_leave_out_what_a_read_encoded_first(tmp_path: Path) -> None:
    """A read while memories wait encodes its best keyword hits itself, ahead of the background
    embedding; the workers, handed every waiting text at the start, leave those out when they
    come to them instead of encoding them a second time. Every memory still gets its vector
    (each its own text's: the in-process encoder's rows are byte-equal to the workers')."""
    world = Env(tmp_path / "ahead")
    with world.environ():
        origin = _origin(world.base, N)
    repo = clone(origin, "clone")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _start(world, "2", procs)
        assert _first_read(world, repo).get("partial")
        for query in ("cache schema", "deploy token", "session build", "router handler", "fixture module"):
            rc, during, err = world.cli("read", query, cwd=repo)
            assert rc == 0 and during["results"], err
        assert _poll(lambda: _all_embedded(world, repo), timeout=300, every=0.5), world.log()
        runs = [x.split("; ")[-1].split(" texts encoded")[0].split(" of ") for x in world.log().splitlines()
                if "embedded the waiting memories in" in x and " texts encoded" in x]
        encoded, handed = sum(int(r[0]) for r in runs), sum(int(r[1]) for r in runs)
        assert 0 < encoded < handed, world.log()
    finally:
        _end(world, procs)
