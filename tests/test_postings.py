"""The postings projection (index/postings.py): a large segment's postings decoded once into a
file beside it. Read back, every term's postings are the ones Whoosh's blocks decode to, and
whole reads answer the same ids and scores with it as without; a damaged, truncated, foreign or
linked file is not believed (the read decodes the blocks and answers the same), a merge or a
rebuild leaves none stale in use, and writing one is not a change of the keyword index's files.
Through the real daemon: the projection is written in a pause after the store is loaded, reads
answer the same with it, and a process without the daemon uses it without rebuilding anything."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from daemonworld import Env, _poll, commit_all

from memstore import gitops
from memstore.index import postings
from memstore.index.index_files import keyword_files_state
from memstore.index.keyword import PROJECT_POSTINGS, KeywordIndex, _read_postings, folder_listing
from memstore.read import ranking
from memstore.store.ids import ALPHABET
from memstore.store.workspace import open_workspace
from memstore.verbs import api

WORDS = ["migration", "column", "sqlite", "postgres", "timeout", "retry", "kafka", "consumer", "offset",
         "redis", "cache", "eviction", "tenant", "billing", "invoice", "webhook", "signature", "pytest",
         "fixture", "flaky", "deadlock", "vacuum", "certificate", "tls", "handshake", "E11000",
         "resp.raise_for_status()", "app/db/session.py", "UniqueViolationError"]
QUERIES = ["sqlite migration column already exists", "kafka consumer offset retry", "flaky pytest fixture",
           "tls certificate handshake", "billing webhook signature invoice", "redis", "nothing matches zzz",
           "raise_for_status in session.py", "E11000 UniqueViolationError", "ticket17 ticket230 kafka"]


def _doc(rnd: random.Random, i: int) -> tuple[str, str, list[str], str]:
    words = [rnd.choice(WORDS) for _ in range(rnd.randint(4, 30))]  # repeats: term frequency > 1
    words.append(f"ticket{rnd.randrange(400)}")  # rarer words: terms of one block
    return f"m{i:05d}", "fact", rnd.sample(WORDS[:20], rnd.randint(0, 2)), " ".join(words)


KEY = b"this user's projection key".ljust(32, b".")  # what StoreIndex hands its keyword index


def _open(folder: Path) -> KeywordIndex:
    ki = KeywordIndex(folder, ranking.RankingParams())
    ki.seal = KEY
    return ki


def _index(folder: Path, n: int = 3000, seed: int = 3) -> KeywordIndex:
    """A keyword index with one large segment (a bulk build), a small one, and deletions."""
    rnd = random.Random(seed)
    ki = _open(folder)
    ki.apply([_doc(rnd, i) for i in range(n)], [])
    ki.apply([_doc(rnd, i) for i in range(n, n + 40)], [f"m{i:05d}" for i in range(5, 400, 17)])
    return ki


def _project(ki: KeywordIndex) -> list[Path]:
    """Write the projections the index lacks, as the daemon's idle work does; their paths."""
    out = []
    for build in ki.projection_builds():
        while not build.step():
            pass
        assert ki.projected(build) is not None
        out.append(ki.folder / postings.sidecar_name(build.segment_id))
    return out


def _answers(ki: KeywordIndex) -> list[list[tuple[str, float, float, int, int, int]]]:
    out = [[(h.id, h.score, h.coverage, h.code_df, h.docs, h.word_df) for h in ki.hits(q, 60)] for q in QUERIES]
    assert ki._scorer is not None, "the array scorer failed and fell back to Whoosh's search"
    return out


def _plain(folder: Path) -> KeywordIndex:
    """The same files read without a projection: today's block decoding."""
    ki = _open(folder)
    assert ki._scorer is not None
    ki._scorer.folder = None
    return ki


@pytest.fixture(scope="module")
def projected(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeywordIndex, Path]:
    ki = _index(tmp_path_factory.mktemp("kw") / "keyword")
    files = _project(ki)
    assert len(files) == 1 and files[0].is_file()  # the large segment only
    return ki, files[0]


def test_projected_postings_are_the_decoded_blocks_term_by_term(projected: tuple[KeywordIndex, Path]) -> None:
    """Every term of the large segment the projection holds gives the document numbers and
    weights (float64) Whoosh's blocks decode to; terms of one block are decoded as before."""
    ki, _ = projected
    fresh = _open(ki.folder)
    scorer = fresh._scorer
    assert scorer is not None
    big = max((r for r, _ in fresh.searcher.reader().leaf_readers()), key=lambda r: r.doc_count_all())
    proj = scorer.projection(big)
    assert proj is not None and proj.terms > 20
    seen = {"projected": 0, "one block": 0}
    for (field_name, tbytes), info in big._terms.items():
        if field_name not in ("text", "code", "tags"):
            continue
        text = tbytes.decode("utf-8")
        got = scorer._projected(big, field_name, text)
        want = _read_postings(big, field_name, text)
        assert got is not None and got is not False and want is not None
        assert got[0].tolist() == want[0].tolist(), (field_name, text)
        assert got[1].dtype == np.float64 and got[1].tolist() == want[1].tolist(), (field_name, text)
        in_file = proj.get(int(info.extent()[0]), int(info.doc_frequency())) is not None
        assert in_file == (info.doc_frequency() > PROJECT_POSTINGS)
        seen["projected" if in_file else "one block"] += 1
    assert seen["projected"] >= 20 and seen["one block"] >= 5
    assert scorer._projected(big, "text", "zzznotaword") is None
    fresh.close()


def test_whole_reads_are_the_same_with_and_without_the_projection(projected: tuple[KeywordIndex, Path]) -> None:
    ki, _ = projected
    with_it = _open(ki.folder)
    without = _plain(ki.folder)
    assert _answers(with_it) == _answers(without)
    assert any(p is not None for p in with_it._scorer._projections.values())  # type: ignore[union-attr]
    assert not any(without._scorer._projections.values())  # type: ignore[union-attr]
    with_it.close()
    without.close()


def test_weights_that_float32_cannot_hold_are_kept_in_double(tmp_path: Path) -> None:
    folder = tmp_path / "kw"
    folder.mkdir()
    key = b"k" * 32
    writer = postings.PostingsWriter(folder, "MAIN_abc", 1000, key)
    writer.add(10, np.arange(0, 600, 3), np.full(200, 0.1))  # 0.1 is not a float32
    writer.add(5, np.arange(300), np.where(np.arange(300) % 2, 2.0, 1.0))
    writer.add(7, np.arange(1, 500), np.ones(499))
    writer.finish()
    got = postings.PostingsFile(folder, "MAIN_abc", 1000, key)
    ids, weights = got.get(10, 200)  # type: ignore[misc]
    assert ids.tolist() == list(range(0, 600, 3)) and weights.tolist() == [0.1] * 200
    assert got.get(5, 300)[1].tolist() == [2.0 if i % 2 else 1.0 for i in range(300)]  # type: ignore[index]
    assert got.get(7, 499)[1].tolist() == [1.0] * 499  # type: ignore[index]
    assert got.get(6, 10) is None
    with pytest.raises(postings.BadPostings):
        got.get(7, 498)  # not the count Whoosh's TermInfo gives: not this term's record
    got.close()
    with pytest.raises(postings.BadPostings):  # another user's key: not believed
        postings.PostingsFile(folder, "MAIN_abc", 1000, b"x" * 32)
    with pytest.raises(postings.BadPostings):  # another segment's document count
        postings.PostingsFile(folder, "MAIN_abc", 999, key)


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["truncated", "short", "garbled_slice", "garbled_header", "foreign_key",
                                    "other_segment", "symlink"])
def test_a_bad_projection_is_not_believed_and_the_answer_is_the_same(tmp_path: Path, damage: str) -> None:
    """The read decodes Whoosh's blocks instead and answers as without the file; the file is
    removed (the daemon writes it again; a link is removed, its target untouched); the
    keyword index is not called damaged and its files are unchanged."""
    folder = tmp_path / "keyword"
    ki = _index(folder)
    want = _answers(_plain(folder))
    (path,) = _project(ki)
    target = tmp_path / "target"
    if damage == "truncated":
        os.truncate(path, path.stat().st_size - 9)
    elif damage == "short":
        os.truncate(path, 10)
    elif damage == "garbled_slice":
        _flip(path, postings.HEADER + 5)  # the first term's document numbers
    elif damage == "garbled_header":
        _flip(path, 20)
    elif damage == "foreign_key":
        ki.close()
        path.unlink()
        ki = KeywordIndex(folder, ranking.RankingParams())
        ki.seal = b"another user's key".ljust(32, b"!")
        _project(ki)
    elif damage == "other_segment":
        # a whole projection of another index's segment, under this segment's name
        (other,) = _project(_index(tmp_path / "other", seed=4))
        os.replace(other, path)
    elif damage == "symlink":
        target.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(target)
    ki.close()
    files = folder_listing(folder)
    reader = _open(folder)
    assert _answers(reader) == want
    assert not path.exists() and not path.is_symlink()
    if damage == "symlink":
        assert target.is_file()
    assert not reader.damaged() and folder_listing(folder) == files
    reader.close()


def test_a_read_meeting_a_damaged_slice_falls_back_mid_query(tmp_path: Path) -> None:
    """The projection opened fine and a later term's record fails its check: that term is
    decoded from the blocks, the projection is dropped, the answer is unchanged."""
    folder = tmp_path / "keyword"
    ki = _index(folder)
    want = _answers(_plain(folder))
    (path,) = _project(ki)
    ki.close()
    reader = _open(folder)
    reader.hits("zzznotaword", 5)  # opens the projection
    assert any(reader._scorer._projections.values())  # type: ignore[union-attr]
    size = path.stat().st_size
    with open(path, "r+b") as fh:  # every slice's bytes garbled in place, the header intact
        fh.seek(postings.HEADER)
        fh.write(b"\xff" * (size // 2 - postings.HEADER))
    assert _answers(reader) == want
    assert not path.exists()
    reader.close()


def test_a_merge_or_a_rebuild_leaves_no_stale_projection_in_use(tmp_path: Path) -> None:
    folder = tmp_path / "keyword"
    ki = _index(folder)
    (path,) = _project(ki)
    ki.hits("kafka consumer", 10)
    # Whoosh merges every segment into one: its clean-up removes the old segment's projection
    ki.ix.optimize()
    ki._take_print()  # committed here, as apply notes its own commits
    assert not path.exists()
    assert _answers(ki) == _answers(_plain(folder))
    assert not any(ki._scorer._projections.values())  # type: ignore[union-attr]
    (merged,) = _project(ki)
    assert merged != path and merged.is_file()
    # left behind by a process that died mid-way: a projection of a gone segment, a temp file
    stale = folder / postings.sidecar_name("MAIN_zzzzzzzzzzzzzzzz")
    stale.write_bytes(merged.read_bytes())
    temp = folder / f".{merged.name}.{_dead_pid()}.tmp"
    temp.write_bytes(b"partial")
    assert ki.projection_builds() == []
    assert not stale.exists() and not temp.exists() and merged.is_file()
    # a rebuild starts from an empty folder
    ki.reset()
    assert not merged.exists()
    assert [p.name for p in folder.iterdir() if postings.is_sidecar(p.name)] == []
    ki.close()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_writing_the_projection_is_not_a_change_of_the_keyword_files(tmp_path: Path) -> None:
    """The sealed metadata records the keyword folder's files; a projection written after it
    was saved leaves the folder as recorded ("saved", not "added": no rebuild), and a process
    holding the index open does not call it damaged."""
    folder = tmp_path / "keyword"
    ki = _index(folder)
    recorded = {"files": {f"keyword/{name}": sig for name, sig in ki.files().items()}}
    _project(ki)
    assert keyword_files_state(folder_listing(folder), recorded) == "saved"
    assert not ki.damaged()
    assert {f"keyword/{name}": sig for name, sig in ki.files().items()} == recorded["files"]
    ki.close()


# -- through the real daemon ------------------------------------------------------------------------
N = 1100  # over keyword.PROJECT_DOCS: the segment a bulk build makes gets a projection


def _mid(i: int) -> str:
    return "01m6gbcm3h832wbgwh17z" + "".join(ALPHABET[(i >> (5 * k)) & 31] for k in range(4, -1, -1))


@pytest.mark.model
@pytest.mark.slow
def test_the_daemon_writes_the_projection_in_a_pause_and_reads_answer_the_same(tmp_path: Path) -> None:
    world = Env(tmp_path)
    try:
        _daemon_trial(world)
    finally:
        world.cleanup()


def _daemon_trial(world: Env) -> None:
    with world.environ():
        repo = world.base / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
        gitops.toplevel.cache_clear()
        api.init(open_workspace(cwd=repo, env=world.env()))
        rnd = random.Random(7)
        facts = repo / ".memory" / "facts"
        for i in range(N):
            text = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(4, 20)))
            (facts / f"{_mid(i)}.md").write_text(
                f"---\nid: {_mid(i)}\nkind: fact\nscope: repo\ncreated: 2026-11-01T10:00:00Z\n---\n{text}\n")
        commit_all(repo)
    # The index built by a process of its own (no daemon), as a user's first read builds it.
    rc, _, err = world.cli("reindex", cwd=repo, MEMSTORE_DAEMON="0")
    assert rc == 0, err
    keyword = repo / ".memory" / ".index" / "keyword"
    segments = sorted(p.name for p in keyword.iterdir())
    assert not any(postings.is_sidecar(n) for n in segments)
    want = []  # each query's answer before any projection exists
    for query in QUERIES[:2]:
        rc, answer, err = world.cli("read", query, cwd=repo, MEMSTORE_DAEMON="0")
        assert rc == 0 and answer["results"], err
        want.append(_ranked(answer))
    proc = world.start("--idle", "600")
    try:
        rc, answer, err = world.cli("read", QUERIES[1], cwd=repo)  # the daemon loads the store
        assert rc == 0 and _ranked(answer) == want[1], err
        made = _poll(lambda: [p for p in keyword.iterdir() if postings.is_sidecar(p.name)], timeout=90)
        assert made, world.log()
        _poll(lambda: "postings projection of" in world.log(), timeout=10)
        assert "postings projection of" in world.log()
        rc, answer, err = world.cli("read", QUERIES[0], cwd=repo)  # its words first met now: from the file
        assert rc == 0 and _ranked(answer) == want[0], err
        rc, answer, err = world.cli("read", QUERIES[1], cwd=repo)
        assert rc == 0 and _ranked(answer) == want[1], err
    finally:
        world.stop()
        proc.wait(timeout=30)
    # A process without the daemon reads with the projection and rebuilds nothing: the segment
    # files are the ones the reindex wrote, and no warning says the index was rebuilt.
    for query, ranked in zip(QUERIES[:2], want, strict=True):
        rc, answer, err = world.cli("read", query, cwd=repo, MEMSTORE_DAEMON="0")
        assert rc == 0 and _ranked(answer) == ranked, err
        assert not any("rebuilt" in w for w in answer.get("warnings", [])), answer.get("warnings")
    now = sorted(p.name for p in keyword.iterdir())
    assert [n for n in now if not postings.is_sidecar(n)] == segments
    assert [n for n in now if postings.is_sidecar(n)] == [p.name for p in made]


def _ranked(answer: dict[str, Any]) -> list[tuple[str, float]]:
    return [(r["id"], r["score"]) for r in answer["results"]]


def test_the_pause_after_the_projection_runs_at_the_daemons_own_priority() -> None:
    """The projection's steps lower their thread's priority, which a thread cannot take back;
    the neighbour-list fill after them holds a store's lock a slice at a time, so a request
    waiting for that lock would wait on a thread at nice 19 were both on one thread."""
    import threading

    from memstore.surfaces import daemon_work

    seen: dict[str, int] = {}

    class Watched(daemon_work.Background):
        def flush_all(self) -> None:
            pass

        def project_all(self) -> None:
            daemon_work._lower_priority()
            seen["projection"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

        def fill_all(self) -> None:
            seen["fill"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    no_stores: Any = None  # the overridden steps are the only ones that would read them
    Watched(no_stores, threading.Event(), lambda: (0, 0.0)).idle_work()
    assert seen == {"projection": 19, "fill": own}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own
