"""A running daemon whose `.index/` is deleted, truncated or garbled under it answers as before
(it holds the projections in memory, heals what it reads from disk) and writes the index
again at its next save. A real `memstore serve`, real files, real CLI calls."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from test_daemon import Env, _poll, _seed
from test_projection_faults import garble, truncate

pytestmark = [pytest.mark.model, pytest.mark.slow]

QUERY = "sqlite migration fails because the column already exists"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    world = Env(tmp_path_factory.mktemp("faults"))
    old = dict(os.environ)
    os.environ.update(world.env())
    try:
        world.repo_a = world.make_repo("repo_a")  # type: ignore[attr-defined]
        world.ids_a = _seed(world, world.repo_a, "alpha")  # type: ignore[attr-defined]
    finally:
        os.environ.clear()
        os.environ.update(old)
    world.proc = world.start("--idle", "600")  # type: ignore[attr-defined]
    yield world
    world.cleanup()
    world.proc.wait(timeout=30)  # type: ignore[attr-defined]


def _ids(out: Any) -> list[str]:
    return [r["id"] for r in out["results"]]


def _read(world: Env, **extra: str) -> dict[str, Any]:
    rc, out, err = world.cli("read", QUERY, cwd=world.repo_a, **extra)  # type: ignore[attr-defined]
    assert rc == 0, err
    return out


def test_index_deleted_under_the_daemon_answers_as_before_and_is_saved_again(world: Env) -> None:
    before = _read(world)
    assert before["results"]
    pid = world.status()["pid"]
    index = world.repo_a / ".memory" / ".index"  # type: ignore[attr-defined]
    shutil.rmtree(index)
    assert _ids(_read(world)) == _ids(before)
    assert world.status()["pid"] == pid
    # Its next save (in a pause) writes every projection again, nobody runs reindex.
    assert _poll(lambda: all((index / name).exists() for name in ("meta.json", "vectors.faiss", "catalog.json",
                                                                   "keyword")), timeout=60), world.log()
    fresh = _read(world, MEMSTORE_DAEMON="0")  # a process without the daemon reads what it saved
    assert _ids(fresh) == _ids(before) and not fresh.get("warnings"), fresh


@pytest.mark.parametrize("damage", [truncate, garble], ids=lambda f: f.__name__)
def test_index_damaged_under_the_daemon_answers_as_before(world: Env, damage: Any) -> None:
    before = _read(world)
    pid = world.status()["pid"]
    index = world.repo_a / ".memory" / ".index"  # type: ignore[attr-defined]
    damage(index, random.Random(11))
    after = _read(world)
    assert _ids(after) == _ids(before)
    assert world.status()["pid"] == pid  # no SIGBUS from a file truncated under its mapping
    # The daemon saves the projections again in its next pause; a fresh process then loads them
    # without finding anything to heal.
    damaged = {name: (index / name).read_bytes() for name in ("meta.json", "vectors.faiss", "catalog.json")}
    assert _poll(lambda: all((index / n).exists() and (index / n).read_bytes() != b for n, b in damaged.items()),
                 timeout=60), world.log()
    fresh = _read(world, MEMSTORE_DAEMON="0")
    assert _ids(fresh) == _ids(before) and not fresh.get("warnings"), fresh
