"""Damaged projections heal within the read that meets them: `.index/` deleted, truncated or
garbled, then the next CLI read (a real process) answers as before, without `reindex`."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import PROBLEM, SOLUTION, TACTIC, CliResult, git, make_git_repo, write_req

from memstore import gitops
from memstore.read import retrieve
from memstore.store.workspace import open_workspace
from memstore.verbs import api

pytestmark = [pytest.mark.model]

QUERY = "alembic upgrade head fails in tests because the column already exists"
FACTS = ["The API server reads its settings from config/server.toml at start-up.",
         "The team prefers pytest fixtures over unittest setUp methods in new tests.",
         "Shipments are stored in PostgreSQL 16; the tracking_code column is unique per carrier."]


def _seed(repo: Path) -> None:
    ws = open_workspace(cwd=repo)
    pid = api.write(ws, write_req("problem", PROBLEM))["id"]
    api.write(ws, write_req("solution", SOLUTION, links={"problem_id": pid}))
    api.write(ws, write_req("failed_tactic", TACTIC, links={"problem_id": pid}))
    for text in FACTS:
        api.write(ws, write_req("fact", text))


def _read(repo: Path) -> dict[str, Any]:
    return retrieve.read(open_workspace(cwd=repo), {"query": QUERY}, log_episode=False)


def _answer(out: Any) -> list[str]:
    return [r["id"] for r in out["results"]]


def _garble(path: Path, rng: random.Random) -> None:
    """Overwrite bytes inside the file, in place, keeping its size."""
    data = bytearray(path.read_bytes())
    if not data:
        return
    for _ in range(max(1, len(data) // 512)):
        at = rng.randrange(len(data))
        chunk = rng.randbytes(min(16, len(data) - at))
        data[at:at + len(chunk)] = chunk
    with open(path, "r+b") as fh:
        fh.write(data)


def _files(index: Path) -> list[Path]:
    return [p for p in sorted(index.rglob("*")) if p.is_file() and not p.name.endswith(".lock")
            and "WRITELOCK" not in p.name]


def delete(index: Path, rng: random.Random) -> None:
    shutil.rmtree(index)


def truncate(index: Path, rng: random.Random) -> None:
    for path in _files(index):
        with open(path, "r+b") as fh:
            fh.truncate(path.stat().st_size // 2)


def garble(index: Path, rng: random.Random) -> None:
    for path in _files(index):
        _garble(path, rng)


def garble_segment(index: Path, rng: random.Random) -> None:
    """The issue's case: a Whoosh segment garbled, nothing else touched."""
    for path in (index / "keyword").glob("*.seg"):
        _garble(path, rng)


@pytest.mark.parametrize("damage", [delete, truncate, garble, garble_segment], ids=lambda f: f.__name__)
def test_a_damaged_index_heals_within_the_next_read(repo: Path, cli: Callable[..., CliResult],
                                                      damage: Callable[[Path, random.Random], None]) -> None:
    _seed(repo)
    before = _read(repo)  # in-process answers are the CLI's (the model loads once per test worker)
    assert before["results"]
    damage(repo / ".memory" / ".index", random.Random(7))
    rc, after, err = cli("read", QUERY, cwd=repo)
    assert rc == 0, err
    assert _answer(after) == _answer(before)
    if damage is not delete:  # healing is said once, in the answer that healed
        assert any("rebuilt from the files" in w for w in after.get("warnings", [])), after
    again = _read(repo)
    assert _answer(again) == _answer(before) and not again.get("warnings"), again


def test_reindex_full_reparses_a_file_edited_without_a_change_of_size_or_mtime(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    ws = open_workspace(cwd=repo)
    mid = api.write(ws, write_req("fact", "The deploy job runs on the blue runner pool."))["id"]
    rc, shown, err = cli("show", mid, cwd=repo)
    assert rc == 0, err
    path = repo / shown["memory"]["path"]
    st = path.stat()
    path.write_text(path.read_text().replace("blue runner", "gray runner"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size
    rc, _out, err = cli("reindex", "--full", cwd=repo)
    assert rc == 0, err
    rc, shown, err = cli("show", mid, cwd=repo)
    assert rc == 0 and "gray runner" in shown["memory"]["text"], shown


def test_a_committed_index_symlink_is_replaced_and_its_target_untouched(
        tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    """A repo that commits `.memory/.index -> ../../somedir`: memstore must neither delete nor
    overwrite anything in somedir, in a real clone of that repo."""
    origin = make_git_repo(tmp_path / "origin")
    gitops.toplevel.cache_clear()
    api.init(open_workspace(cwd=origin))
    _seed(origin)
    target = origin / "somedir"
    (target / "keyword").mkdir(parents=True)
    (target / "keyword" / "precious.txt").write_text("keep me\n")
    (target / "meta.json").write_text('{"mine": true}\n')
    (target / "catalog.json").write_text('{"also": "mine"}\n')
    shutil.rmtree(origin / ".memory" / ".index")  # the seeding's own index makes way for the link
    (origin / ".memory" / ".index").symlink_to(Path("..") / "somedir", target_is_directory=True)
    git(origin, "add", "-f", ".memory", "somedir")
    git(origin, "commit", "-q", "-m", "memories, and an index link")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    assert (clone / ".memory" / ".index").is_symlink()
    snapshot = {p.relative_to(clone / "somedir"): (p.read_bytes(), p.stat().st_mtime_ns)
                for p in (clone / "somedir").rglob("*") if p.is_file()}

    rc, out, err = cli("read", QUERY, cwd=clone)
    assert rc == 0 and out["results"], err
    rc, out, err = cli("write", "--kind", "fact", "--evidence", "user:said so", "--text",
                       "The staging database is reset every night at 02:00 UTC.", cwd=clone)
    assert rc == 0, err
    rc, out, err = cli("reindex", "--full", cwd=clone)
    assert rc == 0, err

    index = clone / ".memory" / ".index"
    assert index.is_dir() and not index.is_symlink()
    assert (index / "meta.json").is_file()
    after = {p.relative_to(clone / "somedir"): (p.read_bytes(), p.stat().st_mtime_ns)
             for p in (clone / "somedir").rglob("*") if p.is_file()}
    assert after == snapshot
