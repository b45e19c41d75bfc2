"""Text as both indexes see it: tokens, stop words, identifier forms, the Whoosh analysers and
weighting of the keyword index, and the top-k cut of a similarity vector.

The read pipeline (``memstore.read.ranking``) queries with the same rules it indexes with, so they
live here, below both. The Whoosh schema pickles ``code_forms`` by this module's path: moving it
needs a new ``keyword.SCHEMA_VERSION``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

# English function words plus question words. Question words carry the *form* of a question
# ("when did", "what is") and match every memory that happens to use them, so in the keyword
# lane they only add noise; the semantic lane still sees the full query.
# fmt: off
STOP_WORDS: frozenset[str] = frozenset((
    "a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any", "are",
    "aren't", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by",
    "can", "can't", "cannot", "could", "couldn't", "did", "didn't", "do", "does", "doesn't", "doing", "don't",
    "down", "during", "each", "else", "ever", "few", "for", "from", "further", "get", "got", "had", "hadn't",
    "has", "hasn't", "have", "haven't", "having", "he", "he'd", "he'll", "he's", "her", "here", "here's",
    "hers", "herself", "him", "himself", "his", "how", "how's", "however", "i", "i'd", "i'll", "i'm", "i've",
    "if", "in", "into", "is", "isn't", "it", "it's", "its", "itself", "just", "let's", "like", "likely", "may",
    "me", "might", "more", "most", "much", "must", "mustn't", "my", "myself", "no", "nor", "not", "now", "of",
    "off", "on", "once", "only", "or", "other", "ought", "our", "ours", "ourselves", "out", "over", "own",
    "same", "shall", "shan't", "she", "she'd", "she'll", "she's", "should", "shouldn't", "so", "some", "such",
    "than", "that", "that's", "the", "their", "theirs", "them", "themselves", "then", "there", "there's",
    "these", "they", "they'd", "they'll", "they're", "they've", "this", "those", "through", "to", "too",
    "under", "until", "up", "upon", "us", "very", "was", "wasn't", "we", "we'd", "we'll", "we're", "we've",
    "were", "weren't", "what", "what's", "when", "when's", "where", "where's", "whether", "which", "while",
    "who", "who's", "whom", "whose", "why", "why's", "will", "with", "won't", "would", "wouldn't", "yet", "you",
    "you'd", "you'll", "you're", "you've", "your", "yours", "yourself", "yourselves", "kind", "kinds", "sort",
    "thing", "things", "something", "anything", "way", "ways", "one", "ones",
))
# fmt: on

_TOKEN_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_'’]*(?:[.\-/:][A-Za-z0-9_]+)*")


def tokenize(text: str) -> list[str]:
    """Words and identifiers (``FSDownload.java``, ``HADOOP-1234``, ``db/x.sql`` stay whole)."""
    return _TOKEN_RE.findall(text)


def keyword_terms(query: str, stop_words: frozenset[str] = STOP_WORDS) -> list[str]:
    """The query terms worth sending to the keyword lane (stop and question words dropped)."""
    out: list[str] = []
    for tok in tokenize(query):
        low = tok.lower().replace("’", "'")
        if low in stop_words or len(low) < 2:
            continue
        if low.endswith("'s"):
            tok = tok[:-2]
        out.append(tok)
    return list(dict.fromkeys(out))


# A code token: a word with its dotted/path/``KEY=VALUE``/hyphenated continuations
# (``resp.raise_for_status``, ``app/db/session.py``, ``TZ=UTC``, ``ORA-00942``), or an
# all-caps word with a status number (``HTTP 409``). Both keyword fields tokenise with it.
CODE_PATTERN = r"\b[A-Z][A-Z0-9]+ [0-9]{3,}\b|\w+(?:[.\-/:=]\w+)*"
_CODE_SEP_RE = re.compile(r"[.\-/:= ]")
# What makes a token an identifier rather than a word: an inner separator, an underscore, a
# digit among letters, or a case change inside it (``UniqueViolationError``, ``myStore``).
_CODE_SHAPE_RE = re.compile(r"[._/:= ]|[A-Za-z]\d|\d[A-Za-z]|[a-z][A-Z]|[A-Z]{2}[a-z]|-\d|\d-")
# Where IntraWordFilter splits a code token into its words (the space joins ``HTTP 409``).
INTRA_DELIMS = "-_'\"()!@#$%^&*[]{}<>\\|;:,./?`~=+ "


def code_shaped(token: str) -> bool:
    """True for identifiers (``raise_for_status``, ``E11000``, ``HTTPAdapter``), false for words
    (``asyncpg``, ``self-care``, ``LGBTQ``)."""
    return bool(_CODE_SHAPE_RE.search(token))


EXACT = "^"  # prefix of a code form kept in its written case (``^Session.send``)


def code_forms(token: str) -> list[str]:
    """What the ``code`` field indexes for one token: nothing for a plain word; for an
    identifier itself and its separator-delimited pieces, each piece alone and every prefix and
    suffix run of pieces, lower-cased (``app/db/session.py`` -> ``app/db/session.py``, ``app``,
    ``db``, ``session``, ``py``, ``app/db``, ``app/db/session``, ``db/session.py``,
    ``session.py``), and each again as written, marked with ``EXACT``: a name in the case the
    query writes it is the surer match (``session.send`` is not ``Session.send``). A query names
    a function or a file by a part of the path it sits on."""
    if not code_shaped(token):
        return [token.lower()] if "-" in token else []  # hyphenated words match only whole
    cuts = [m.start() for m in _CODE_SEP_RE.finditer(token)]
    starts = [0, *(c + 1 for c in cuts)]
    ends = [*cuts, len(token)]
    pieces = [token, *(token[a:b] for a, b in zip(starts, ends, strict=True)),
              *(token[:b] for b in ends[:-1]), *(token[a:] for a in starts[1:])] if cuts else [token]
    # A number alone is no identifier (``10`` of ``10:30``): only the whole keeps it.
    kept = [p for i, p in enumerate(dict.fromkeys(pieces))
            if i == 0 or (len(p) >= 2 and p.lower() not in STOP_WORDS and not p.isdigit())]
    return list(dict.fromkeys([*(p.lower() for p in kept), *(EXACT + p for p in kept)]))


def code_terms(query: str, stop_words: frozenset[str] = STOP_WORDS) -> list[str]:
    """The query's tokens as the ``code`` field is searched: whole, lower-cased, no stop words;
    and, for an identifier, as written (``EXACT``)."""
    toks = [t for t in re.findall(CODE_PATTERN, query) if len(t) >= 2 and t.lower() not in stop_words]
    return list(dict.fromkeys([*(t.lower() for t in toks), *(EXACT + t for t in toks if code_shaped(t))]))


def keyword_analyzer() -> Any:
    """The Whoosh analyser for the keyword index's ``text`` field (imports whoosh lazily).

    Identifiers are split into their words (``raise_for_status`` -> raise, status;
    ``UniqueViolationError`` -> unique, violation, error) so a name is found inside a longer
    one; the whole names live in the ``code`` field (``code_analyzer``). Stop words are dropped
    at index time as well, which keeps field lengths about content; Porter stemming lets
    "fails"/"failed"/"failing" meet.
    """
    from whoosh.analysis import IntraWordFilter, LowercaseFilter, RegexTokenizer, StemFilter, StopFilter

    return (
        RegexTokenizer(CODE_PATTERN)
        | IntraWordFilter(delims=INTRA_DELIMS, splitnums=False)
        | LowercaseFilter()
        | StopFilter(stoplist=STOP_WORDS, minsize=2)
        | StemFilter()
    )


def code_analyzer() -> Any:
    """The Whoosh analyser for the ``code`` field: identifiers whole and by pieces
    (``code_forms``), unstemmed; plain words are left to the ``text`` field."""
    from whoosh.analysis import RegexTokenizer

    from .analysis import CodeFormsFilter

    return RegexTokenizer(CODE_PATTERN) | CodeFormsFilter(code_forms)


def keyword_weighting(b: float = 0.4, k1: float = 1.2) -> Any:
    """Whoosh BM25F with the standard (Robertson/Lucene) idf instead of Whoosh's own.

    Whoosh's idf, ``log(N/(df+1)) + 1``, floors every term at ~1, so a word present in every
    memory (a project name, a speaker) still outweighs a rare identifier matched once less.
    ``log(1 + (N - df + 0.5)/(df + 0.5))`` tends to 0 for such words. b=0.4: memories are short
    and similar in length, so length normalisation should be mild (measured, docs/decisions/query-gate-and-fusion.md).
    """
    from math import log

    from whoosh import scoring

    class _BM25(scoring.BM25F):
        def idf(self, searcher: Any, fieldname: str, text: Any) -> float:
            parent = searcher.get_parent()
            n = parent.doc_frequency(fieldname, text)
            dc = parent.doc_count_all()
            return log(1.0 + (dc - n + 0.5) / (n + 0.5))

    return _BM25(B=b, K1=k1)


def top_k(sims: np.ndarray, k: int, floor: float = -1.0) -> list[tuple[int, float]]:
    """The ``k`` best entries of a similarity vector, best first, each >= ``floor``."""
    n = sims.shape[0]
    if n == 0 or k <= 0:
        return []
    k = min(k, n)
    top = np.argpartition(-sims, k - 1)[:k] if k < n else np.arange(n)
    top = top[np.argsort(-sims[top], kind="stable")]
    return [(int(i), float(sims[i])) for i in top if sims[i] >= floor]
