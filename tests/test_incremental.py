"""Views kept current by deltas (catalog log, link graph, scope view, row space, index manifests)
equal the same views rebuilt from scratch."""

from __future__ import annotations

import copy
import os
import random
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import PROBLEM, SOLUTION, TACTIC, reopen, write_req
from watchdog.events import DirModifiedEvent, FileCreatedEvent, FileSystemEvent

from memstore.index.vectors import VectorIndex
from memstore.read import indexes, ranking, retrieve, rowspace, scopeview
from memstore.read.neighbours import Neighbours
from memstore.store.catalog import Catalog
from memstore.store.graph import Graph, LinkIndex
from memstore.store.model import RELATION_TYPES, Event, Memory
from memstore.store.watch import Watcher, _Handler
from memstore.store.workspace import Workspace, open_workspace
from memstore.verbs import api

KIND_DIRS = {"problem": "problems", "solution": "solutions", "failed_tactic": "failed_tactics",
             "change": "changes", "fact": "facts", "preference": "preferences"}


def graph_data(g: Graph) -> tuple[Any, ...]:
    """A graph as plain data, list order included; empty entries do not count."""
    return (sorted(g.archived), {k: v for k, v in g.attempts.items() if v},
            {k: v for k, v in g.changes_for.items() if v}, dict(g.superseded_by),
            {k: [asdict(v) for v in vs] for k, vs in g.votes.items() if vs}, dict(g.relations),
            dict(g.related_from))


# -- the link graph --------------------------------------------------------------------------------
def _random_history(seed: int) -> None:
    rng = random.Random(seed)
    pool = [f"m{i:02d}" for i in range(30)]

    def memory(mid: str) -> Memory:
        kind = rng.choice(list(KIND_DIRS))
        links: dict[str, Any] = {}
        if kind in ("solution", "failed_tactic"):
            links["problem"] = rng.choice(pool)
        elif kind == "change":
            links["change_targets"] = [rng.choice(pool) for _ in range(rng.randint(0, 3))]  # repeats too
        elif kind == "fact" and rng.random() < 0.6:
            links["supersedes"] = [rng.choice([*pool, mid]) for _ in range(rng.randint(1, 2))]
        if rng.random() < 0.4:  # typed links, the older ``related`` too, repeats and self-links
            links["relations"] = [{"type": rng.choice(RELATION_TYPES), "id": rng.choice(pool)}
                                  for _ in range(rng.randint(0, 3))]
            if rng.random() < 0.3:
                links["related"] = [rng.choice([*pool, mid])]
        return Memory(id=mid, kind=kind, text="x", scope=rng.choice(["repo", "repo", "global"]), links=links,
                      path=f"{KIND_DIRS[kind]}/{mid}-{rng.randint(0, 9)}.md")

    def event() -> Event:
        # Few ids and days: equal (created, id) pairs in two stores happen.
        ev = Event(id=f"e{rng.randint(0, 20):02d}",
                   type=rng.choice(["archive", "utility_vote", "fact_update_link", "link"]),
                   created=f"2026-01-0{rng.randint(1, 3)}", author=rng.choice(["a", "b"]))
        if ev.type == "archive":
            ev.memory, ev.archived = rng.choice(pool), rng.random() < 0.7
        elif ev.type == "utility_vote":
            ev.memory, ev.vote = rng.choice(pool), rng.choice([1.0, -1.0, 0.5, None])
            ev.problem, ev.episode = rng.choice([None, *pool[:5]]), rng.choice([None, "ep1"])
            ev.evidence = rng.choice([[], ["user:x"]])
        elif ev.type == "link":
            ev.memory, ev.target, ev.relation = rng.choice(pool), rng.choice(pool), rng.choice(RELATION_TYPES)
        else:
            ev.old_fact, ev.new_fact, ev.change = rng.choice(pool), rng.choice(pool), rng.choice([None, *pool])
        return ev

    memories = {mid: memory(mid) for mid in rng.sample(pool, 20)}
    events: dict[Any, Event] = {(rng.randint(0, 1), f"k{i}"): event() for i in range(12)}
    links = LinkIndex(memories, events)
    for _ in range(25):
        changed: set[str] = set()
        changed_events: dict[Any, Event | None] = {}
        for _ in range(rng.randint(1, 4)):
            mid = rng.choice(pool)
            key = (rng.randint(0, 1), f"k{rng.randint(0, 30)}")
            roll = rng.random()
            if roll < 0.2 and mid in memories:
                del memories[mid]
                changed.add(mid)
            elif roll < 0.5:
                memories[mid] = memory(mid)
                changed.add(mid)
            elif roll < 0.65 and key in events:
                del events[key]
                changed_events[key] = None
            else:
                events[key] = changed_events[key] = event()
        links.apply(changed, changed_events)
        assert graph_data(links.graph) == graph_data(LinkIndex(dict(memories), dict(events)).graph)


def test_graph_follows_random_changes_like_a_rebuild() -> None:
    for seed in range(150):
        _random_history(seed)


def test_previewing_an_event_leaves_the_graph_as_it_was() -> None:
    fact = Memory(id="f1", kind="fact", text="x", path="facts/f1.md")
    new = Memory(id="f2", kind="fact", text="x", path="facts/f2.md")
    change = Memory(id="c1", kind="change", text="x", path="changes/c1.md")
    vote = Event(id="e1", type="utility_vote", created="2026-01-01", author="a", memory="f1", vote=1.0)
    links = LinkIndex({"f1": fact, "f2": new, "c1": change}, {(0, "e1"): vote})
    before = graph_data(links.graph)
    previews = [Event(id="e2", type="utility_vote", created="2026-01-02", author="b", memory="f1", vote=-1.0),
                Event(id="e3", type="archive", created="2026-01-02", memory="f1", archived=True),
                Event(id="e4", type="fact_update_link", created="2026-01-02", old_fact="f1", new_fact="f2",
                      change="c1")]
    for ev in previews:
        with links.trying(ev) as g:
            assert graph_data(g) != before
        assert graph_data(links.graph) == before
    assert list(links._events) == [(0, "e1")]


def test_graph_lists_linked_memories_in_load_order_whatever_the_dict_order() -> None:
    problem = Memory(id="p", kind="problem", text="x", path="problems/p.md")
    sol = Memory(id="a", kind="solution", text="x", links={"problem": "p"}, path="solutions/a.md")
    tac = Memory(id="b", kind="failed_tactic", text="x", links={"problem": "p"}, path="failed_tactics/b.md")
    one = LinkIndex({"p": problem, "a": sol, "b": tac}, {}).graph
    other = LinkIndex({"b": tac, "p": problem, "a": sol}, {}).graph
    assert one.attempts["p"] == other.attempts["p"] == ["b", "a"]


# -- the catalog's change log ----------------------------------------------------------------------
def test_catalog_logs_what_each_generation_changed(ws: Workspace, repo: Path) -> None:
    cat: Catalog = ws.catalog("repo")
    start = cat.generation
    assert cat.changes_since(start) == (set(), set())
    a = api.write(ws, write_req("fact", "The API listens on port 8080"))["id"]
    b = api.write(ws, write_req("fact", "Deploys happen on Tuesdays"))["id"]
    cat.refresh()
    ev = api.update(ws, {"op": "update", "type": "archive", "memory_id": a, "archived": True,
                         "evidence_refs": ["user:obsolete"]})["id"]
    cat.refresh()
    assert cat.changes_since(start) == ({a, b}, {ev})
    path = repo / ".memory" / cat.memories[b].path
    path.unlink()
    cat.refresh_paths({cat.memories[b].path})
    assert b not in cat.memories
    assert cat.changes_since(start) == ({a, b}, {ev})
    assert cat.changes_since(cat.generation - 1) == ({b}, set())
    assert cat.changes_since(cat.generation + 1) is None
    cat._rebuild_views()  # as a large change does: the past is forgotten
    cat._note(None)
    assert cat.changes_since(start) is None


# -- the row space ---------------------------------------------------------------------------------
def _rows_data(rows: rowspace.Rows) -> tuple[Any, ...]:
    assert rows.excluded is not None and rows.codes is not None
    return (rows.ids, rows.kinds, rows.pos, rows.excluded.tolist(), rows.codes.tolist(), rows.sizes,
            rows.matrix.tobytes())


@pytest.mark.parametrize("stores", [1, 2, 3])
def test_rows_follow_vector_changes_like_a_rebuild(stores: int) -> None:
    rng = random.Random(stores)
    np_rng = np.random.default_rng(stores)
    dim = 8
    indexes = [VectorIndex(dim) for _ in range(stores)]
    kinds = list(KIND_DIRS)
    memories: dict[str, Memory] = {}
    serial = 0

    def add(index: VectorIndex, n: int) -> list[str]:
        nonlocal serial
        ids = [f"m{serial + i:04d}" for i in range(n)]
        serial += n
        for mid in ids:
            memories[mid] = Memory(id=mid, kind=rng.choice(kinds), text="x")
        index.add(ids, np_rng.standard_normal((n, dim)).astype(np.float32))
        return ids

    for index in indexes:
        add(index, rng.randint(0, 30))
    ok = {m for m in memories if rng.random() < 0.8}
    rows = rowspace.build_rows(indexes, ok, memories, dim)
    for _ in range(40):
        changed: set[str] = set()
        index = rng.choice(indexes)
        roll = rng.random()
        if roll < 0.5:
            changed.update(add(index, rng.randint(1, 3)))
        elif roll < 0.7 and len(index):
            gone = rng.sample(index.row_ids(), 1)
            index.remove(gone)
            changed.update(gone)
            memories.pop(gone[0])
        elif roll < 0.85 and len(index):  # an edited memory: its vector goes to the end
            mid = rng.choice(index.row_ids())
            index.add([mid], np_rng.standard_normal((1, dim)).astype(np.float32))
            changed.add(mid)
        else:  # archived, unarchived or a kind changed: no vector moves
            mid = rng.choice(sorted(memories))
            memories[mid] = Memory(id=mid, kind=rng.choice(kinds), text="x")
            changed.add(mid)
        for mid in changed:
            if mid in memories and rng.random() < 0.8:
                ok.add(mid)
            else:
                ok.discard(mid)
        updated = rowspace.update_rows(rows, indexes, ok, memories, changed, dim)
        assert updated is not None
        rows = updated
        assert _rows_data(rows) == _rows_data(rowspace.build_rows(indexes, ok, memories, dim))
        assert rows.offsets(ranking.RankingParams().kind_offset).tolist() == ranking.kind_offsets(
            rows.kinds, ranking.RankingParams()).tolist()


def test_vector_index_row_ids_follow_adds_and_removes() -> None:
    rng = np.random.default_rng(3)
    index = VectorIndex(4)
    index.add(["a", "b", "c", "d"], rng.standard_normal((4, 4)).astype(np.float32))
    assert index.row_ids() == ["a", "b", "c", "d"]
    index.remove(["b"])
    index.add(["c", "e"], rng.standard_normal((2, 4)).astype(np.float32))
    kept = index.row_ids()
    index._rows = None  # what faiss itself says
    assert kept == index.row_ids() == ["a", "d", "c", "e"]


def test_vector_index_saved_and_loaded_keeps_its_rows_and_takes_more(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    index = VectorIndex(8)
    first = rng.standard_normal((50, 8)).astype(np.float32)
    first /= np.linalg.norm(first, axis=1, keepdims=True)
    index.add([f"m{i}" for i in range(50)], first)
    index.save(tmp_path / "vectors.faiss")
    loaded = VectorIndex.load(tmp_path / "vectors.faiss", 8, dict(index.id_of))
    assert loaded.row_ids() == index.row_ids()
    assert np.array_equal(loaded.matrix(), first)
    more = rng.standard_normal((3000, 8)).astype(np.float32)  # past the room a load makes
    more /= np.linalg.norm(more, axis=1, keepdims=True)
    for i in range(0, 3000, 7):
        loaded.add([f"n{j}" for j in range(i, min(i + 7, 3000))], more[i:i + 7])
    assert np.array_equal(loaded.matrix(), np.vstack([first, more]))
    assert loaded.search(more[-1], 1)[0][0] == "n2999"
    (tmp_path / "bad.faiss").write_bytes(b"not an index")
    with pytest.raises(ValueError):
        VectorIndex.load(tmp_path / "bad.faiss", 8, {})


def test_ranking_with_excluded_rows_equals_ranking_without_them() -> None:
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((300, 16)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    kinds = [list(KIND_DIRS)[i % 6] for i in range(300)]
    excluded = rng.random(300) < 0.3
    keep = np.flatnonzero(~excluded)
    params = ranking.RankingParams(semantic_hops=2)
    for q in range(10):
        qvec = matrix[q * 7] + 0.3 * rng.standard_normal(16).astype(np.float32)
        qvec /= np.linalg.norm(qvec)
        kw = [(int(i), float(300 - i)) for i in rng.choice(300, 20, replace=False)]
        whole = ranking.rank(qvec, matrix, kw, kinds, params=params, ids=[str(i) for i in range(300)],
                             exclude=excluded)
        new_row = {int(old): new for new, old in enumerate(keep)}
        part = ranking.rank(qvec, matrix[keep], [(new_row[i], s) for i, s in kw if i in new_row],
                            [kinds[i] for i in keep], params=params, ids=[str(i) for i in keep])
        assert [(int(keep[r.index]), r.score) for r in part.results] == [(r.index, r.score) for r in whole.results]
        assert [r.reasons for r in part.results] == [r.reasons for r in whole.results]
        assert part.gate == whole.gate


@pytest.mark.model
def test_reads_while_embedding_answer_as_a_fresh_row_space_does(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read while memories wait for vectors takes the kept row space as each slice of
    embedding left it: its answer equals one built from nothing in the same state."""
    from memstore.index.embedder import get_embedder
    from memstore.store.ids import ALPHABET

    # A read embeds its best keyword hits for at most CANDIDATES_SECONDS: on a loaded machine the
    # first read of a pair could stop short and the second finish the job, so the two would
    # compare different states. Here each read finishes it.
    monkeypatch.setattr(retrieve, "CANDIDATES_SECONDS", 60.0)

    rng = random.Random(11)
    words = ["queue", "retry", "schema", "deploy", "token", "cache", "worker", "timeout", "fixture", "router"]
    for i in range(40):
        mid = "01m6gbcm3h832wbgwh16z" + "".join(ALPHABET[(i >> (5 * k)) & 31] for k in range(4, -1, -1))
        text = " ".join(rng.choice(words) for _ in range(12)) + f" (case {i})"
        (repo / ".memory" / "facts" / f"{mid}.md").write_text(
            f"---\nid: {mid}\nkind: fact\nscope: repo\ncreated: 2026-11-01T10:00:00Z\n---\n{text}\n")
    live = reopen(repo)
    live.defer_saves = True  # as the daemon's
    live.embed_wait = 0.0  # every vector is left to the background

    def answer() -> dict[str, Any]:
        got = retrieve.read(live, {"query": "worker retry timeout"}, log_episode=False)
        live.read_cache.clear()
        fresh = retrieve.read(live, {"query": "worker retry timeout"}, log_episode=False)
        got["stats"].pop("elapsed_ms")
        fresh["stats"].pop("elapsed_ms")
        assert got == fresh
        return got

    # Only the query's best keyword hits, embedded first by the read itself.
    assert 0 < answer()["partial"]["embedded"] <= retrieve.CANDIDATES_FIRST < 40
    si = live.indexes["repo"]
    texts = si.waiting_texts()
    keys = list(texts)
    for part in (keys[:7], keys[7:25], keys[25:]):
        answer()  # the kept rows, then the next slice arrives
        si.offer(part, get_embedder().encode([texts[k] for k in part]))
        while si.take_ready():
            pass
        got = answer()
    assert "partial" not in got and got["results"]


# -- the watcher -----------------------------------------------------------------------------------
def test_a_folder_changing_is_not_taken_as_an_unknown_change(tmp_path: Path) -> None:
    (tmp_path / "facts").mkdir()
    watcher = Watcher(lambda roots: None)
    try:
        assert watcher.watch(tmp_path)
        n = watcher.counter(tmp_path)
        assert n is not None
        handler = _Handler(watcher, tmp_path)
        handler.on_any_event(DirModifiedEvent(str(tmp_path / "facts")))
        handler.on_any_event(FileCreatedEvent(str(tmp_path / "facts" / "a.md")))
        assert watcher.changes_since(tmp_path, n) == {"facts/a.md"}
    finally:
        watcher.stop()


def test_reading_a_watched_store_raises_no_events_and_changing_it_does(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # A fresh clone's first read opens every file of the store; each open and close reaching
    # watchdog's Python threads took the GIL from that read (~1.3 s of 2.7 at 10k memories).
    facts = tmp_path / "facts"
    facts.mkdir()
    for i in range(200):
        (facts / f"m{i}.md").write_text(f"memory {i}\n", encoding="utf-8")
    seen: list[str] = []
    watcher = Watcher(lambda roots: None)
    original = _Handler.on_any_event

    def counting(self: _Handler, event: FileSystemEvent) -> None:
        seen.append(event.event_type)
        original(self, event)

    monkeypatch.setattr(_Handler, "on_any_event", counting)
    try:
        assert watcher.watch(tmp_path)
        for _ in range(3):
            for path in sorted(facts.iterdir()):
                path.read_bytes()
        time.sleep(0.5)
        assert seen == []
        (facts / "m1.md").write_text("edited in place\n", encoding="utf-8")
        (facts / "new.md").write_text("a new memory\n", encoding="utf-8")
        deadline = time.monotonic() + 10
        while not {"modified", "created"} <= set(seen) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert {"modified", "created"} <= set(seen)
    finally:
        watcher.stop()


# -- end to end: a long-lived workspace answers as a fresh one does --------------------------------
QUERIES = ["alembic upgrade fails with DuplicateColumn in the test database",
           "which database driver do we use, asyncpg or psycopg?",
           "how should commit messages be written"]
_builds: list[str] = []  # every full build of a scope view or row space (the test's wrappers record them)


def _answers(ws: Workspace, expand: dict[str, int] | None = None) -> list[dict[str, Any]]:
    out = []
    for query in QUERIES:
        ans = retrieve.read(ws, {"query": query, **({"expand": expand} if expand else {})}, log_episode=False)
        ans["stats"].pop("elapsed_ms")
        out.append(ans)
    return out


def _check(live: Workspace, repo: Path, rebuilt: list[str]) -> None:
    """The live workspace's views equal views built from scratch, and it answers as a fresh
    workspace (a new process) does. ``rebuilt`` gets what the live workspace's reads rebuilt."""
    before = len(_builds)
    got = _answers(live)
    rebuilt += _builds[before:]
    view = live.read_cache["scope"]
    fresh_view = scopeview.ScopeView(view.catalogs)
    assert graph_data(view.graph) == graph_data(fresh_view.graph)
    assert view.memories == fresh_view.memories
    cache: rowspace.RowCache = live.read_cache["rows"]
    kinds, since, tags, _, who = cache.filters
    assert cache.ok == {m for m, mem in view.memories.items()
                        if retrieve.allowed(mem, view.graph, kinds, since, tags, who)}
    fresh_rows = rowspace.build_rows(cache.vectors, cache.ok, view.memories, cache.rows.matrix.shape[1])
    assert _rows_data(cache.rows) == _rows_data(fresh_rows)
    for si in live.indexes.values():
        assert si._plan(None) == ({}, {})
    assert got == _answers(reopen(repo))


@pytest.mark.model
def test_long_lived_workspace_follows_every_kind_of_change(ws: Workspace, repo: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # autonomous: a global write is committed at once (review mode proposes it: test_pending.py)
    ws = open_workspace(cwd=repo, env={**os.environ, "MEMSTORE_WRITE_MODE": "autonomous"})

    def w(kind: str, text: str, **kw: Any) -> str:
        return str(api.write(ws, write_req(kind, text, **kw))["id"])

    def upd(**req: Any) -> None:
        api.update(ws, {"op": "update", "evidence_refs": ["user:seen"], **req})

    problem = w("problem", PROBLEM)
    _answers(ws)
    for module, name in ((scopeview, "ScopeView"), (retrieve, "build_rows")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name: _builds.append(_name) or _real(*a))
    builds: list[str] = []

    solution = w("solution", SOLUTION, links={"problem_id": problem})
    _check(ws, repo, builds)
    w("failed_tactic", TACTIC, links={"problem_id": problem})
    old = w("fact", "The database driver is asyncpg; connection URLs use postgresql+asyncpg://.")
    change = w("change", "The database driver moved from asyncpg to psycopg 3.", links={"change_targets": [old]})
    new = w("fact", "The database driver is psycopg 3; URLs use postgresql+psycopg://.")
    _check(ws, repo, builds)
    upd(type="fact_update_link", old_fact_id=old, change_id=change, new_fact_id=new)
    _check(ws, repo, builds)
    w("fact", "The database driver is psycopg 3.2 with the binary extra.", links={"supersedes": [new]})
    upd(type="utility_vote", memory_id=solution, problem_id=problem, vote=1)
    upd(type="utility_vote", memory_id=solution, problem_id=problem, vote=-1, evidence_refs=[])
    _check(ws, repo, builds)
    upd(type="archive", memory_id=old, archived=True)
    _check(ws, repo, builds)
    upd(type="archive", memory_id=new, archived=True, mode="dry_run")  # previewed, never written
    _check(ws, repo, builds)
    upd(type="archive", memory_id=old, archived=False)
    pref = w("preference", "Commit messages follow Conventional Commits with a scope.")
    _check(ws, repo, builds)
    # hand edits: a changed text (its vector moves to the end of the index) and a deleted file
    cat = ws.catalog("repo")
    path = repo / ".memory" / cat.memories[pref].path
    path.write_text(path.read_text().replace("with a scope", "with a scope and an issue number"))
    _check(ws, repo, builds)
    (repo / ".memory" / cat.memories[solution].path).unlink()
    _check(ws, repo, builds)
    assert builds == [], "a delta should have been applied, not a rebuild"
    # a second store joins the scope (built once), then both follow deltas
    w("preference", "Always answer in British English.", scope="global")
    _check(ws, repo, builds)
    assert builds == ["ScopeView", "build_rows"]
    builds.clear()
    w("fact", "The staging database lives on port 5433.")
    w("fact", "The shared cache server is redis 7.", scope="global")
    _check(ws, repo, builds)
    assert builds == []


# -- the association chain's kept neighbours -------------------------------------------------------
def _clustered(rng: np.random.Generator, n: int, dim: int, centres: np.ndarray) -> np.ndarray:
    """Rows near a few centres, so many pairs pass the hop bars (and lists overflow K)."""
    rows = centres[rng.integers(0, len(centres), n)] + 0.12 * rng.standard_normal((n, dim))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("stores", [1, 2])
def test_kept_neighbours_answer_every_hop_as_the_matrix_does(stores: int) -> None:
    rng = random.Random(stores)
    np_rng = np.random.default_rng(stores)
    dim = 12
    centres = np_rng.standard_normal((4, dim))
    indexes = [VectorIndex(dim) for _ in range(stores)]
    memories: dict[str, Memory] = {}
    serial = 0

    def add(index: VectorIndex, n: int) -> None:
        nonlocal serial
        ids = [f"m{serial + i:04d}" for i in range(n)]
        serial += n
        for mid in ids:
            memories[mid] = Memory(id=mid, kind="fact", text="x")
        index.add(ids, _clustered(np_rng, n, dim, centres))

    for index in indexes:
        add(index, 60)
    bars = (0.85, 0.90)
    near = Neighbours(min(bars))
    rows = rowspace.build_rows(indexes, set(memories), memories, dim)
    answered_from_lists = 0
    for _ in range(60):
        assert rows.tokens is not None
        near.sync(rows.tokens, rows.matrix)
        n = len(rows.ids)
        mask = np_rng.random(n) < rng.choice([0.0, 0.2, 0.9])
        for _ in range(15):
            row = rng.randrange(n)
            visited = {row, *rng.sample(range(n), rng.randint(0, 4))}
            for bar in bars:
                want = ranking._hop(row, rows.matrix, bar, visited, mask)
                known = near.count[row] >= 0
                got = near.step(row, rows.matrix, bar, visited, mask)
                assert (got is None) == (want is None)
                if got is not None and want is not None:
                    assert got[0] == want[0] and got[1] == pytest.approx(want[1], abs=1e-5)
                if known and got is not None:
                    # A list that knew the answer reads nothing: the same answer from a zeroed matrix.
                    zero = np.zeros_like(rows.matrix)
                    if copy.deepcopy(near).step(row, zero, bar, visited, mask) == got:
                        answered_from_lists += 1
        seeds = [(rng.randrange(n), 0.9) for _ in range(3)]
        assert (ranking.association_chain(seeds, rows.matrix, bars, exclude=mask, near=near).keys()
                == ranking.association_chain(seeds, rows.matrix, bars, exclude=mask).keys())
        # Change the rows: new memories, removed ones, an edit (its vector moves to the end).
        index = rng.choice(indexes)
        changed: set[str] = set()
        roll = rng.random()
        if roll < 0.45 or not len(index):
            before = set(index.row_ids())
            add(index, rng.choice([1, 2, 40]))  # 40: more than ADD_LIMIT, a fresh start
            changed = set(index.row_ids()) - before
        elif roll < 0.8:
            gone = rng.sample(index.row_ids(), min(len(index), rng.randint(1, 5)))
            index.remove(gone)
            changed = set(gone)
            for mid in gone:
                memories.pop(mid)
        else:
            mid = rng.choice(index.row_ids())
            index.add([mid], _clustered(np_rng, 1, dim, centres))
            changed = {mid}
        updated = rowspace.update_rows(rows, indexes, set(memories), memories, changed, dim)
        assert updated is not None
        rows = updated
    assert answered_from_lists > 100


def test_kept_neighbours_start_over_for_rows_they_cannot_follow() -> None:
    rng = np.random.default_rng(5)
    matrix = _clustered(rng, 50, 8, rng.standard_normal((2, 8)))
    near = Neighbours(0.85)
    near.sync(np.arange(50, dtype=np.int64), matrix)
    near.step(0, matrix, 0.85, {0}, None)
    assert near.known() >= 1
    near.sync(np.arange(50, dtype=np.int64)[::-1].copy(), matrix)  # not increasing: no rows to follow
    assert near.known() == 0 and len(near) == 50


def test_a_cut_list_that_loses_a_row_is_not_trusted_past_its_end() -> None:
    # Row 0 has ten neighbours over the bar (cos 0.99 ... 0.90); its list keeps the best eight.
    dim = 16
    cosines = [0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.93, 0.92, 0.91, 0.90]
    base = np.zeros((11, dim), dtype=np.float32)
    base[0, 0] = 1.0
    for i, c in enumerate(cosines, 1):
        base[i, 0], base[i, i] = c, np.sqrt(1 - c * c)
    near = Neighbours(0.85)
    near.sync(np.arange(11, dtype=np.int64), base)
    assert near.step(0, base, 0.85, {0}, None) == (1, pytest.approx(0.99))
    assert near.cut[0]
    # One of the eight goes, then a row at cos 0.86 arrives: rows 9 and 10 (0.91, 0.90), never
    # kept, still beat it.
    matrix = np.delete(base, 3, axis=0)
    tokens = np.delete(np.arange(11, dtype=np.int64), 3)
    new = np.zeros((1, dim), dtype=np.float32)
    new[0, 0], new[0, 15] = 0.86, np.sqrt(1 - 0.86 ** 2)
    near.sync(np.append(tokens, 11), np.vstack([matrix, new]))
    visited = {0, 1, 2, 3, 4, 5, 6, 7}  # the seven kept rows that are left (renumbered)
    got = near.step(0, np.vstack([matrix, new]), 0.85, visited, None)
    assert got == (8, pytest.approx(0.91))


@pytest.mark.model
def test_filling_neighbour_lists_ahead_changes_no_answer(ws: Workspace) -> None:
    for i, part in enumerate(["conveyor motor", "hydraulic press", "label printer", "pallet jack"]):
        api.write(ws, write_req("fact", f"Spare {part} parts are kept in warehouse bin {i + 10}, shelf B."))
        api.write(ws, write_req("problem", f"The {part} stops after an hour: the thermal fuse trips."))
    hops = {"semantic_hops": 2}  # the kept lists serve semantic hops, which a request asks for
    before = _answers(ws, hops)
    ws.read_cache.pop("near")
    retrieve.read(ws, {"query": "which telescope mount suits deep-sky astrophotography?", "expand": hops},
                  log_episode=False)
    near = ws.read_cache["near"]
    assert near.known() < len(near)
    while indexes.fill_neighbours(ws, 3):
        pass
    assert near.known() == len(near)
    assert _answers(ws, hops) == before
    # Rows behind the vector index (it took a memory since the last read): nothing is touched.
    ws.read_cache.pop("near")
    _answers(ws, hops)
    api.write(ws, write_req("fact", "The forklift charger is in bay 4."))
    # the duplicate check of the next write brings the index up to date with the first
    api.write(ws, write_req("fact", "Bin 12 also holds conveyor belts.", allow_duplicate=False))
    near = ws.read_cache["near"]
    known = near.known()
    assert indexes.fill_neighbours(ws, 100) == 0 and near.known() == known


@pytest.mark.model
def test_a_flush_written_out_after_more_changes_leaves_a_consistent_index(ws: Workspace, repo: Path) -> None:
    """The daemon takes what to save under its workspace lock and writes it without the lock:
    changes made meanwhile are neither lost nor half-saved."""
    ws.defer_saves = True
    for i in range(3):
        api.write(ws, write_req("fact", f"Deploy window {i}: staging deploys run at {9 + i}:00 UTC."))
    _answers(ws)
    saves = ws.flush_later()
    assert saves, "there was something to save"
    # a request arrives while the snapshot is being written (the daemon writes it in another thread)
    writer = threading.Thread(target=lambda: [save() for save in saves])
    late = api.write(ws, write_req("fact", "Production deploys need two approvals in the release channel."))
    writer.start()
    live = _answers(ws)  # indexes the late memory: waits for the index's own save, not the rest
    writer.join(timeout=60)
    assert not writer.is_alive()
    fresh = reopen(repo)
    assert _answers(fresh) == live
    assert late["id"] in fresh.catalog("repo").memories
    assert ws.flush_later(), "the late change is saved by the next flush"
