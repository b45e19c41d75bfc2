"""Lane B knows code: a function, class, path, env setting or error code named in a query finds
the memory that spells it, whole or inside a dotted call, through the real CLI; and a rare
identifier held verbatim passes the gate that a low cosine would otherwise close."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import EXAMPLE_STORE, CliResult, store_files

from memstore.index import embedder as embedder_mod
from memstore.index import terms
from memstore.index.keyword import KeywordIndex
from memstore.read import ranking, retrieve
from memstore.store.workspace import Workspace, open_workspace
from memstore.verbs import api

pytestmark = pytest.mark.model

CODE_MEMORIES = {
    "raise": "Call `resp.raise_for_status()` after every request to the billing API; a 4xx body is "
             "otherwise parsed as if it were data.",
    "unique": "Inserting an order twice raises `asyncpg.exceptions.UniqueViolationError`; catch it and "
              "return the order that already exists.",
    "tz": "Run the report containers with `TZ=UTC`: the nightly job compares naive timestamps.",
    "mongo": "The users import fails with E11000 duplicate key error on email: the unique index is on the "
             "lower-cased address, so normalise before inserting.",
    "oracle": "The warehouse sync fails with ORA-00942 (table or view does not exist) when the reporting "
              "schema grant is missing; ask the DBA to re-run grants.sql.",
    "conflict": "The inventory service answers HTTP 409 when two reservations race; retry once with the "
                "new version number.",
    "cache": "Product pages are cached for five minutes in Redis; purge the cache key after a price change.",
    "deploy": "Deploys go out on Tuesdays and Thursdays only, never on a Friday afternoon.",
}


def _write(ws: Workspace, text: str) -> str:
    memory = {"kind": "fact", "scope": "repo", "text": text, "evidence_refs": ["user:seen it"]}
    return api.write(ws, {"memory": memory, "allow_duplicate": True})["id"]


@pytest.fixture
def code_store(ws: Workspace) -> dict[str, str]:
    return {key: _write(ws, text) for key, text in CODE_MEMORIES.items()}


def _ids(out: Any) -> list[str]:
    return [r["id"] for r in out["results"]]


@pytest.mark.parametrize(("query", "key"), [
    ("raise_for_status", "raise"),
    ("UniqueViolationError", "unique"),
    ("TZ=UTC", "tz"),
    ("E11000", "mongo"),
    ("ORA-00942", "oracle"),
    ("HTTP 409", "conflict"),
])
def test_an_identifier_finds_the_memory_that_spells_it(repo: Path, code_store: dict[str, str],
                                                       cli: Callable[..., CliResult], query: str, key: str) -> None:
    before = store_files(repo)
    rc, out, err = cli("read", query, cwd=repo)
    assert rc == 0, err
    assert _ids(out)[:1] == [code_store[key]], (query, out["results"], out["stats"])
    assert store_files(repo) == before  # a read writes no memory file


def test_an_unrelated_query_on_a_small_store_is_still_empty(repo: Path, code_store: dict[str, str],
                                                            cli: Callable[..., CliResult]) -> None:
    for query in ("how long should sourdough bread proof at high altitude",
                  "what did Caroline say about the LGBTQ support group"):
        rc, out, err = cli("read", query, cwd=repo)
        assert rc == 0, err
        assert out["results"] == [], (query, out["results"])


@pytest.fixture
def example(tmp_path: Path) -> Path:
    store = tmp_path / "example" / ".memory"
    shutil.copytree(EXAMPLE_STORE, store, ignore=shutil.ignore_patterns(".index"))
    return store


ASYNCPG_MEMORIES = {"01m6gbcm3h832wbgwh16zwgtmf", "01m7qmnacsv79r4sxz5kyagq11"}  # the fact and its change


@pytest.mark.parametrize("query", ["asyncpg", "does session.py build the async engine with asyncpg"])
def test_the_example_store_answers_questions_that_name_code(example: Path, tmp_path: Path,
                                                            cli: Callable[..., CliResult], query: str) -> None:
    rc, out, err = cli("--store", str(example), "read", query, cwd=tmp_path)
    assert rc == 0, err
    assert ASYNCPG_MEMORIES & set(_ids(out)), (out["results"], out["stats"])


@pytest.mark.parametrize("query", ["CORS error when the frontend calls the API", "the API",
                                   "the iOS app crashes on launch after upgrading Xcode"])
def test_a_word_is_not_the_folder_it_spells(example: Path, tmp_path: Path, cli: Callable[..., CliResult],
                                            query: str) -> None:
    """The example store's paths hold ``app`` and ``api`` folders (``app/api/routes/orders.py``):
    "API" in a question is the acronym, and "app" in a sentence the word, not those folders; they
    must not open the gate for the memories that cite them (they did: the orders route answered
    "CORS error ..." at cosine 0.23). A look-up by the name alone still finds its holders."""
    rc, out, err = cli("--store", str(example), "read", query, cwd=tmp_path)
    assert rc == 0, err
    assert out["results"] == [], (out["results"], out["stats"])


def test_keyword_only_reads_abstain_on_unrelated_queries(repo: Path, code_store: dict[str, str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the model every query shares a word with some memory: the answer is empty unless
    a memory carries most of the query's weight, or a rare identifier of it."""
    broken = embedder_mod.Embedder(model_path=str(Path("/nonexistent/model")))
    monkeypatch.setattr(embedder_mod, "_shared", broken)
    monkeypatch.setattr(retrieve, "get_embedder", lambda: broken)
    ws = open_workspace(cwd=repo)
    off_topic = retrieve.read(ws, {"query": "which cache should the new search page use for its results"})
    assert any(w.startswith("semantic lane unavailable") for w in off_topic["warnings"])
    assert off_topic["results"] == [], off_topic["results"]
    on_topic = retrieve.read(ws, {"query": "purge the Redis cache key after a price change"})
    assert _ids(on_topic)[:1] == [code_store["cache"]]
    by_name = retrieve.read(ws, {"query": "raise_for_status"})
    assert _ids(by_name)[:1] == [code_store["raise"]]


def test_a_keyword_index_of_the_previous_schema_is_rebuilt(tmp_path: Path) -> None:
    folder = tmp_path / "keyword"
    first = KeywordIndex(folder, ranking.RankingParams())
    first.apply([("m1", "fact", [], "Call resp.raise_for_status() after every request")], [])
    first.close()
    (folder / "VERSION").write_text("3")  # as the keyword lane before the code field wrote it
    again = KeywordIndex(folder, ranking.RankingParams())
    assert again.created and again.doc_count() == 0  # rebuilt from the files, never misread


def test_code_forms_keep_identifiers_whole_and_by_pieces() -> None:
    def folded(token: str) -> set[str]:
        return {f for f in terms.code_forms(token) if not f.startswith(terms.EXACT)}

    assert folded("resp.raise_for_status") == {"resp.raise_for_status", "resp", "raise_for_status"}
    assert {"app/db/session.py", "session.py", "db/session.py", "session"} <= folded("app/db/session.py")
    assert folded("TZ=UTC") == {"tz=utc", "tz", "utc"}
    assert terms.code_forms("E11000") == ["e11000", "^E11000"]
    assert "^Session.send" in terms.code_forms("requests.Session.send")
    assert folded("10:30") == {"10:30"}  # a number alone is no identifier
    assert terms.code_forms("asyncpg") == []  # a plain word: the text field has it
    words = [t.text for t in terms.keyword_analyzer()("UniqueViolationError raise_for_status")]
    assert words == ["uniqu", "violat", "error", "rais", "statu"]


def test_rarity_is_a_share_of_the_store_whatever_its_size() -> None:
    """A term one memory of four holds is as rare as one 2,000 of 10,000 hold (an idf bar could
    not say so: no term of a four-memory store reaches idf 1.5); half of a small store is not."""
    share = ranking.RankingParams().rare_share
    assert ranking.rare(1, 4, share) and ranking.rare(1, 10_000, share)
    assert ranking.rare(2_000, 10_000, share) and not ranking.rare(2_001, 10_000, share)
    assert ranking.rare(3, 15, share) and not ranking.rare(4, 15, share)
    assert not ranking.rare(2, 4, share) and not ranking.rare(5, 10, share)
    assert not ranking.rare(0, 4, share)  # held by none: nothing to answer with


def _store_with_best_cosine(n: int, best: float) -> tuple[np.ndarray, np.ndarray]:
    """A query vector and n unit rows: row 0 at cosine ``best`` to it, the others near 0."""
    rng = np.random.default_rng(7)
    q = np.zeros(64, dtype=np.float32)
    q[0] = 1.0
    rows = rng.normal(size=(n, 64)).astype(np.float32)
    rows[:, 0] = 0.0
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    rows[0] = 0.0
    rows[0, 0], rows[0, 1] = best, np.sqrt(1 - best**2)
    return q, rows


@pytest.mark.parametrize(("n", "word_df", "mode", "best", "answered"), [
    (10, 1, "targeted", 0.35, True),    # a word one memory of ten holds: the bar is 0.30 here
    (10, 5, "targeted", 0.35, False),   # a word half the store holds ('tests'): vague, the bar stays 0.40
    (400, 1, "targeted", 0.35, False),  # the bar was set on stores this size: unchanged
    (10, 1, "ambient", 0.45, True),     # the ambient bar by its own curve: 0.50 -> 0.41
    (10, 5, "ambient", 0.45, False),
])
def test_a_small_store_lowers_the_bar_for_a_query_specific_to_it(n: int, word_df: int, mode: str, best: float,
                                                                 answered: bool) -> None:
    q, rows = _store_with_best_cosine(n, best)
    evidence = {0: (0.5, 0, n, word_df)}  # memory 0 holds half the query's idf, no identifier
    got = ranking.rank(q, rows, [(0, 3.0)], ["fact"] * n, evidence=evidence, mode=mode)
    assert got.gate.passed is answered, got.gate
    assert [r.index for r in got.results][:1] == ([0] if answered else [])
    p = ranking.RankingParams()
    lowered = ranking.small_store_lowering(n, word_df == 1, p, mode)
    assert got.gate.bar == pytest.approx(p.query_bar[mode] - lowered)
    assert (lowered > 0) is (n < p.small_store_size and word_df == 1)


def test_the_store_size_the_gate_sees_is_what_is_in_scope() -> None:
    """A kind filter or archived memories leave fewer memories in scope: the bar is that of the
    memories the query is asked against, not of every row the index holds."""
    q, rows = _store_with_best_cosine(400, 0.35)
    evidence = {0: (0.5, 0, 400, 1)}
    whole = ranking.rank(q, rows, [(0, 3.0)], ["fact"] * 400, evidence=evidence)
    scoped = ranking.rank(q, rows, [(0, 3.0)], ["fact"] * 400, evidence=evidence, exclude=set(range(10, 400)))
    assert not whole.gate.passed and scoped.gate.passed, (whole.gate, scoped.gate)
    assert [r.index for r in scoped.results] == [0]
