"""The partial row space a read ranks while memories wait for a vector (``rowspace.PartialRows``),
kept between reads and brought up to date by what arrived since: it equals ``partial_rows``'
fresh build after every batch, over real vector indexes and through the daemon's own background
embedding, and the reads meanwhile are answered and marked partial."""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from daemonworld import Env, _poll, clone, commit_all

from memstore import gitops
from memstore.index.embedder import close_shared
from memstore.index.vectors import VectorIndex
from memstore.read import retrieve, rowspace
from memstore.read.scope import open_scope
from memstore.read.tuning import params_from_config
from memstore.store.ids import ALPHABET
from memstore.store.kinds import KIND_DIRS
from memstore.store.model import Memory
from memstore.store.workspace import open_workspace
from memstore.verbs import api

WORDS = ["cache", "worker", "queue", "schema", "index", "migration", "deploy", "token", "session", "build",
         "config", "retry", "timeout", "client", "server", "router", "handler", "fixture", "module", "parser"]
QUERY = "queue worker retry timeout"


def _data(rows: rowspace.Rows, unembedded: np.ndarray) -> tuple[Any, ...]:
    assert rows.excluded is not None and rows.codes is not None
    return (rows.ids, rows.kinds, rows.pos, rows.excluded.tolist(), rows.codes.tolist(),
            rows.matrix.shape, rows.matrix.tobytes(), unembedded.tolist())


@pytest.mark.parametrize("stores", [1, 2])
def test_kept_partial_rows_equal_a_fresh_build_as_vectors_arrive(stores: int) -> None:
    """Batches of vectors arrive for waiting memories (in order, out of order), memories are
    edited (their vector leaves and they wait again), removed, filtered out, and new ones come
    to wait: after each step the kept row space is the fresh one, byte for byte."""
    rng = random.Random(stores)
    np_rng = np.random.default_rng(stores)
    dim = 8
    indexes = [VectorIndex(dim) for _ in range(stores)]
    kinds = list(KIND_DIRS)
    memories = {f"m{i:04d}": Memory(id=f"m{i:04d}", kind=rng.choice(kinds), text="x") for i in range(300)}
    waiting = list(memories)
    ok = {m for m in memories if rng.random() < 0.8}
    kept = rowspace.PartialRows(tuple(indexes), dim)
    rows = rowspace.build_rows(indexes, ok, memories, dim)
    serial = len(memories)
    for step in range(60):
        changed: set[str] = set()
        roll = rng.random()
        if roll < 0.6 and waiting:  # a batch: mostly the head of the queue, sometimes from anywhere
            n = min(len(waiting), rng.randint(1, 25))
            batch = waiting[:n] if rng.random() < 0.7 else rng.sample(waiting, n)
            waiting = [m for m in waiting if m not in set(batch)]
            for mid in batch:
                rng.choice(indexes).add([mid], np_rng.standard_normal((1, dim)).astype(np.float32))
            changed.update(batch)
        elif roll < 0.75:  # an edited memory: its vector goes, and it waits at the front
            index = rng.choice(indexes)
            if len(index):
                mid = rng.choice(index.row_ids())
                index.remove([mid])
                waiting.insert(0, mid)
                changed.add(mid)
        elif roll < 0.85:  # a memory removed, with or without a vector
            mid = rng.choice(sorted(memories))
            memories.pop(mid)
            for index in indexes:
                index.remove([mid])
            changed.add(mid)
        else:  # a new memory waits; another changes kind or scope
            mid = f"m{serial:04d}"
            serial += 1
            memories[mid] = Memory(id=mid, kind=rng.choice(kinds), text="x")
            waiting.append(mid)
            other = rng.choice(sorted(memories))
            memories[other] = Memory(id=other, kind=rng.choice(kinds), text="x")
            changed.update((mid, other))
        for mid in changed:
            if mid in memories and rng.random() < 0.8:
                ok.add(mid)
            else:
                ok.discard(mid)
        updated = rowspace.update_rows(rows, indexes, ok, memories, changed, dim)
        rows = updated if updated is not None else rowspace.build_rows(indexes, ok, memories, dim)
        # The order the read hands over: the waiting list, duplicates and all.
        asked = waiting + waiting[: step % 3]
        got = kept.rows(rows, asked, ok, memories, dim)
        assert _data(*got) == _data(*rowspace.partial_rows(rows, asked, ok, memories, dim)), step


def _id(i: int) -> str:
    return "01m6gbcm3h832wbgwh17z" + "".join(ALPHABET[(i >> (5 * k)) & 31] for k in range(4, -1, -1))


def _origin(base: Path, n: int) -> Path:
    root = base / "origin"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
    gitops.toplevel.cache_clear()
    api.init(open_workspace(cwd=root))
    rng = random.Random(5)
    facts = root / ".memory" / "facts"
    for i in range(n):
        text = f"Note {i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randrange(4, 60))) + "."
        (facts / f"{_id(i)}.md").write_text(
            f"---\nid: {_id(i)}\nkind: fact\nscope: repo\ncreated: 2026-11-01T10:00:00Z\n---\n{text}\n")
    commit_all(root)
    return root


@pytest.mark.model
@pytest.mark.slow
def test_reads_during_a_daemons_background_embedding_rank_the_rebuilt_row_space(tmp_path: Path) -> None:
    """A fresh clone's first read through the daemon leaves its memories to the background
    embedding (the encoder pool's workers). Until the last vector, each read goes through the
    daemon's request path and is answered and marked partial; between them, under the
    workspace's lock, the read pipeline's own row space (the kept one, advanced by each batch
    the embedding put in) is compared with the one built from scratch, and a second look at the
    scope changes nothing in the index (no vector came meanwhile: nothing to plan)."""
    from memstore.surfaces import client
    from memstore.surfaces.daemon import Daemon
    from memstore.surfaces.daemon_work import replying

    world = Env(tmp_path / "kept")
    with world.environ():
        origin = _origin(world.base, 1200)
    repo = clone(origin, "clone")
    world.vars["MEMSTORE_EMBED_WORKERS"] = "2"
    with world.environ():
        client.ensure_runtime_dir(world.env())
        daemon = Daemon(world.rdir, 600)
        daemon.warm_up()
        msg = {"verb": "cli", "version": daemon.version, "cwd": str(repo), "env": client.forwarded_env(world.env()),
               "argv": ["read", QUERY], "stdin": None, "tty": False, "new_id": None, "color": False}
        try:
            with replying():  # leaves the backlog to the background embedding, after the reply
                reply = daemon.handle(msg)
            assert reply["exit_code"] == 0, reply
            entry = daemon.stores.all()[0]
            seen: set[int] = set()
            while True:
                with replying():
                    reply = daemon.handle(msg)  # the request path: answered, marked partial
                assert reply["exit_code"] == 0, reply
                with entry.using():
                    ws = entry.ws
                    sc = open_scope(ws, True, params_from_config(ws.config))
                    waiting = [m for si in sc.indexes if si.embedding_pending for m in si.pending]
                    if not waiting:
                        break
                    # A read that may not wait finds nothing new to plan for what waits: the
                    # index keeps its generation (and the read its kept row space).
                    before = [si.state.generation for si in sc.indexes]
                    sc = open_scope(ws, True, params_from_config(ws.config))
                    assert [si.state.generation for si in sc.indexes] == before
                    trace: dict[str, Any] = {}
                    answer, _ = retrieve.answer_in(sc, {"query": QUERY}, time.perf_counter(), trace)
                    assert answer["results"] and answer["partial"]["total"] == 1200, answer
                    assert "embedding is still under way" in answer["partial"]["reason"], answer
                    base = sc.cache["rows"].rows
                    fresh = rowspace.partial_rows(base, waiting, trace["ok"], sc.memories, base.matrix.shape[1])
                    used = trace["rows"]
                    mask = np.arange(len(used.ids)) >= len(base.ids)
                    assert _data(used, mask) == _data(*fresh)
                    seen.add(len(base.ids))
                time.sleep(0.05)
            assert len(seen) >= 3, seen  # several batches met, not one state checked over and over
            assert _poll(lambda: not daemon.work.embedding(entry), timeout=60)
        finally:
            daemon.handle({"verb": "stop"})
            daemon.watcher.stop()
            close_shared()
