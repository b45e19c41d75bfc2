"""Lane B's scorer: BM25F computed with numpy over a real Whoosh index must give Whoosh's own
scores and the exact top-k (every match scored), across segments, updates and deletions."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from memstore.index.keyword import KeywordIndex, _read_postings, whoosh_search
from memstore.read import ranking

WORDS = [
    "migration", "column", "sqlite", "postgres", "timeout", "retry", "kafka", "consumer", "offset",
    "redis", "cache", "eviction", "tenant", "billing", "invoice", "webhook", "signature", "pytest",
    "fixture", "flaky", "deadlock", "index", "vacuum", "certificate", "tls", "handshake", "upload",
    "s3", "bucket", "quota", "ratelimit", "worker", "celery", "cron",
    "resp.raise_for_status()", "app/db/session.py", "TZ=UTC", "E11000", "UniqueViolationError",
]
QUERIES = ["sqlite migration column already exists", "kafka consumer offset retry", "flaky pytest fixture",
           "tls certificate handshake", "billing webhook signature invoice", "redis", "nothing matches zzz",
           "raise_for_status in session.py", "TZ=UTC E11000 status"]


def _doc(rnd: random.Random, i: int) -> tuple[str, str, list[str], str]:
    words = [rnd.choice(WORDS) for _ in range(rnd.randint(4, 30))]  # repeats: term frequency > 1
    tags = rnd.sample(WORDS, rnd.randint(0, 2))
    return f"m{i:05d}", rnd.choice(["fact", "problem", "solution"]), tags, " ".join(words)


def _reference(ki: KeywordIndex, query: str) -> dict[str, float]:
    """Whoosh's own scores of every matching document (no top-N collector shortcuts)."""
    pairs = ki.pairs(query)
    return dict(whoosh_search(ki.searcher, pairs, None)) if pairs else {}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeywordIndex, set[str]]:
    rnd = random.Random(11)
    ki = KeywordIndex(tmp_path_factory.mktemp("kw") / "keyword", ranking.RankingParams())
    docs = [_doc(rnd, i) for i in range(2400)]
    ki.apply(docs, [])  # a bulk build: several segments
    ki.apply([_doc(rnd, i) for i in range(0, 300, 7)], [])  # replaced documents: deletions + a new segment
    removed = {f"m{i:05d}" for i in range(1, 400, 13)}
    ki.apply([_doc(rnd, i) for i in range(2400, 2450)], sorted(removed))
    return ki, removed


def test_scores_and_ranking_are_whoosh_bm25f_exactly(index: tuple[KeywordIndex, set[str]]) -> None:
    ki, removed = index
    assert len(list(ki.searcher.reader().leaf_readers())) >= 2  # the multi-segment path is exercised
    for query in QUERIES:
        ref = _reference(ki, query)
        got = ki.search(query, 25)
        assert ki._scorer is not None, "the array scorer fell back to Whoosh's search"
        assert len(got) == min(25, len(ref)), query
        for mid, score in got:
            assert score == pytest.approx(ref[mid], rel=1e-12), (query, mid)
        assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
        cut = got[-1][1] if got else 0.0
        returned = {mid for mid, _ in got}
        # nothing better was left out, and deleted or replaced versions never come back
        assert all(s <= cut * (1 + 1e-12) for mid, s in ref.items() if mid not in returned), query
        assert not returned & removed
        assert len(returned) == len(got)


def test_postings_decoded_in_blocks_are_whooshs_own(index: tuple[KeywordIndex, set[str]]) -> None:
    """The scorer decodes a term's posting blocks with numpy: every document number and weight
    is the one Whoosh's own matcher yields posting by posting, deleted documents included, for
    terms of one block and of many, with weights all 1.0 or varying."""
    ki, _removed = index
    shapes = set()
    for reader, _offset in ki.searcher.reader().leaf_readers():
        for field_name, text in sorted({p for q in [*QUERIES, " ".join(WORDS)] for p in ki.pairs(q)}):
            try:
                m = reader._terms.matcher(field_name, reader._text_to_bytes(field_name, text),
                                          reader.schema[field_name].format)
            except Exception:
                assert _read_postings(reader, field_name, text) is None
                continue
            ids, weights = [], []
            while m.is_active():
                ids.append(m.id())
                weights.append(m.weight())
                m.next()
            got = _read_postings(reader, field_name, text)
            assert got is not None
            assert got[0].tolist() == ids and got[1].tolist() == weights, (field_name, text)
            shapes.add((len(ids) > 128, len(set(weights)) > 1))
    assert {(False, False), (False, True), (True, True)} <= shapes  # one block and many


def test_new_documents_are_found_after_the_cache_has_seen_the_terms(tmp_path: Path) -> None:
    ki = KeywordIndex(tmp_path / "keyword", ranking.RankingParams())
    assert ki.search("kafka offset", 10) == []  # empty index
    ki.apply([("a1", "fact", [], "kafka consumer offset reset on deploy")], [])
    assert [mid for mid, _ in ki.search("kafka offset", 10)] == ["a1"]
    ki.apply([("a2", "fact", ["kafka"], "the kafka offset is committed after processing")], [])
    got = ki.search("kafka offset", 10)
    assert {mid for mid, _ in got} == {"a1", "a2"}
    assert [s for _, s in got] == pytest.approx(sorted(_reference(ki, "kafka offset").values(), reverse=True))
    ki.apply([], ["a1"])
    assert [mid for mid, _ in ki.search("kafka offset", 10)] == ["a2"]


def test_a_searcher_kept_across_small_changes_answers_as_a_fresh_one(tmp_path: Path) -> None:
    """After a commit the index keeps the readers of unchanged segments; a segment whose
    documents were deleted or replaced is read again, so nothing stale comes back."""
    rnd = random.Random(5)
    folder = tmp_path / "keyword"
    ki = KeywordIndex(folder, ranking.RankingParams())
    ki.apply([_doc(rnd, i) for i in range(2500)], [])
    live = {f"m{i:05d}" for i in range(2500)}
    for step in range(25):
        roll = rnd.random()
        if roll < 0.5:  # a new memory
            doc = _doc(rnd, 3000 + step)
            ki.apply([doc], [])
            live.add(doc[0])
        elif roll < 0.75:  # an edited one: its old version must never be found again
            mid = rnd.choice(sorted(live))
            ki.apply([(mid, "fact", [], f"edited{step} sqlite migration")], [])
        else:
            mid = rnd.choice(sorted(live))
            ki.apply([], [mid])
            live.discard(mid)
        fresh = KeywordIndex(folder, ranking.RankingParams())
        for query in ["sqlite migration column", "kafka consumer offset", f"edited{step}", "redis"]:
            got = ki.search(query, 2600)
            assert got == fresh.search(query, 2600), (step, query)
            assert {mid for mid, _ in got} <= live
        assert ki.doc_count() == fresh.doc_count() == len(live)
        fresh.close()
    # a new memory: the largest segment is unchanged, its reader is kept (and still right)
    big = max((r for r, _ in ki.searcher.reader().leaf_readers()), key=lambda r: r.doc_count_all())
    ki.apply([_doc(rnd, 9999)], [])
    assert any(r is big for r, _ in ki.searcher.reader().leaf_readers()), "an unchanged segment was reopened"
    assert ki.search("kafka consumer offset", 2600) == KeywordIndex(folder, ranking.RankingParams()).search(
        "kafka consumer offset", 2600)
