"""The keyword lane over texts held in memory, while the Whoosh index is being built.

A fresh clone of a large store has no keyword index: building one with Whoosh's writer costs
seconds (~3.7 s of a 5 s first read at 1k memories). Until the background build is done, a read's
keyword lane comes from here: every document analysed with the keyword index's own analysers
and scored with its BM25F (same idf, same quantised field lengths, same sums in the same order as
``keyword.ArrayScorer``), so its hits and scores are the ones Whoosh would give.

Analysis is the cost: the text and code fields tokenise with one regular expression, and every
later step of both analysers works on one token at a time, so each distinct token is analysed
once (a store repeats most of its words) and a document is a few dictionary look-ups per token.

A store with much text (over ``EAGER_CHARS``) is analysed as queries need it: a term's documents
are found by a substring of it that every text holding the term contains (``source``), and only
those are analysed. BM25's mean field lengths are then estimated from an even sample of the
documents (``LENGTH_SAMPLE``) until every document is analysed: hits and document frequencies stay exact,
and scores differ from Whoosh's by that estimate alone.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import numpy as np

from .keyword import BM25Params, KeywordHit, _byte_lengths, _rarest, query_identifiers
from .terms import (
    CODE_PATTERN,
    EXACT,
    INTRA_DELIMS,
    STOP_WORDS,
    code_analyzer,
    code_forms,
    code_shaped,
    code_terms,
    keyword_analyzer,
    keyword_terms,
)

_TOKENS = re.compile(CODE_PATTERN)
_BETWEEN = re.compile(f"[^{re.escape(INTRA_DELIMS)}]+")
_CASE_CUT = re.compile("(?<=[a-z])(?=[A-Z])")
FIELDS = ("text", "code", "tags")
# A store whose texts hold more characters than this (the ones not analysed yet) is analysed as
# queries need it: at ~4 MB (10k long memories) analysing everything took 1.1-1.4 s of a first
# read; below ~1 MB it costs under a quarter of a second and keeps scores exactly Whoosh's.
EAGER_CHARS = 1_000_000
LENGTH_SAMPLE = 300  # documents (at most a tenth) whose terms per character stand for all until all are analysed
_NOTHING: Counter[str] = Counter()  # the text and code fields of a document not analysed yet
OUTSIDE_TAG = "\x00tag:"  # a tag's key in ``ScanLane.outside_holding`` (the catalog's ``TAG_KEY``)


def source(field_name: str, term: str) -> str | None:
    """A string that the lower-cased text of every document holding ``term`` in ``field_name``
    contains; None when no such string is known (every text must be analysed).

    A ``code`` term is a piece of a token, lower-cased or as written (``EXACT``). A ``text`` term
    is a piece lower-cased, then Porter-stemmed, and the stemmer changes only a word's last
    letters: of the suffixes it writes, the letters that need not be in the word are a final
    ``e`` (``hoping`` -> ``hope``, ``-ation`` -> ``-ate``) or ``i`` (``happy`` -> ``happi``), and
    ``-bility`` -> ``-ble`` / ``-bl`` (``possibility`` -> ``possibl``). What precedes them is the
    start of the word (``tests/test_scanlane.py`` checks this on random chains of those suffixes).
    """
    if field_name == "code":
        got = (term[len(EXACT):] if term.startswith(EXACT) else term).lower()
    elif term.endswith("ble"):
        got = term[:-2]
    elif term.endswith(("bl", "e", "i")):
        got = term[:-1]
    else:
        got = term
    # str.lower maps a capital sigma by what surrounds it: a token lowered alone may differ there
    # from the same letters lowered inside the text.
    return got if got and "σ" not in got and "ς" not in got else None


_QUERY_ANALYZER: list[Any] = []


def wanted(query: str) -> tuple[list[str], list[str]] | None:
    """What a store's files must hold to be a hit of ``query`` in this lane: (strings, tags).
    A document holds a term of the query only if its lower-cased text contains that term's
    ``source``, or one of its tags is a text term; None when some term has no source (every
    text could hold it)."""
    if not _QUERY_ANALYZER:
        _QUERY_ANALYZER.append(keyword_analyzer())
    analyzer = _QUERY_ANALYZER[0]
    terms = list(dict.fromkeys(t.text for word in keyword_terms(query) for t in analyzer(word)))
    texts: list[str] = []
    for field_name, term in [*(("code", t) for t in code_terms(query)), *(("text", t) for t in terms)]:
        got = source(field_name, term)
        if got is None:
            return None
        texts.append(got)
    return list(dict.fromkeys(texts)), terms


class _Memo(dict[str, Any]):
    """A token's terms, computed once: looked up from C (``map(memo.__getitem__, tokens)``)."""

    def __init__(self, fn: Callable[[str], Any]) -> None:
        super().__init__()
        self.fn = fn

    def __missing__(self, key: str) -> Any:
        value = self[key] = self.fn(key)
        return value


class _Doc:
    """One memory: its text, and once analysed its three scored fields (term -> frequency)
    with their lengths; the tags field is analysed at once (it is short)."""

    __slots__ = ("fields", "id", "lengths", "tags", "text")

    def __init__(self, mid: str, tags: Counter[str], text: str) -> None:
        self.id = mid
        self.text = text
        self.tags = tags
        self.fields: tuple[Counter[str], Counter[str], Counter[str]] | None = None
        self.lengths = (0, 0, sum(tags.values()))


class ScanLane:
    """``KeywordIndex``'s read side (``hits``, ``doc_freq``, ``doc_count``) over documents in memory."""

    def __init__(self, params: BM25Params, eager_chars: int | None = None, sample: int = LENGTH_SAMPLE) -> None:
        from whoosh.analysis import KeywordAnalyzer
        from whoosh.util.numeric import length_to_byte

        self.b = params.bm25_b
        self.k1 = params.bm25_k1
        self.eager_chars = EAGER_CHARS if eager_chars is None else eager_chars
        self.sample = sample
        self._query_analyzer = keyword_analyzer()
        self._text_analyzer = keyword_analyzer()
        self._code_analyzer = code_analyzer()
        self._tags_analyzer = KeywordAnalyzer(lowercase=True, commas=True)
        self._length_to_byte = length_to_byte
        self._bytes = _byte_lengths()
        from whoosh.lang.porter import stem

        text_analyzer, tags_analyzer = self._text_analyzer, self._tags_analyzer
        stems = _Memo(stem)  # pieces recur across tokens (``hadoop`` of every ``org.apache.hadoop...``)

        def words(raw: str) -> list[str]:
            if raw.isascii() and (raw.isdigit() or (raw.isalpha() and (raw.islower() or raw[1:].islower()))):
                # A word or a number with nothing to split (no case change inside, no digit
                # next to a letter): the analyser only lowers, stops or stems it (its
                # StemFilter is this Porter stemmer behind a cache).
                low = raw.lower()
                return [] if len(low) < 2 or low in STOP_WORDS else [stems[low]]
            if raw.isascii() and "'" not in raw:
                # What the IntraWordFilter does to an ASCII token without an apostrophe (its
                # possessive rule): cut at the delimiters, then between a lower-case and an
                # upper-case letter. Whoosh's filter chain costs ~18 us a token; a long store's
                # vocabulary is mostly such tokens (paths, dotted names, ids), each seen once.
                out = []
                for part in _BETWEEN.findall(raw):
                    for piece in _CASE_CUT.split(part):
                        low = piece.lower()
                        if len(low) >= 2 and low not in STOP_WORDS:
                            out.append(stems[low])
                return out
            return [t.text for t in text_analyzer(raw, mode="index")]

        self._words = _Memo(words)
        self._forms = _Memo(code_forms)
        self._tags = _Memo(lambda joined: [t.text for t in tags_analyzer(joined, mode="index")])
        # One tags field per distinct tag list, shared by the documents that have it (never
        # changed once made): a store repeats its tag lists.
        self._tag_counts = _Memo(lambda joined: Counter(self._tags[joined]))
        self._by_key: dict[str, _Doc] = {}  # doc key -> document (reused across updates)
        self.docs: list[_Doc] = []
        self._cols: list[list[Counter[str]]] = [[], [], []]  # per field, every document's term counts
        self._postings: dict[tuple[str, str], tuple[np.ndarray, np.ndarray] | None] = {}
        # Documents not analysed yet, in order (a dict: analysing some removes them in their
        # own count, not the store's).
        self._waiting: dict[int, None] = {}
        self._lowered: dict[int, str] = {}  # their texts lower-cased, searched for a term's source
        self._totals: tuple[float, float, float] | None = None
        self._estimated = False  # the totals come from a sample
        self._quantised: np.ndarray = np.zeros((0, 3))
        self._quantised_memo: dict[int, float] = {}  # a field length -> its quantised length
        # Documents of the store not in ``docs`` yet (a partial load's unread files) and, by a
        # term's ``source``, how many of them may hold it: counted in a term's idf, so that a
        # partial store's scores weigh its terms as the whole store's do.
        self.outside = 0
        self.outside_holding: dict[str, int] = {}
        self.outside_chars = 0  # the characters of their texts: BM25's mean lengths are the whole store's

    # -- documents ---------------------------------------------------------------------------------
    def set_docs(self, docs: Iterable[tuple[str, str, str, list[str], str]]) -> None:
        """Hold exactly these (id, doc key, kind, tags, text) documents, in this order."""
        by_key: dict[str, _Doc] = {}
        out: list[_Doc] = []
        for mid, key, _kind, tags, text in docs:
            doc = self._by_key.get(key)
            if doc is None or doc.id != mid:
                doc = _Doc(mid, self._tag_counts[",".join(tags)], text)
            by_key[key] = doc
            out.append(doc)
        self._by_key = by_key
        self.docs = out
        self._cols = [[d.fields[i] if d.fields else _NOTHING for d in out] for i in range(2)] + [[d.tags for d in out]]
        self._postings = {}
        self._totals = None
        self._lowered = {}
        quantised = self._quantised_lengths
        self._quantised = np.array([[quantised(n) for n in d.lengths] for d in out],
                                   dtype=np.float64).reshape(len(out), 3)
        self._waiting = {i: None for i, d in enumerate(out) if d.fields is None}
        if sum(len(out[i].text) for i in self._waiting) <= self.eager_chars:
            self._analyse_at(self._waiting)

    def _analyse_at(self, numbers: Iterable[int]) -> None:
        # Both analysers work token by token after one regular expression: each distinct token
        # is analysed once, and a document costs a few C-level look-ups per token.
        done: list[int] = []
        cols, docs = self._cols, self.docs
        words_of, forms_of = self._words.__getitem__, self._forms.__getitem__
        for i in numbers:
            doc = docs[i]
            if doc.fields is None:
                tokens = _TOKENS.findall(doc.text)
                words = Counter(chain.from_iterable(map(words_of, tokens)))
                forms = Counter(chain.from_iterable(map(forms_of, tokens)))
                doc.fields = (words, forms, doc.tags)
                doc.lengths = (words.total(), forms.total(), doc.lengths[2])
            cols[0][i], cols[1][i] = doc.fields[0], doc.fields[1]
            done.append(i)
        if done:
            # One numpy assignment for all (each has a fixed cost); a length's quantised form
            # is memoised (lengths repeat).
            quantised = self._quantised_lengths
            self._quantised[done, 0] = [quantised(docs[i].lengths[0]) for i in done]
            self._quantised[done, 1] = [quantised(docs[i].lengths[1]) for i in done]
            waiting, lowered = self._waiting, self._lowered
            for i in done:
                waiting.pop(i, None)
                lowered.pop(i, None)

    def _quantised_lengths(self, n: int) -> float:
        got = self._quantised_memo.get(n)
        if got is None:
            got = self._quantised_memo[n] = float(self._bytes[self._length_to_byte(n)])
        return got

    def _field_totals(self) -> tuple[float, float, float]:
        """Each field's summed length over the documents: exact once every document is analysed;
        until then the text and code fields' are estimated from an even sample of documents,
        as terms per character of text times the characters of all (a document's length varies
        far more than its terms per character). Kept while estimated: scores do not move from
        one read to the next."""
        if self._totals is not None and (self._waiting or not self._estimated):
            return self._totals
        docs, n = self.docs, len(self.docs)
        tags = sum(d.lengths[2] for d in docs)
        picked: list[int] = []
        if self._waiting:
            size = max(1, min(self.sample, n // 10))
            picked = sorted({round(k * (n - 1) / max(1, size - 1)) for k in range(size)})
            self._analyse_at(picked)
        self._estimated = bool(self._waiting)
        if self._estimated:
            per_char = sum(len(docs[i].text) for i in picked) or 1
            chars = sum(len(d.text) for d in docs)
            self._totals = (chars * sum(docs[i].lengths[0] for i in picked) / per_char,
                            chars * sum(docs[i].lengths[1] for i in picked) / per_char, tags)
        else:
            self._totals = (sum(d.lengths[0] for d in docs), sum(d.lengths[1] for d in docs), tags)
        return self._totals

    # -- the read side -------------------------------------------------------------------------------
    def doc_count(self) -> int:
        return len(self.docs)

    def analysed(self) -> int:
        """How many documents have been analysed (all, unless the store's text is long)."""
        return len(self.docs) - len(self._waiting)

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
        if field_name != "tags" and self._waiting:
            self._analyse_at(self._holding(field_name, term))
        col = self._cols[FIELDS.index(field_name)]
        ids = [i for i, counts in enumerate(col) if term in counts]
        got = (np.array(ids, dtype=np.int64), np.array([col[i][term] for i in ids], dtype=np.float64)) if ids else None
        self._postings[key] = got
        return got

    def _holding(self, field_name: str, term: str) -> list[int]:
        """The documents not analysed yet whose text may hold the term."""
        needle = source(field_name, term)
        if needle is None:
            return list(self._waiting)
        lowered = self._lowered
        if len(lowered) != len(self._waiting):
            docs = self.docs
            lowered.update((i, docs[i].text.lower()) for i in self._waiting if i not in lowered)
        found = [i for i in self._waiting if needle in lowered[i]]
        if field_name == "code" and found:
            # A code form is a whole token or a run of its pieces: in the text it has no word
            # character on either side (``name`` of ``user.name``, not of ``namenode``; lowering
            # never turns a character that is not one into one).
            alone = re.compile(rf"(?<!\w){re.escape(needle)}(?!\w)")
            found = [i for i in found if alone.search(lowered[i])]
        return found

    def _outside_df(self, field_name: str, term: str) -> int:
        """How many documents not in ``docs`` yet may hold the term: a tag's holders, or the
        fewest holders among the strings counted that its ``source`` contains (a string's
        holders include the term's)."""
        if field_name == "tags":
            return self.outside_holding.get(OUTSIDE_TAG + term, 0)
        needle = source(field_name, term)
        if needle is None:
            return self.outside
        return min((n for text, n in self.outside_holding.items() if text in needle), default=0)

    def doc_frequency(self, field_name: str, term: str) -> int:
        got = self._term(field_name, term)
        return 0 if got is None else len(got[0])

    def doc_freq(self, word: str) -> int:
        """How many of the store's documents hold ``word`` (the unread ones a partial catalog
        counted included: the ranking judges a word's rarity by the whole store)."""
        if code_shaped(word):
            return self._store_df("code", word.lower())
        terms = self.analyse([word])
        if not terms:
            return 0
        return max(self._store_df("text", t) for t in terms)

    def _store_df(self, field_name: str, term: str) -> int:
        df = self.doc_frequency(field_name, term)
        return df + self._outside_df(field_name, term) if self.outside else df

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        return [(h.id, h.score) for h in self.hits(query, limit)]

    def hits(self, query: str, limit: int) -> list[KeywordHit]:
        """As ``KeywordIndex.hits`` (through ``ArrayScorer``), on one segment of every document."""
        pairs = self.pairs(query)
        if not pairs:
            return []
        identifiers = query_identifiers(query, pairs, self.doc_frequency, self.analyse)
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
        totals = self._field_totals()
        store = n + self.outside
        scale = 1.0
        if self.outside:
            # The text and code fields' terms per character of the documents held, over the
            # characters of all (as ``_field_totals`` estimates them from a sample).
            chars = sum(len(d.text) for d in self.docs) or 1
            scale = (chars + self.outside_chars) / chars * n / store
        for field_name, text in pairs:
            df = self._store_df(field_name, text)
            idf = math.log(1.0 + (store - df + 0.5) / (df + 0.5))
            mean = totals[FIELDS.index(field_name)] / n * (scale if field_name != "tags" else 1.0)
            stats[field_name, text] = (idf, mean or 1)
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
                held[field_name].append((len(ids) + (self._outside_df(field_name, text) if self.outside else 0), ids))
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
                           int(codes[i]), store, word_df=int(words[i]))
                for i in order]

