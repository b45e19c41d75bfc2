"""The scan lane stands in for the Whoosh index while it is built: on the same documents and
queries its hits must be Whoosh's (the array scorer's) exactly: ids, BM25F scores, coverage,
identifier and word rarity, the name look-up flag, document frequencies. A lane over much text
analyses only the documents a query's terms may be in: its hits and document frequencies are
still Whoosh's, and its scores differ by the estimated mean field lengths alone."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from memstore.index.keyword import KeywordHit, KeywordIndex
from memstore.index.scanlane import ScanLane, source
from memstore.index.store_index import doc_key
from memstore.index.terms import CODE_PATTERN, code_forms, keyword_analyzer
from memstore.read import ranking
from memstore.store.files import parse_markdown
from memstore.store.model import Memory

ROOT = Path(__file__).resolve().parent.parent
WORDS = [
    "migration", "column", "sqlite", "postgres", "timeout", "retry", "kafka", "consumer", "offset",
    "redis", "cache", "eviction", "tenant", "billing", "invoice", "webhook", "signature", "pytest",
    "fixture", "flaky", "deadlock", "failed", "failing", "fails", "the", "and", "HTTP 409", "self-care",
    "resp.raise_for_status()", "app/db/session.py", "TZ=UTC", "E11000", "UniqueViolationError",
    "asyncpg.exceptions.UniqueViolationError", "HTTPAdapter", "myStore", "ORA-00942", "db-primary",
    "v2.3.1", "10:30", "Frobnicator.rotate_tokens", "naïve", "café", "don't", "user's", "2026", "42", "7",
    "Migration", "The", "A", "Ab", "aB", "MIGRATION", "Running", "x86", "3rd",
    "FSDownload.java:1234", "HADOOP-1234", "org.apache.hadoop.fs.FileSystem", "getHTTPResponse.v2",
    "The.And.Or", "x/ÄB", "__init__.py", "O_RDONLY=1",
]
QUERIES = [
    "sqlite migration column already exists", "kafka consumer offset retry", "flaky pytest fixture",
    "billing webhook signature invoice", "redis", "nothing matches zzz", "raise_for_status in session.py",
    "TZ=UTC E11000 status", "UniqueViolationError", "asyncpg", "asyncpg.exceptions", "HTTP 409 conflict",
    "ORA-00942 table", "db-primary timeout", "rotate_tokens", "Frobnicator.rotate_tokens", "frobnicator",
    "why did the migration fail", "HTTPAdapter retries", "mystore", "café naïve", "the and of", "v2.3.1",
    "10:30 cron", "self-care", "user's session", "tenant", "session.py", "app/db", "2026 42 7", "running migrations",
    "x86 3rd ab",
]


def _random_docs(n: int, seed: int) -> list[tuple[str, str, list[str], str]]:
    rnd = random.Random(seed)
    docs = []
    for i in range(n):
        words = [rnd.choice(WORDS) for _ in range(rnd.randint(3, 40))]  # repeats: frequencies > 1
        tags = rnd.sample(["db", "Deploy", "ci", "auth", "billing flow", "x"], rnd.randint(0, 3))
        docs.append((f"m{i:05d}", rnd.choice(["fact", "problem", "solution"]), tags, " ".join(words)))
    docs.append(("m-dup-a", "fact", [], "kafka consumer offset retry"))  # equal scores: a tie
    docs.append(("m-dup-b", "fact", [], "kafka consumer offset retry"))
    return docs


def _example_docs() -> list[tuple[str, str, list[str], str]]:
    docs = []
    for path in sorted((ROOT / ".memory-example").glob("*/*.md")):
        meta, body = parse_markdown(path.read_text(encoding="utf-8"))
        docs.append((path.stem[:26], str(meta.get("kind", "fact")), list(meta.get("tags") or []), body))
    return docs


def _scan(docs: list[tuple[str, str, list[str], str]]) -> ScanLane:
    lane = ScanLane(ranking.RankingParams())
    lane.set_docs((mid, doc_key(Memory(id=mid, kind=kind, text=text, scope="repo", tags=tags)), kind, tags, text)
                  for mid, kind, tags, text in docs)
    return lane


def _whoosh(folder: Path, docs: list[tuple[str, str, list[str], str]]) -> KeywordIndex:
    ki = KeywordIndex(folder, ranking.RankingParams(), fresh=True)
    ki.apply(docs, [])
    return ki


def _same(got: list[KeywordHit], want: list[KeywordHit], limit: int) -> bool:
    """The same hits; where documents tie at the cut, which of them make it depends on how
    each index numbers its documents, so there only the scores must agree."""
    got, want = (sorted(h, key=lambda h: (-h.score, h.id)) for h in (got, want))
    if [h.score for h in got] != [h.score for h in want]:
        return False
    if len(want) < limit or not want:
        return got == want
    cut = want[-1].score
    return [h for h in got if h.score > cut] == [h for h in want if h.score > cut]


@pytest.mark.parametrize(("n", "seed"), [(300, 1), (2300, 2)])  # the small writer; the bulk one
def test_hits_and_scores_equal_whoosh(tmp_path: Path, n: int, seed: int) -> None:
    docs = _random_docs(n, seed)
    ki = _whoosh(tmp_path / "kw", docs)
    lane = _scan(docs)
    assert lane.doc_count() == ki.doc_count() == len(docs)
    for query in QUERIES:
        for limit in (5, 50):
            want, got = ki.hits(query, limit), lane.hits(query, limit)
            assert ki._scorer is not None
            assert _same(got, want, limit), (query, limit)
    assert any(h.named for h in lane.hits("UniqueViolationError", 5))
    for word in ["migration", "failing", "UniqueViolationError", "asyncpg", "session.py", "the", "zzz", "HTTP"]:
        assert lane.doc_freq(word) == ki.doc_freq(word), word
    ki.close()


def test_a_token_gets_the_terms_the_whoosh_analyser_gives_it() -> None:
    # The scan lane analyses a token by its pieces when it has separators; Whoosh analyses it
    # whole: the terms must not differ for any shape, in any order of first sight.
    from memstore.index.terms import CODE_PATTERN, keyword_analyzer

    analyser = keyword_analyzer()
    text = " ".join(WORDS) + (" FileSystem.java:88 fs.FileSystem HTTP 404.x is-a The.And a.b.c.d ORA-00942.x"
                              " v2.3.1-rc1 9.9.9 x..y getFoo/BarBaz==2 ÄÖü.x naïve-café")
    tokens = re.findall(CODE_PATTERN, text)
    for order in (tokens, tokens[::-1]):
        lane = ScanLane(ranking.RankingParams())
        for token in order:
            assert lane._words[token] == [t.text for t in analyser(token, mode="index")], token


def test_the_example_store_ranks_the_same(tmp_path: Path) -> None:
    docs = _example_docs()
    assert len(docs) > 10
    ki = _whoosh(tmp_path / "kw", docs)
    lane = _scan(docs)
    for query in [*QUERIES, "database driver psycopg", "asyncpg.exceptions.UniqueViolationError",
                  "alembic migration stamp", "DuplicateColumn", "tests/conftest.py"]:
        assert _same(lane.hits(query, 20), ki.hits(query, 20), 20), query
    ki.close()


def test_documents_follow_the_catalog() -> None:
    """Replacing the documents re-analyses only new texts, and drops the removed ones."""
    docs = _random_docs(50, 3)
    lane = _scan(docs)
    kept = [*docs[:20], ("m-new", "fact", [], "Frobnicator.rotate_tokens rotates quillwort")]
    lane.set_docs((mid, doc_key(Memory(id=mid, kind=kind, text=text, scope="repo", tags=tags)), kind, tags, text)
                  for mid, kind, tags, text in kept)
    assert lane.doc_count() == 21
    assert [h.id for h in lane.hits("quillwort", 5)] == ["m-new"]
    assert not {h.id for h in lane.hits("kafka consumer", 100)} & {mid for mid, *_ in docs[20:]}
    assert _scan([]).hits("kafka", 5) == []


def test_a_lane_analysing_as_queries_need_follows_the_catalog(tmp_path: Path) -> None:
    """New documents wait for a query like the rest; analysed ones that stay are kept, removed
    ones are gone: the hits are those of Whoosh over the new documents."""
    def lane_of(lane: ScanLane, docs: list[tuple[str, str, list[str], str]]) -> ScanLane:
        lane.set_docs((mid, doc_key(Memory(id=mid, kind=kind, text=text, scope="repo", tags=tags)), kind, tags,
                       text) for mid, kind, tags, text in docs)
        return lane

    docs = _random_docs(300, 6)
    lane = lane_of(ScanLane(ranking.RankingParams(), eager_chars=0, sample=10), docs)
    lane.hits("kafka consumer", 5)  # analyses the documents that hold those words
    before = lane.analysed()
    kept = [*docs[:150], ("m-new", "fact", [], "Frobnicator.rotate_tokens rotates quillwort kafka")]
    lane_of(lane, kept)
    assert 0 < lane.analysed() < before and lane.doc_count() == 151
    ki = _whoosh(tmp_path / "kw", kept)
    for query in ["quillwort", "Frobnicator.rotate_tokens", "kafka consumer", "redis cache", "flaky fixture"]:
        assert sorted(h.id for h in lane.hits(query, 500)) == sorted(h.id for h in ki.hits(query, 500)), query
    for word in ["kafka", "quillwort", "rotate_tokens", "redis"]:
        assert lane.doc_freq(word) == ki.doc_freq(word), word
    ki.close()


# Words where a term's letters are not simply the start of the token it came from.
TRICKY = [
    "NameNode", "namenode", "user.name", "fileName", "hostname", "NAMEnode", "name_node", "possibility",
    "possible", "happily", "happy", "hoping", "hope", "relational", "conditional", "generalization",
    "sensibility", "valency", "digitizer", "agreed", "plastered", "ΑΣ.x", "σοφία", "İstanbul.cfg",
    "\u212aelvin", "naïve", "getFileName()", "HTTP 503", "db-primary-2", "x.y.z", "e2e", "_private",
]


def test_a_term_is_found_by_its_source_in_every_word_it_comes_from() -> None:
    """The scan lane finds a term's documents by ``source(term)``: it must be in the lower-cased
    text of every token the term comes from, or nothing is missed only by luck."""
    from whoosh.lang.porter import stem

    # Every chain of the suffixes the Porter stemmer rewrites, on stems of every shape.
    suffixes = ["ational", "tional", "enci", "anci", "izer", "bli", "alli", "entli", "eli", "ousli",
                "ization", "ation", "ator", "alism", "iveness", "fulness", "ousness", "aliti", "iviti",
                "biliti", "logi", "icate", "ative", "alize", "iciti", "ical", "ful", "ness", "al", "ance",
                "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "sion", "tion", "ou",
                "ism", "ate", "iti", "ous", "ive", "ize", "s", "es", "ies", "sses", "ed", "ing", "eed", "y",
                "ly", "bly", "e", "at", "bl", "iz", "ity", "ility", "ll", "le"]
    rnd = random.Random(11)
    for _ in range(30000):
        head = "".join(rnd.choice("bcdfghjklmnpqrstvwxyz" if k % 2 == 0 else "aeiouy")
                       for k in range(rnd.randint(1, 5)))
        word = head + "".join(rnd.choice(suffixes) for _ in range(rnd.randint(0, 3)))
        found = source("text", stem(word))
        assert found is None or found in word, word
    # Every token of these texts, through the analysers the keyword index uses.
    analyser = keyword_analyzer()
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / ".memory-example").glob("*/*.md"))]
    texts = [" ".join(WORDS + TRICKY), *(p.read_text(encoding="utf-8") for p in docs)]
    tokens = {t for text in texts for t in re.findall(CODE_PATTERN, text)}
    assert len(tokens) > 1000
    for token in tokens:
        low = token.lower()
        for field_name, terms in (("text", [t.text for t in analyser(token, mode="index")]),
                                  ("code", code_forms(token))):
            for term in terms:
                found = source(field_name, term)
                assert found is None or found in low, (token, field_name, term)


@pytest.mark.parametrize("seed", [4, 5])
def test_a_lane_analysing_as_queries_need_finds_what_whoosh_finds(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    docs = _random_docs(500, seed) + [
        (f"t{i:03d}", "fact", [], " ".join(rnd.sample(TRICKY, 4)) + " " + " ".join(rnd.sample(WORDS, 5)))
        for i in range(120)]
    ki = _whoosh(tmp_path / "kw", docs)

    def lazy() -> ScanLane:
        lane = ScanLane(ranking.RankingParams(), eager_chars=0, sample=40)
        lane.set_docs((mid, doc_key(Memory(id=mid, kind=kind, text=text, scope="repo", tags=tags)), kind, tags, text)
                      for mid, kind, tags, text in docs)
        return lane

    # The documents of each term alone, each in a lane where nothing else was analysed.
    for query in ["happy", "hope", "possible", "sensible", "relational", "name", "user.name", "NameNode",
                  "getFileName", "ΑΣ.x", "σοφία", "İstanbul.cfg", "\u212aelvin", "HTTP 503", "db-primary-2", "e2e"]:
        for field_name, term in lazy().pairs(query):
            assert lazy().doc_frequency(field_name, term) == ki.searcher.doc_frequency(field_name, term), (
                field_name, term)
    lane = lazy()
    assert lane.analysed() == 0
    assert lane.hits("zzz nothing", 5) == [] and lane.analysed() == 40  # the sample of field lengths
    assert [h.id for h in lane.hits("quillwort user.name", 5)] == [h.id for h in ki.hits("quillwort user.name", 5)]
    assert lane.analysed() < len(docs) // 2  # only where a term may be
    # The words of TRICKY first, while most documents wait: a document a source misses stays
    # out of the hits only until another query's term has it analysed.
    queries = ["happy", "hope", "possible", "sensible", "relational", "name", "user.name", "NameNode", "filename",
               "ΑΣ", "σοφία", "istanbul", "\u212aelvin", "HTTP 503", "db-primary", "e2e", "private", *QUERIES]
    everything = len(docs)
    for query in queries:
        got, want = lane.hits(query, everything), ki.hits(query, everything)
        assert sorted(h.id for h in got) == sorted(h.id for h in want), query
        for h, w in zip(sorted(got, key=lambda h: h.id), sorted(want, key=lambda h: h.id), strict=True):
            assert h.score == pytest.approx(w.score, rel=0.1), query
            assert (h.coverage, h.code_df, h.word_df, h.named) == (w.coverage, w.code_df, w.word_df, w.named)
    for word in ["name", "NameNode", "user.name", "possibility", "happy", "istanbul", "σοφία", "zzz"]:
        assert lane.doc_freq(word) == ki.doc_freq(word), word
    # Once every document is analysed, the lengths are summed, not estimated: Whoosh's scores.
    lane.hits("σ", 5)  # a term with no source: every document is analysed for it
    assert lane.analysed() == everything
    for query in queries:
        assert _same(lane.hits(query, 5), ki.hits(query, 5), 5), query
    ki.close()
