"""The first read in a clone of a store with more files than MEMSTORE_FIRST_PARSE: it parses
only the files that may hold the query's rarer words, finds the ids of the others by a strict
scan of their bytes, answers `partial` saying the store is still being read, and the daemon
reads the rest after the reply; from then on answers equal those of a store read in full. An id
that two files claim is served by neither in the partial answer too, whichever of them was
parsed, and a file that hides its id from the strict scan is parsed. Real git clones, a real
daemon and the real CLI; the write and update during the partial phase go through the library
on a watched workspace (the daemon's own path, held still so the partial phase lasts)."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
from daemonworld import Env, _poll, clone, commit_all, ranked

from memstore import gitops
from memstore.errors import DuplicateError
from memstore.read.retrieve import READING_NOTE, read
from memstore.store.catalog import FIRST_PARSE_ENV
from memstore.store.disk import memory_from_file
from memstore.store.files import parse_markdown, scan_memory
from memstore.store.ids import ALPHABET
from memstore.store.model import Memory
from memstore.store.workspace import open_workspace
from memstore.verbs import api

FIRST = 20  # MEMSTORE_FIRST_PARSE of these tests: the store below has 8x as many files
N = 160
WORDS = ["cache", "worker", "queue", "schema", "index", "deploy", "token", "session", "build",
         "config", "retry", "timeout", "client", "server", "router", "handler", "fixture", "module", "parser"]
RARE = "QuillwortRotator.rotate_frobnicator_tokens"
TARGET = f"`{RARE}()` rotates the zanzibar tokens every night at 02:00 UTC."
REUSED_QUERY = "marmalade"  # held by the parsed claimant of a reused id only
HIDDEN_QUERY = "xylophone"  # held by the genuine files whose ids hostile files hide from the scan


def _id(i: int) -> str:
    return "01m6gbcm3h832wbgwh16z" + "".join(ALPHABET[(i >> (5 * k)) & 31] for k in range(4, -1, -1))


def memory_text(mid: str, text: str, tags: str = "cache, worker") -> str:
    """A fact file as memstore writes one."""
    return (f"---\nid: {mid}\nkind: fact\nscope: repo\ncreated: 2026-11-01T10:00:00Z\n"
            f"author: dana\nconfidence: 0.8\ntags: [{tags}]\n---\n{text}\n")


def _filler(rng: random.Random, i: int) -> str:
    return f"Note {i}: " + " ".join(rng.choice(WORDS) for _ in range(20))


# Ways a file can claim an id that a scan of its id line would not see: each is a valid fact
# that YAML reads with the id ``mid`` (the complete load's `check` confirms it below).
def _hiding(mid: str, other: str, text: str) -> dict[str, str]:
    return {
        "quoted-key": f'---\n"id": {mid}\nkind: fact\nscope: repo\n---\n{text}\n',
        "flow-mapping": f"---\n{{id: {mid}, kind: fact, scope: repo}}\n---\n{text}\n",
        "bom": "\ufeff" + memory_text(mid, text),
        "crlf": memory_text(mid, text).replace("\n", "\r\n"),
        "second-id-line": f"---\nid: {other}\nkind: fact\nscope: repo\nid: {mid}\n---\n{text}\n",
        "explicit-key": f"---\n? id\n: {mid}\nkind: fact\nscope: repo\n---\n{text}\n",
        "indented": f"---\n  id: {mid}\n  kind: fact\n  scope: repo\n---\n{text}\n",
    }


HIDDEN = list(_hiding("x", "y", "t"))
GENUINE_HIDDEN = {name: _id(200 + i) for i, name in enumerate(HIDDEN)}
REUSED = _id(300)
QUOKKA = _id(600)  # a memory only a second read looks for


def _origin(base: Path) -> Path:
    root = base / "origin"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
    gitops.toplevel.cache_clear()
    api.init(open_workspace(cwd=root))
    facts = root / ".memory" / "facts"
    rng = random.Random(7)
    for i in range(N):
        text = TARGET if i == N // 3 else _filler(rng, i)
        (facts / f"{_id(i)}.md").write_text(memory_text(_id(i), text, ", ".join(rng.sample(WORDS, 2))))
    # An id reused: the file holding the query is parsed, the other left unread.
    (facts / "reused-parsed.md").write_text(memory_text(REUSED, f"The {REUSED_QUERY} jar is kept on the top shelf."))
    (facts / "reused-unread.md").write_text(memory_text(REUSED, _filler(rng, 300)))
    for i, name in enumerate(HIDDEN):
        mid = GENUINE_HIDDEN[name]
        (facts / f"{mid}.md").write_text(memory_text(mid, f"The {HIDDEN_QUERY} number {i} is tuned to A440."))
        (facts / f"hides-{name}.md").write_bytes(
            _hiding(mid, _id(400 + i), _filler(rng, 400 + i))[name].encode("utf-8"))
    (facts / f"{QUOKKA}.md").write_text(memory_text(QUOKKA, "The quokka feeder refills at noon."))
    (facts / "latin1.md").write_bytes(memory_text(_id(500), "caf\xe9 worker queue").encode("latin-1"))
    outside = base / "outside.md"
    outside.write_text(memory_text(_id(501), f"A {HIDDEN_QUERY} that lies outside the repo."))
    os.symlink(outside, facts / "linked.md")
    commit_all(root)
    return root


def _full_answers(world: Env, repo: Path, queries: list[str]) -> dict[str, list[tuple[str, float]]]:
    """The answers of the store read and embedded in full, in-process (no daemon)."""
    out = {}
    for query in queries:
        rc, answer, err = world.cli("read", query, cwd=repo, MEMSTORE_DAEMON="0")
        assert rc == 0 and "partial" not in answer, err
        out[query] = ranked(answer)
    return out


def _complete(world: Env, repo: Path) -> bool:
    rc, answer, _ = world.cli("read", "worker queue", cwd=repo)
    return rc == 0 and "partial" not in answer


def _partial_first(world: Env, repo: Path, query: str) -> dict[str, Any]:
    rc, first, err = world.cli("read", query, cwd=repo)
    assert rc == 0, err
    part = first["partial"]
    assert part["unread"] > N // 2 and "the store is still being read" in part["reason"], part
    assert part["total"] < N and READING_NOTE in first["guidance"], first
    return first


@pytest.mark.model
@pytest.mark.slow
def test_a_first_read_answers_from_part_of_the_store_and_then_as_a_full_read(tmp_path: Path) -> None:
    world = Env(tmp_path / "partial")
    world.vars[FIRST_PARSE_ENV] = str(FIRST)
    with world.environ():
        origin = _origin(world.base)
    queries = [RARE, "zanzibar tokens rotation", REUSED_QUERY, HIDDEN_QUERY, "worker queue retry timeout"]
    want = _full_answers(world, clone(origin, "full"), queries)
    assert want[RARE][0][0] == _id(N // 3)
    assert not {mid for mid, _ in want[REUSED_QUERY]} & {REUSED}
    proc = world.start("--idle", "600")
    try:
        # Each clone is a workspace of its own: each first read is a first load.
        first = _partial_first(world, clone(origin, "cold-rare"), RARE)
        assert first["results"][0]["id"] == _id(N // 3) and first["results"][0]["text"] == TARGET

        reused = _partial_first(world, clone(origin, "cold-reused"), REUSED_QUERY)
        assert REUSED not in {r["id"] for r in reused["results"]}, reused["results"]
        assert all(REUSED_QUERY not in r["text"] for r in reused["results"])

        hidden_repo = clone(origin, "cold-hidden")
        hidden = _partial_first(world, hidden_repo, HIDDEN_QUERY)
        served = {r["id"] for r in hidden["results"]}
        assert not served & set(GENUINE_HIDDEN.values()), sorted(served)
        assert all("outside the repo" not in r["text"] for r in hidden["results"])

        assert _poll(lambda: _complete(world, hidden_repo), timeout=120, every=0.5), world.log()
        assert "memory files a first read left unread" in world.log()
        rc, report, _ = world.cli("check", cwd=hidden_repo)
        codes = {(Path(e["path"]).name, e["code"]) for e in report["problems"]}
        for name in HIDDEN:  # every hiding place was a real claim on the genuine file's id
            assert (f"hides-{name}.md", "id_conflict") in codes and \
                (f"{GENUINE_HIDDEN[name]}.md", "id_conflict") in codes, (name, sorted(codes))
        assert ("linked.md", "not_regular") in codes and ("latin1.md", "unreadable") in codes, sorted(codes)

        def settled() -> bool:
            status = world.status()
            stores = [s for w in status.get("workspaces", []) for s in w["stores"]
                      if w["repo"] == str((hidden_repo / ".memory").resolve())]
            return bool(stores) and stores[0]["embedded"] == stores[0]["total"]

        assert _poll(settled, timeout=180, every=1.0), world.log()
        for query in queries:
            rc, later, err = world.cli("read", query, cwd=hidden_repo)
            assert rc == 0 and "partial" not in later, err
            assert ranked(later) == want[query], query
    finally:
        world.cleanup()
        proc.wait(timeout=30)


@pytest.mark.model
def test_a_write_and_an_update_during_the_partial_phase_see_every_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A watched workspace (as the daemon's: its walk skipped while nothing changes) whose first
    read left files unread: a second read parses what it looks for and is partial still; the
    write's duplicate judgment and an update of an id not parsed yet see the whole store, and
    the write lands in a catalog that is complete."""
    world = Env(tmp_path / "during")
    with world.environ():
        origin = _origin(world.base)
    repo = clone(origin, "cold")
    monkeypatch.setenv(FIRST_PARSE_ENV, str(FIRST))
    ws = open_workspace(cwd=repo)
    ws.watch()
    try:
        ws.defer_saves = True
        ws.embed_wait = 0.0  # as the daemon reads: what the read did not embed waits
        first = read(ws, {"query": RARE}, log_episode=False)
        assert first["partial"]["unread"] > 0
        cat = ws._catalogs["repo"]
        assert cat.partial
        unread_id = _id(N - 1)
        assert unread_id not in cat.memories and QUOKKA not in cat.memories
        # A second read while files wait parses those that may hold what it looks for.
        second = read(ws, {"query": "quokka feeder"}, log_episode=False)
        assert second["results"][0]["id"] == QUOKKA
        assert 0 < second["partial"]["unread"] < first["partial"]["unread"] and cat.partial
        unread_text = (repo / ".memory" / "facts" / f"{unread_id}.md").read_text().split("---\n", 2)[2].strip()

        ws.embed_wait = None  # a write embeds what it judges against
        with pytest.raises(DuplicateError) as dup:
            api.write(ws, _write_request(unread_text), author="dana")
        assert dup.value.details["duplicates"][0]["id"] == unread_id
        assert not cat.partial and len(cat.memories) >= N

        vote = api.update(ws, {"type": "utility_vote", "memory_id": unread_id, "vote": 1,
                               "evidence_refs": ["user:seen again"]}, author="dana")
        assert vote["ok"] and f"memory: {unread_id}" in (repo / vote["path"]).read_text()
        wrote = api.write(ws, _write_request("The zanzibar rota moved to 03:00 UTC."), author="dana")
        again = read(ws, {"query": "zanzibar rota"}, log_episode=False)
        assert "partial" not in again or "unread" not in again["partial"]
        assert wrote["id"] in {r["id"] for r in again["results"]}
    finally:
        ws.close()


@pytest.mark.model
def test_a_query_of_stop_words_alone_reads_every_file_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in it for the keyword lane: only the vectors answer it, from any file."""
    world = Env(tmp_path / "stop")
    with world.environ():
        origin = _origin(world.base)
    monkeypatch.setenv(FIRST_PARSE_ENV, str(FIRST))
    ws = open_workspace(cwd=clone(origin, "cold"))
    ws.embed_wait = 0.0
    answer = read(ws, {"query": "what is it that we have"}, log_episode=False)
    assert "unread" not in answer.get("partial", {}) and not ws._catalogs["repo"].partial


def _write_request(text: str) -> dict[str, Any]:
    return {"op": "write", "memory": {"kind": "fact", "scope": "repo", "text": text,
                                      "evidence_refs": ["user:the user said so"]}}


# -- the strict scan ------------------------------------------------------------------------------
def _written(tags: list[str]) -> bytes:
    from memstore.store.config import Config
    from memstore.store.disk import Store

    store = Store(root=Path("/nonexistent"), scope="repo", config=Config(), worktree=None)
    mem = Memory(id=_id(1), kind="fact", text="Pool size follows the worker count.\n\nSecond line.",
                 scope="repo", created="2026-11-01T10:00:00Z", author="dana", confidence=0.8,
                 rationale="it's measured", links={"related": [_id(2)]}, evidence=["user:dana"], tags=tags)
    return store.render_memory(mem).encode("utf-8")


@pytest.mark.parametrize("tags", [[], ["perf", "Postgres"], ["ci-cd", "db_pool"]])
def test_the_strict_scan_reads_what_memstore_writes_as_the_parser_does(tags: list[str]) -> None:
    data = _written(tags)
    got = scan_memory(data)
    assert got is not None
    mid, scanned_tags, body = got
    mem = memory_from_file("facts/x.md", data.decode(), "repo")
    assert mid == mem.id and scanned_tags == [t.lower() for t in mem.tags]
    assert data[body:].decode().strip() == mem.text == parse_markdown(data.decode())[1]


@pytest.mark.parametrize("name", HIDDEN)
def test_the_strict_scan_refuses_a_file_that_hides_its_id(name: str) -> None:
    text = _hiding(_id(3), _id(4), "A fact.")[name]
    assert memory_from_file("facts/x.md", text, "repo").id == _id(3)
    assert scan_memory(text.encode("utf-8")) is None


@pytest.mark.parametrize("odd", [
    "tags:\n- perf\n- ci\n",  # a block list: not one flow list on one line
    "tags: [perf, 'ci']\n",  # a quoted tag
    "tags: [perf, yes]\n",  # a word YAML reads as a bool
    "tags: [perf]\ntags: [ci]\n",  # a key twice: the last wins in YAML
    "# a comment\n",
    "\tkind: fact\n",
    "<<: {kind: fact}\n",
    "&a kind: fact\n",
])
def test_the_strict_scan_refuses_anything_unusual_in_the_frontmatter(odd: str) -> None:
    data = f"---\nid: {_id(5)}\nkind: fact\n{odd}scope: repo\n---\nA fact.\n".encode()
    assert scan_memory(data) is None
    assert scan_memory(f"---\nid: {_id(5)}\nkind: fact\nscope: repo\n---\nA fact.\n".encode()) is not None


@pytest.mark.parametrize("data", [
    b"---\nid: 01M6GBCM3H832WBGWH16Z00000\nkind: fact\n---\nA fact.\n",  # not a lower-case ULID
    b"---\nid: 01m6gbcm3h832wbgwh16z00000 # c\nkind: fact\n---\nA fact.\n",
    b"---\nid: 01m6gbcm3h832wbgwh16z00000\n  more\nkind: fact\n---\nA fact.\n",  # a folded id
    b"---\nid: 01m6gbcm3h832wbgwh16z00000\nkind: fact\n----\nA fact.\n",  # another boundary
    b"---\nid: 01m6gbcm3h832wbgwh16z00000\nkind: fact\n---  \nA fact.\n",
    b"---\nid: 01m6gbcm3h832wbgwh16z00000\nkind: fact\n",  # never closed
    "---\nid: 01m6gbcm3h832wbgwh16z00000\nkind: fact\n---\nUn caf\u00e9.\n".encode(),  # not ASCII
])
def test_the_strict_scan_refuses_an_unusual_head_or_boundary(data: bytes) -> None:
    assert scan_memory(data) is None


def test_the_scan_lane_weighs_a_term_by_the_whole_store_while_files_wait() -> None:
    """A partial catalog's lane holds every document of the query's rarer term and a few others:
    with the unread documents counted (``outside``, the holders of the term's string among them,
    their characters), its scores are the whole store's; without, its idf and mean lengths would
    be those of the few it holds (the scores 2.5x apart here)."""
    from memstore.index.scanlane import ScanLane
    from memstore.read.ranking import RankingParams

    words = ["alpha", "bravo", "delta", "gamma", "omega", "sigma", "theta"]
    # Texts of different lengths: the held ones are not a fair sample of the store's.
    docs = [(f"m{i}", f"k{i}", "fact", ["x"], " ".join([words[i % 7], words[(i + 1) % 7]] * (1 + i % 4)) + " queue")
            for i in range(60)]
    docs += [(f"z{i}", f"kz{i}", "fact", ["x"], f"zanzibar {words[i]} {words[i + 1]} queue") for i in range(3)]
    full = ScanLane(RankingParams())
    full.set_docs(docs)
    part = ScanLane(RankingParams())
    part.set_docs(docs[-3:] + docs[:7])
    part.outside = len(docs) - 10
    part.outside_holding = {"queu": len(docs) - 10}  # "queue" is in every text; "zanzibar" only in those held
    part.outside_chars = sum(len(d[4]) for d in docs[7:-3])
    for query in ("zanzibar", "zanzibar queue"):
        want = {h.id: h.score for h in full.hits(query, 3)}
        got = {h.id: h.score for h in part.hits(query, 3)}
        # The same hits; the scores as the whole store's, but for the mean lengths, which come
        # from the held texts' terms per character (within a per cent here).
        assert got.keys() == want.keys() and all(abs(got[m] - want[m]) <= 0.01 * want[m] for m in want), query


def test_a_partial_catalog_counts_what_waits_as_the_files_on_disk_do(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What a partial catalog tells the keyword lane of the files it has not read (how many hold
    each looked-for string, their characters) is what the files in the clone say, after the first
    load, after a later read that parses more, and part way through completing the load."""
    from memstore.index.scanlane import wanted as wanted_of
    from memstore.store.catalog import Catalog, Wanted

    monkeypatch.setenv(FIRST_PARSE_ENV, str(FIRST))
    repo = clone(_origin(tmp_path), "clone")
    store = open_workspace(cwd=repo).store("repo")
    on_disk = {f"facts/{p.name}": p.read_bytes() for p in (repo / ".memory" / "facts").iterdir()
               if p.is_file() and not p.is_symlink()}
    catalog = Catalog(store)

    def check(query: str) -> None:
        read = {m.path for m in catalog.memories.values()} | set(catalog.invalid)
        read |= {path for paths in catalog.conflicts.values() for path in paths if path in catalog.invalid}
        waiting = {rel: data for rel, data in on_disk.items() if rel not in read and scan_memory(data)}
        assert catalog.unread == len(waiting)
        bodies = {rel: data[scan_memory(data)[2]:] for rel, data in waiting.items()}  # type: ignore[index]
        assert catalog.unread_chars == sum(len(body) for body in bodies.values())
        texts = wanted_of(query)[0]  # type: ignore[index]
        for text, held in catalog.unread_holding.items():
            if text in texts:
                assert held == sum(text.encode() in body.lower() for body in bodies.values()), text

    for query in ("zanzibar tokens rotation", "worker queue"):
        texts, tags = wanted_of(query)  # type: ignore[misc]
        if not catalog.partial and catalog.generation == 0:
            catalog.refresh(persist=False, wanted=Wanted(tuple(texts), frozenset(tags)))
        else:
            catalog.read_wanted(Wanted(tuple(texts), frozenset(tags)), persist=False)
        assert catalog.partial
        check(query)
    assert catalog.complete(persist=False, limit=5) is None
    assert catalog.unread_chars == sum(len(d) - scan_memory(d)[2] for rel, d in on_disk.items()  # type: ignore[index]
                                       if rel in catalog._unread)
    catalog.complete(persist=False)
    assert not catalog.partial and catalog.unread_chars == 0
