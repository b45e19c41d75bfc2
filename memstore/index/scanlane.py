"""The keyword lane over texts held in memory, while the Whoosh index is being built.

A fresh clone of a large store has no keyword index: building one with Whoosh's writer costs
seconds (~3.7 s of a 5 s first read at 1k memories). Until the background build is done, a read's
keyword lane comes from here: every document analysed with the keyword index's own analysers
and scored with its BM25F (same idf, same quantised field lengths, same sums in the same order as
``keyword.ArrayScorer``), so its hits and scores are the ones Whoosh would give.

Analysis is the cost: the text and code fields tokenise with one regular expression, and every
later step of both analysers works on one token at a time, so each distinct token is analysed
once (a store repeats most of its words) and a document is a few dictionary look-ups per token.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import chain

import numpy as np

from .keyword import BM25Params, KeywordHit, _byte_lengths, _rarest, query_identifiers
from .terms import (
    CODE_PATTERN,
    EXACT,
    STOP_WORDS,
    code_analyzer,
    code_forms,
    code_shaped,
    code_terms,
    keyword_analyzer,
    keyword_terms,
)

_TOKENS = re.compile(CODE_PATTERN)
FIELDS = ("text", "code", "tags")


class _Memo(dict[str, list[str]]):
    """A token's terms, computed once: looked up from C (``map(memo.__getitem__, tokens)``)."""

    def __init__(self, fn: Callable[[str], list[str]]) -> None:
        super().__init__()
        self.fn = fn

    def __missing__(self, key: str) -> list[str]:
        value = self[key] = self.fn(key)
        return value


class _Doc:
    """One memory as the three scored fields hold it: term -> frequency, and the field lengths."""

    __slots__ = ("fields", "id", "lengths")

    def __init__(self, mid: str, fields: tuple[Counter[str], Counter[str], Counter[str]]) -> None:
        self.id = mid
        self.fields = fields
        self.lengths = tuple(sum(f.values()) for f in fields)


class ScanLane:
    """``KeywordIndex``'s read side (``hits``, ``doc_freq``, ``doc_count``) over documents in memory."""

    def __init__(self, params: BM25Params) -> None:
        from whoosh.analysis import KeywordAnalyzer
        from whoosh.util.numeric import length_to_byte

        self.b = params.bm25_b
        self.k1 = params.bm25_k1
        self._query_analyzer = keyword_analyzer()
        self._text_analyzer = keyword_analyzer()
        self._code_analyzer = code_analyzer()
        self._tags_analyzer = KeywordAnalyzer(lowercase=True, commas=True)
        self._length_to_byte = length_to_byte
        from whoosh.lang.porter import stem

        text_analyzer, tags_analyzer = self._text_analyzer, self._tags_analyzer

        def words(raw: str) -> list[str]:
            if raw.isascii() and (raw.isdigit() or (raw.isalpha() and (raw.islower() or raw[1:].islower()))):
                # A word or a number with nothing to split (no case change inside, no digit
                # next to a letter): the analyser only lowers, stops or stems it (its
                # StemFilter is this Porter stemmer behind a cache).
                low = raw.lower()
                return [] if len(low) < 2 or low in STOP_WORDS else [stem(low)]
            return [t.text for t in text_analyzer(raw, mode="index")]

        self._words = _Memo(words)
        self._forms = _Memo(code_forms)
        self._tags = _Memo(lambda joined: [t.text for t in tags_analyzer(joined, mode="index")])
        self._by_key: dict[str, _Doc] = {}  # doc key -> analysed document (reused across updates)
        self.docs: list[_Doc] = []
        self._cols: list[list[Counter[str]]] = [[], [], []]  # per field, every document's term counts
        self._postings: dict[tuple[str, str], tuple[np.ndarray, np.ndarray] | None] = {}
        self._totals = (0, 0, 0)
        self._quantised: np.ndarray = np.zeros((0, 3))

    # -- documents ---------------------------------------------------------------------------------
    def set_docs(self, docs: Iterable[tuple[str, str, str, list[str], str]]) -> None:
        """Hold exactly these (id, doc key, kind, tags, text) documents, in this order."""
        by_key: dict[str, _Doc] = {}
        out: list[_Doc] = []
        for mid, key, _kind, tags, text in docs:
            doc = self._by_key.get(key)
            if doc is None or doc.id != mid:
                doc = self._analyse(mid, tags, text)
            by_key[key] = doc
            out.append(doc)
        self._by_key = by_key
        self.docs = out
        self._cols = [[d.fields[i] for d in out] for i in range(3)]
        self._postings = {}
        self._totals = tuple(sum(d.lengths[i] for d in out) for i in range(3))  # type: ignore[assignment]
        lengths = _byte_lengths()
        to_byte = self._length_to_byte
        self._quantised = np.array([[lengths[to_byte(n)] for n in d.lengths] for d in out],
                                   dtype=np.float64).reshape(len(out), 3)

    def _analyse(self, mid: str, tags: list[str], text: str) -> _Doc:
        # Both analysers work token by token after one regular expression: each distinct token
        # is analysed once, and a document costs a few C-level look-ups per token.
        tokens = _TOKENS.findall(text)
        words = Counter(chain.from_iterable(map(self._words.__getitem__, tokens)))
        forms = Counter(chain.from_iterable(map(self._forms.__getitem__, tokens)))
        return _Doc(mid, (words, forms, Counter(self._tags[",".join(tags)])))

    # -- the read side -------------------------------------------------------------------------------
    def doc_count(self) -> int:
        return len(self.docs)

    def analyse(self, words: Iterable[str]) -> list[str]:
        out: list[str] = []
        for word in words:
            out += [t.text for t in self._query_analyzer(word)]
        return list(dict.fromkeys(out))

    def pairs(self, query: str) -> list[tuple[str, str]]:
        terms = self.analyse(keyword_terms(query))
        return ([("code", t) for t in code_terms(query)]
                + [("text", t) for t in terms] + [("tags", t) for t in terms])

    def _term(self, field_name: str, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(document numbers, frequencies) of one term, by a scan over the documents."""
        key = (field_name, term)
        if key in self._postings:
            return self._postings[key]
        col = self._cols[FIELDS.index(field_name)]
        ids = [i for i, counts in enumerate(col) if term in counts]
        got = (np.array(ids, dtype=np.int64), np.array([col[i][term] for i in ids], dtype=np.float64)) if ids else None
        self._postings[key] = got
        return got

    def doc_frequency(self, field_name: str, term: str) -> int:
        got = self._term(field_name, term)
        return 0 if got is None else len(got[0])

    def doc_freq(self, word: str) -> int:
        if code_shaped(word):
            return self.doc_frequency("code", word.lower())
        terms = self.analyse([word])
        if not terms:
            return 0
        return max(self.doc_frequency("text", t) for t in terms)

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        return [(h.id, h.score) for h in self.hits(query, limit)]

    def hits(self, query: str, limit: int) -> list[KeywordHit]:
        """As ``KeywordIndex.hits`` (through ``ArrayScorer``), on one segment of every document."""
        pairs = self.pairs(query)
        if not pairs:
            return []
        identifiers = query_identifiers(pairs, self.doc_frequency, self.analyse)
        found = self._score(pairs, limit, identifiers)
        folded = {t for f, t in pairs if f == "code" and not t.startswith(EXACT)}
        if folded and folded <= identifiers:
            found = [h._replace(named=True) for h in found]
        return found

    def _score(self, pairs: list[tuple[str, str]], limit: int, identifiers: frozenset[str]) -> list[KeywordHit]:
        n = len(self.docs)
        if n == 0:
            return []
        stats: dict[tuple[str, str], tuple[float, float]] = {}
        for field_name, text in pairs:
            df = self.doc_frequency(field_name, text)
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            stats[field_name, text] = (idf, (self._totals[FIELDS.index(field_name)] / n) or 1)
        b, k1 = self.b, self.k1
        text_idf = sum(stats[p][0] for p in stats if p[0] == "text") or 1.0
        scores = np.zeros(n)
        cover = np.zeros(n)
        matched = np.zeros(n, dtype=bool)
        held: dict[str, list[tuple[int, np.ndarray]]] = {"text": [], "code": []}
        for field_name, text in pairs:
            got = self._term(field_name, text)
            if got is None:
                continue
            ids, weights = got
            idf, avgfl = stats[field_name, text]
            lengths = self._quantised[ids, FIELDS.index(field_name)]
            scores[ids] += idf * ((weights * (k1 + 1)) / (weights + k1 * ((1 - b) + b * lengths / avgfl)))
            matched[ids] = True
            if field_name == "text":
                cover[ids] += idf
            if field_name == "text" or (field_name == "code" and text in identifiers):
                held[field_name].append((len(ids), ids))
        docs = np.flatnonzero(matched)
        if not len(docs):
            return []
        words = _rarest(held["text"], n)[docs]
        codes = _rarest(held["code"], n)[docs]
        scores, covers = scores[docs], cover[docs] / text_idf
        if limit < len(docs):
            keep = np.argpartition(-scores, limit - 1)[:limit]
            keep = np.flatnonzero(scores >= scores[keep].min())
            scores, docs, covers, codes, words = scores[keep], docs[keep], covers[keep], codes[keep], words[keep]
        order = np.lexsort((docs, -scores))[:limit]
        return [KeywordHit(self.docs[int(docs[i])].id, float(scores[i]), min(float(covers[i]), 1.0),
                           int(codes[i]), n, word_df=int(words[i]))
                for i in order]

