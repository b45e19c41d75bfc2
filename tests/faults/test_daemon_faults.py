"""A running daemon whose `.index/` is deleted, truncated or garbled under it answers as before
(it holds the projections in memory, heals what it reads from disk) and writes the index
again at its next save. A real `memstore serve`, real files, real CLI calls."""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemonworld import Env, _poll, running_world
from test_projection_faults import garble, truncate

pytestmark = [pytest.mark.model, pytest.mark.slow]

QUERY = "sqlite migration fails because the column already exists"
TEXTS = ["The sqlite migration 0042 added the tracking_code column to shipments.",
         "Webhooks from the payments provider are retried three times with exponential backoff.",
         "The nightly backup job uploads a pg_dump of the orders database to the cold bucket.",
         "Feature flags are read from LaunchDarkly on every request, never cached in workers."]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    yield from running_world(tmp_path_factory, "faults", {"repo_a": "alpha"})


def _ids(out: Any) -> list[str]:
    return [r["id"] for r in out["results"]]


def _read(world: Env, **extra: str) -> dict[str, Any]:
    rc, out, err = world.cli("read", QUERY, cwd=world.repo_a, **extra)  # type: ignore[attr-defined]
    assert rc == 0, err
    return out


def _pid(world: Env) -> int:
    """The daemon's pid. A status call gives up after 5 s; on a loaded machine a daemon healing
    an index can take that long to answer, which is slowness, not the crash these tests look for."""
    answer = _poll(lambda: world.status().get("pid"), timeout=60)
    assert answer, world.log()
    return int(answer)


def test_index_deleted_under_the_daemon_answers_as_before_and_is_saved_again(world: Env) -> None:
    before = _read(world)
    assert before["results"]
    pid = _pid(world)
    index = world.repo_a / ".memory" / ".index"  # type: ignore[attr-defined]
    shutil.rmtree(index)
    after = _read(world)
    assert _ids(after) == _ids(before)
    # Deleting .index/ is allowed (the README says so): the answer says it is built again, not damaged.
    assert not [w for w in after.get("warnings", []) if "damaged" in w], after["warnings"]
    assert _pid(world) == pid
    # Its next save (in a pause) writes every projection again, nobody runs reindex.
    assert _poll(lambda: all((index / name).exists() for name in ("meta.json", "vectors.faiss", "catalog.json",
                                                                   "keyword")), timeout=60), world.log()
    fresh = _read(world, MEMSTORE_DAEMON="0")  # a process without the daemon reads what it saved
    assert _ids(fresh) == _ids(before) and not fresh.get("warnings"), fresh


@pytest.mark.parametrize("damage", [truncate, garble], ids=lambda f: f.__name__)
def test_index_damaged_under_the_daemon_answers_as_before(world: Env, damage: Any) -> None:
    before = _read(world)
    pid = _pid(world)
    index = world.repo_a / ".memory" / ".index"  # type: ignore[attr-defined]
    damage(index, random.Random(11))
    after = _read(world)
    assert _ids(after) == _ids(before)
    assert _pid(world) == pid  # no SIGBUS from a file truncated under its mapping
    # The daemon saves the projections again in its next pause; a fresh process then loads them
    # without finding anything to heal.
    # (a file found damaged may already be set aside: absent until the save writes it again)
    damaged = {name: (index / name).read_bytes() if (index / name).exists() else None
               for name in ("meta.json", "vectors.faiss", "catalog.json")}
    assert _poll(lambda: all((index / n).exists() and (index / n).read_bytes() != b for n, b in damaged.items()),
                 timeout=60), world.log()
    fresh = _read(world, MEMSTORE_DAEMON="0")
    assert _ids(fresh) == _ids(before) and not fresh.get("warnings"), fresh


def test_kill_9_of_the_daemon_mid_save_loses_nothing_and_the_next_process_reads(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The daemon writes through in memory and saves its projections in a pause; kill -9 it the
    moment a save's temp file shows (or at the end of the pause). Every acknowledged write is
    on disk, `check` is clean and a process without the daemon answers with all of them."""
    own = Env(tmp_path_factory.mktemp("killd"))
    repo = own.make_repo("repo")
    index = repo / ".memory" / ".index"
    acked: list[str] = []
    try:
        for trial in range(2):  # bench/faults.py runs 50
            proc = own.start("--idle", "600")
            for i in range(2):
                text = TEXTS[trial * 2 + i]
                rc, out, err = own.cli("write", "--kind", "fact", "--evidence", "user:seen", "--text", text, cwd=repo)
                assert rc == 0, err
                acked.append(out["id"])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not any(n.endswith(".tmp") for n in _listdir(index)):
                time.sleep(0.0005)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        rc, report, err = own.cli("check", cwd=repo, MEMSTORE_DAEMON="0")
        assert rc == 0 and report["ok"], report or err
        rc, listed, err = own.cli("list", cwd=repo, MEMSTORE_DAEMON="0")
        assert rc == 0 and set(acked) <= {m["id"] for m in listed["memories"]}, listed
        rc, out, err = own.cli("read", "which sqlite migration added the tracking_code column", cwd=repo,
                               MEMSTORE_DAEMON="0")
        assert rc == 0 and out["results"] and {r["id"] for r in out["results"]} <= set(acked), out
    finally:
        own.cleanup()


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
