"""Retrieval scoring (SPEC §4 steps 2-4, 6-7) as pure functions over numpy arrays.

The read pipeline owns I/O (files, faiss, Whoosh, links, utility); this module owns the
decisions: whether a query is answerable at all, which memories each lane proposes, how the
lanes are fused, which implicit neighbours join, and what is cut. Every tunable is in
``RankingParams``; the defaults come from measurement (docs/decisions/), not from guessing.

Inputs per scope (one store, or several concatenated row-wise):
- ``matrix``: (n, d) float32, unit-normalised memory embeddings (faiss IndexFlatIP rows);
- ``keyword_hits``: [(row, bm25)] best first, from the keyword index queried with
  ``keyword_terms(query)`` (index built with ``keyword_analyzer()``/``keyword_weighting()``);
- ``kinds``: the kind of each row; ``doc_freq``: term -> number of memories containing it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from ..index.terms import CODE_PATTERN, STOP_WORDS, code_shaped, tokenize, top_k
from .neighbours import Neighbours, best_hop


class Ranked(NamedTuple):
    """One ranked memory: its row in the store, its relevance and why it was retrieved."""

    index: int
    score: float
    reasons: tuple[str, ...]


def semantic_lane(qvec: np.ndarray, matrix: np.ndarray, k: int, floor: float = -1.0) -> list[tuple[int, float]]:
    """Lane A: top ``k`` rows of ``matrix`` by cosine with ``qvec`` (both unit-normalised)."""
    if matrix.shape[0] == 0:
        return []
    return top_k(matrix @ qvec.astype(np.float32, copy=False), k, floor)


_IDENT_CHARS_RE = re.compile(r"[0-9_]|[.\-/:]\w|[a-z][A-Z]")


def salient_terms(query: str, stop_words: frozenset[str] = STOP_WORDS) -> list[str]:
    """Names and identifiers in the query: capitalised words, ALLCAPS, camelCase, snake_case,
    dotted/hyphenated/numbered tokens (``FSDownload.java``, ``HADOOP-1234``, ``Caroline``).

    These are the terms a memory either mentions or does not; embeddings blur them.
    """
    out: list[str] = []
    for tok in tokenize(query):
        tok = tok.replace("’", "'")
        if tok.lower().endswith("'s"):
            tok = tok[:-2]
        low = tok.lower()
        if low in stop_words or len(tok) < 2:
            continue
        if tok[0].isupper() or _IDENT_CHARS_RE.search(tok):
            out.append(tok)
    return list(dict.fromkeys(out))


def _frozen(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class RankingParams:
    """Every tunable of the read ranking. Defaults are tuned on LoCoMo + GitBugs (docs/decisions/).

    Scores live on one scale: ``score = (cosine + keyword_weight * bm25/max_bm25) /
    (1 + keyword_weight)``, clipped to [0, 1]; association hops multiply it down.
    """

    # -- query-level gate (abstention). The best cosine anywhere in scope must clear the bar,
    # or the answer is empty. Applied per query, never per result: per-result cosine bars
    # this high would drop most true evidence (docs/decisions/query-gate-and-fusion.md).
    query_bar: Mapping[str, float] = field(default_factory=lambda: _frozen({"targeted": 0.40, "ambient": 0.50}))
    # Added to the bar when the query names things (capitalised words, identifiers) and not
    # one of them occurs anywhere in the store: the store has never heard of the subject.
    novelty_penalty: float = 0.15
    # In a small store the bar falls by small_store_slope[mode] * (sqrt(2 ln small_store_size) -
    # sqrt(2 ln N)) for its N memories in scope (N counted from 4), for the memories that hold a
    # query word or identifier rare there (``rare_share``): keyword evidence of their own. The
    # bar was set on stores of 369-680 memories, where an unrelated query's best cosine is the
    # maximum over hundreds; over fewer memories that maximum is lower (extreme values grow like
    # sqrt(2 ln N)), so the same bar refuses far more in a store of 15 than it was set to. Each
    # slope is the one LoCoMo's subsampled stores measure for the cosine's quantile at that
    # mode's bar; a vague query (``tests``, a word half the store holds) keeps the full bar.
    # 0: off. ``small_store_holders`` False: the lower bar for every memory once any holds a
    # rare query word (measured, not shipped). bench/research/smallgate.py,
    # bench/research/offtopic_small.py, docs/decisions/small-store-gate.md.
    small_store_slope: Mapping[str, float] = field(
        default_factory=lambda: _frozen({"targeted": 0.076, "ambient": 0.067}))
    small_store_size: int = 369
    small_store_holders: bool = True
    # Per-kind offsets to every bar and floor; negative = more permissive (SPEC §1.2:
    # preferences are retrieved more permissively than facts).
    kind_offset: Mapping[str, float] = field(
        default_factory=lambda: _frozen(
            {"preference": -0.05, "fact": 0.0, "problem": 0.0, "solution": 0.0, "failed_tactic": 0.0, "change": 0.0}
        )
    )
    # A query identifier held verbatim in a memory's ``code`` field is evidence of relevance on
    # its own when it is rare in the store: held by at most max(1, rare_share * N) of its N
    # memories (one memory in a store of four, as 2,000 in one of 10,000). When the cosine bar
    # refuses the query, the memories holding such an identifier are still answered. A share
    # and not an idf bar: the largest idf a store of four can give a term (1.2) is under any
    # bar that means "rare" in a store of thousands. Chosen by cross-validation
    # (docs/decisions/rarity-share.md).
    rare_share: float = 0.2
    # A memory that holds at least this share of the query's idf (1.0: every query word), one
    # of the words rare in the store (``rare_share``), passes the gate as a rare identifier
    # does: the query's own words, verbatim. Above 1.0: off.
    gate_coverage: float = 1.0
    # Keyword-only mode (no embedder): a memory is answered when it holds at least this share
    # of the query's idf mass, or a rare query identifier verbatim; else the answer is empty.
    # Chosen by leave-one-conversation-out on LoCoMo (every fold chose 0.4).
    keyword_only_coverage: float = 0.4
    # A query that is nothing but identifiers of the store (a look-up by name) is answered with
    # the memories holding one of them verbatim alone (and what links pull in); False: the others
    # follow them, ranked below the last holder.
    named_holders_only: bool = True
    # ... and every memory holding one of those names is answered, rare in the store or not,
    # past the gate and the relative cuts (a look-up by name always answers when the name is
    # there). False: only names rare in the store (``rare_share``) pass the gate by themselves.
    named_answers_all: bool = True
    # -- per-result floor on the fused score, once the query passed the gate.
    result_floor: Mapping[str, float] = field(default_factory=lambda: _frozen({"targeted": 0.15, "ambient": 0.30}))
    # -- relative cut: drop results below this fraction of the best result's score. An absolute
    # floor cannot tell a small store's weak matches from a large store's good ones (in a
    # store of 15 every memory shares the project's vocabulary); a fraction of the best can.
    # Chosen by cross-validation (bench/research/cv.py, docs/decisions/relative-cut.md).
    relative_floor: float = 0.45
    # ... and everything after a drop between neighbours of at least this fraction of the best
    # score (an elbow: the answer ends where relevance falls off). 1.0: off.
    relative_gap: float = 0.4
    limit: Mapping[str, int] = field(default_factory=lambda: _frozen({"targeted": 10, "ambient": 5}))

    # -- lane A (semantic)
    semantic_pool: int = 50
    # -- lane B (keyword): BM25 hits requested from the index; their scores are a fusion
    # feature for every candidate, and the best ``keyword_lane`` enter even without any
    # semantic support (exact identifiers and error strings that embeddings blur).
    keyword_pool: int = 50
    keyword_lane: int = 10
    keyword_weight: float = 0.5
    # A query that names no identifier (prose: a question, a description) weighs its keyword
    # hits by this share of the query's idf they cover (an absolute scale: every query word
    # found is 1.0), the rest by BM25 / the best BM25 (a relative one: the best hit is 1.0
    # however little of the query it holds). Coverage counts the words ``text`` holds, blind to
    # identifiers matched in ``code``, so a query naming one keeps BM25 alone. Chosen by
    # leave-one-conversation-out on LoCoMo (folds 0.75 x3, 1.0 x2: recall@10 +0.010 out of
    # fold); on GitBugs, where 85 % of titles name an identifier, and on identifier look-ups it
    # moves one query or none (bench/research/recall.py, docs/decisions/prose-coverage.md).
    prose_coverage: float = 0.75
    bm25_b: float = 0.4
    bm25_k1: float = 1.2

    # -- association chain. From the best ``hop_seeds`` results it follows the typed links
    # (relates_to, depends_on, elaborates_on, either way) for ``relation_hops`` steps, each
    # step scoring its parent's score times ``hop_decay``. Following "the most similar other
    # memory" instead (``semantic_hops``) is off: measured (bench/research/hops.py,
    # docs/decisions/association-chain.md), bars low enough to reach a related memory rather
    # than a restatement (0.35-0.45; the duplicate gate is 0.95) reach it in 8 of 13 chain
    # cases and lift LoCoMo recall@10 0.709 -> 0.712 out of fold, but in a small store every
    # memory is that close to every other, and 6 of the 52 precision cases then answer with
    # memories nobody asked for. A request may still ask for them (``expand.semantic_hops``):
    # it then gets those bars and that decay, the out-of-fold choice on every LoCoMo fold.
    relation_hops: int = 2
    semantic_hops: int = 0
    hop_seeds: int = 3
    hop_bars: tuple[float, ...] = (0.35, 0.45)  # similarity a semantic hop must reach, per hop
    hop_decay: float = 0.7  # a hop's score: its parent's times this (0: times the hop's similarity)

    # -- pseudo-relevance feedback: query += prf_weight * mean(top prf_docs vectors).
    # Off: measured no gain on either benchmark (docs/decisions/query-gate-and-fusion.md).
    prf_weight: float = 0.0
    prf_docs: int = 3

    def for_mode(self, table: Mapping[str, Any], mode: str) -> Any:
        return table[mode] if mode in table else table["targeted"]


class GateDecision(NamedTuple):
    passed: bool
    top_similarity: float
    bar: float
    reason: str


class Ranking(NamedTuple):
    results: list[Ranked]
    gate: GateDecision
    candidates: int


def cosine_all(qvec: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Cosine of the query with every row (rows and query unit-normalised)."""
    if matrix.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    return matrix @ qvec.astype(np.float32, copy=False)


# The approximate vector lane (``rowspace.Nearest``): a query's candidate rows for its k nearest,
# ascending, and which of them an approximate search chose (False: a store scored whole).
Nearest = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]
WIDEN = 4  # the approximate lane asks this many times more candidates when its first cannot tell


def similarities(qvec: np.ndarray, matrix: np.ndarray, ex: np.ndarray | None, blind: np.ndarray | None,
                 nearest: Nearest | None, must: Sequence[int], params: RankingParams,
                 offsets: np.ndarray | None, kinds: Sequence[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """The query's cosine per row, -inf for the rows out of scope or without a vector, and the
    rows it was computed for (None: every row). With ``nearest`` (a store at its approximate
    threshold) only for the approximate candidates and ``must`` (the keyword hits), -inf
    elsewhere (``approximate_sims``); while memories wait for a vector, over every row."""
    if nearest is not None and blind is None:
        got = approximate_sims(qvec, matrix, nearest, ex, must, params, offsets, kinds)
        if got is not None:
            return got
    sims = cosine_all(qvec, matrix)
    if ex is not None:
        sims[ex] = -np.inf
    if blind is not None:
        sims[blind] = -np.inf  # the gate, the semantic lane and the hops see only real vectors
    return sims, None


def approximate_sims(qvec: np.ndarray, matrix: np.ndarray, nearest: Nearest, ex: np.ndarray | None,
                     must: Sequence[int], params: RankingParams, offsets: np.ndarray | None,
                     kinds: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """The similarities the gate, the semantic lane and the fusion read, from the approximate
    candidates instead of a product over every row: exact on the candidates and on ``must``,
    -inf elsewhere. A row the approximate search did not choose is taken to be no closer than
    the least close one it chose (``bound``: what its recall measures); the candidates are
    widened (``WIDEN``) until, under that bound, they hold the semantic pool's rows in scope
    and the row of the gate's best margin (a kind offset can lift a less close row above the
    closest). None: they would be every row; the caller then takes the flat pass."""
    n = matrix.shape[0]
    q = qvec.astype(np.float32, copy=False)
    lift = max(0.0, -min(params.kind_offset.values(), default=0.0))
    in_scope = n - (int(ex.sum()) if ex is not None else 0)
    k = max(1, params.semantic_pool)
    while True:
        found, probed = nearest(q, k)
        if len(found) >= n:
            return None
        found_sims = matrix[found] @ q
        live = np.ones(len(found), dtype=bool) if ex is None else ~ex[found]
        if not probed.any():
            break  # every store was scored whole
        bound = float(found_sims[probed].min())
        if live.any():
            offs = (offsets[found[live]] if offsets is not None
                    else kind_offsets([kinds[i] for i in found[live]], params))
            best = float((found_sims[live] - offs).max())
            pool = int((found_sims[live] >= bound).sum())
            if best > bound + lift and (pool >= params.semantic_pool or int(live.sum()) >= in_scope):
                break
        k *= WIDEN
    sims = np.full(n, -np.inf, dtype=np.float32)
    sims[found] = found_sims
    extra = np.setdiff1d(np.asarray(must, dtype=np.int64), found)
    if len(extra):
        sims[extra] = matrix[extra] @ q
    rows = np.union1d(found, extra)
    if ex is not None:
        sims[rows[ex[rows]]] = -np.inf
    return sims, rows


def _top(sims: np.ndarray, rows: np.ndarray | None, k: int) -> list[tuple[int, float]]:
    """``top_k`` over the rows the similarities were computed for (None: every row)."""
    if rows is None:
        return top_k(sims, k)
    return [(int(rows[i]), s) for i, s in top_k(sims[rows], k)]


def expand_query(qvec: np.ndarray, matrix: np.ndarray, top: Sequence[int], weight: float) -> np.ndarray:
    """Pseudo-relevance feedback: pull the query towards the mean of its top hits."""
    if weight <= 0 or not len(top):
        return qvec
    q = qvec + weight * matrix[list(top)].mean(axis=0)
    return (q / max(float(np.linalg.norm(q)), 1e-12)).astype(np.float32)


def novelty(salient: Sequence[str], doc_freq: Callable[[str], int] | None) -> bool:
    """True when the query names things and the store contains none of them."""
    if not salient or doc_freq is None:
        return False
    return all(doc_freq(t) == 0 for t in salient)


NO_EVIDENCE = (1.0, 0, 0, 0)  # a keyword hit the index gave no per-term evidence for


def rare(df: int, docs: int, share: float) -> bool:
    """Whether a term held by ``df`` of a store's ``docs`` memories is rare there: held by at
    most ``max(1, share * docs)`` of them. The same share in a store of four as in one of
    10,000; a term only one memory holds is always rare."""
    return 0 < df <= max(1.0, share * docs)


def kind_offsets(kinds: Sequence[str], params: RankingParams) -> np.ndarray:
    """Each row's kind offset, as an array the gate subtracts from the similarities."""
    return np.array([params.kind_offset.get(k, 0.0) for k in kinds], dtype=np.float32)


def query_gate(
    sims: np.ndarray,
    kinds: Sequence[str],
    *,
    novel: bool,
    params: RankingParams,
    mode: str = "targeted",
    offsets: np.ndarray | None = None,
    lower: float = 0.0,
) -> GateDecision:
    """Decide, once per query, whether the store knows anything about it.

    ``offsets`` (``kind_offsets(kinds, params)``) may be passed in by a caller that ranks the
    same rows many times: building it is a Python loop over every memory. ``lower``: how far
    the bar lies under its large-store value (``small_store_lowering``)."""
    bar = float(params.for_mode(params.query_bar, mode)) + (params.novelty_penalty if novel else 0.0) - lower
    if sims.size == 0:
        return GateDecision(False, 0.0, bar, "empty store")
    if offsets is None:
        offsets = kind_offsets(kinds, params)
    margin = sims - offsets
    best = int(np.argmax(margin))
    top = float(sims[best])
    if margin[best] >= bar:
        return GateDecision(True, top, bar, "ok")
    why = "no query name or identifier occurs in the store; " if novel else ""
    return GateDecision(False, top, bar, f"{why}best similarity {top:.2f} < bar {bar:.2f}")


SMALLEST_STORE = 4  # a store of fewer memories lowers the bar as one of four does


def small_store_lowering(n: int, specific: bool, params: RankingParams, mode: str = "targeted") -> float:
    """How far the gate's bar lies under its large-store value for a store of ``n`` memories in
    scope, for a query ``specific`` to it (``RankingParams.small_store_slope``)."""
    slope = float(params.for_mode(params.small_store_slope, mode))
    if not specific or slope <= 0 or n >= params.small_store_size:
        return 0.0
    return slope * (_extreme(params.small_store_size) - _extreme(max(n, SMALLEST_STORE)))


def _extreme(n: float) -> float:
    """sqrt(2 ln n): how the largest of n similar draws grows with n."""
    return math.sqrt(2.0 * math.log(n))


def prose_query(query: str) -> bool:
    """True when the query names no identifier (``raise_for_status``, ``FSImage``, ``E11000``)."""
    return not any(code_shaped(t) for t in re.findall(CODE_PATTERN, query))


def prose_keyword(kw: Mapping[int, float], evidence: Mapping[int, tuple[float, int, int, int]],
                  share: float) -> dict[int, float]:
    """The keyword feature of a prose query: ``share`` of it the query idf each hit covers, the
    rest its BM25 / best BM25 (``RankingParams.prose_coverage``)."""
    return {i: (1.0 - share) * s + share * evidence.get(i, NO_EVIDENCE)[0] for i, s in kw.items()}


def normalize_keyword(hits: Sequence[tuple[int, float]]) -> dict[int, float]:
    """BM25 scores divided by the query's best one: raw BM25 has no fixed scale across queries."""
    if not hits:
        return {}
    best = max(s for _, s in hits)
    if best <= 0:
        return {}
    return {i: s / best for i, s in hits if s > 0}


def fuse(
    sims: np.ndarray,
    semantic: Sequence[tuple[int, float]],
    keyword: Mapping[int, float],
    keyword_order: Sequence[int],
    params: RankingParams,
    extra: Sequence[int] = (),
) -> dict[int, tuple[float, list[str]]]:
    """Merge lane A and lane B into one score per candidate, with the reasons kept. ``extra``:
    rows that are candidates whatever their rank in either lane."""
    w = params.keyword_weight
    cands: dict[int, list[str]] = {}
    for i, s in semantic:
        cands.setdefault(i, []).append(f"semantic:{s:.2f}")
    for i in [*keyword_order[: params.keyword_lane], *extra]:
        cands.setdefault(i, [])
    out: dict[int, tuple[float, list[str]]] = {}
    for i, reasons in cands.items():
        kw = keyword.get(i, 0.0)
        if kw > 0:
            reasons.append(f"keyword:{kw:.2f}")
        score = (float(sims[i]) + w * kw) / (1.0 + w)
        out[i] = (min(max(score, 0.0), 1.0), reasons)
    return out


def association_chain(
    seeds: Sequence[tuple[int, float]],
    matrix: np.ndarray,
    bars: Sequence[float],
    ids: Sequence[str] | None = None,
    exclude: Collection[int] | np.ndarray = (),
    near: Neighbours | None = None,
    decay: float = 0.0,
    nearest: Nearest | None = None,
) -> dict[int, tuple[float, str]]:
    """From each seed follow "most similar other memory" for len(bars) hops.

    A hop needs similarity >= its bar (bars get stricter outward); its relevance is the
    parent's times the hop similarity, or times ``decay`` when that is set.
    Returns {row: (relevance, reason)}, best per row.
    ``exclude``: rows never stepped on, as row numbers or a boolean mask over the rows.
    ``near``: the rows' kept nearest neighbours (synced to ``matrix``), which answer most hops
    without reading the matrix; the answer is the same. ``nearest``: the approximate lane
    (``rank``), which then answers every hop instead (``_approximate_hop``).
    """
    out: dict[int, tuple[float, str]] = {}
    if matrix.shape[0] < 2:
        return out
    mask = exclude if isinstance(exclude, np.ndarray) else None
    # (current row, its relevance, rows this chain may not revisit), one per live chain.
    chains = [(seed, rel, {seed} if mask is not None else {seed, *exclude}) for seed, rel in seeds]
    for bar in bars:
        if not chains:
            break
        moved = []
        for cur, cur_rel, visited in chains:
            step = (_approximate_hop(nearest) if nearest is not None else near.step if near is not None
                    else _hop)
            hop = step(cur, matrix, bar, visited, mask)
            if hop is None:
                continue
            nxt, sim = hop
            rel = cur_rel * (decay or sim)
            parent = ids[cur] if ids is not None else str(cur)
            if nxt not in out or out[nxt][0] < rel:
                out[nxt] = (rel, f"assoc:{parent}:{sim:.2f}")
            visited.add(nxt)
            moved.append((nxt, rel, visited))
        chains = moved
    return out


def _hop(cur: int, matrix: np.ndarray, bar: float, visited: Collection[int],
         mask: np.ndarray | None) -> tuple[int, float] | None:
    # One matrix-vector product per chain: for a handful of rows BLAS's gemm reads the matrix
    # at a third of gemv's speed (12 vs 3 ms per 100k x 384 pass, 3 rows).
    return best_hop(matrix @ matrix[cur], bar, visited, mask)


HOP_CANDIDATES = 8  # the approximate lane's first candidates for a hop (as many as a kept list holds)


def _approximate_hop(nearest: Nearest) -> Callable[..., tuple[int, float] | None]:
    """``_hop`` from the approximate lane's candidates for the row's own vector, scored exactly:
    the best one neither visited nor masked is the hop when no row the search did not choose can
    be closer (such a row is taken to be no closer than the least close chosen one, as in
    ``approximate_sims``), or when even that one is under the bar; otherwise the candidates are
    widened."""

    def step(cur: int, matrix: np.ndarray, bar: float, visited: Collection[int],
             mask: np.ndarray | None) -> tuple[int, float] | None:
        q = matrix[cur]
        k = HOP_CANDIDATES
        while True:
            found, probed = nearest(q, k)
            if len(found) >= matrix.shape[0]:
                return _hop(cur, matrix, bar, visited, mask)
            sims = matrix[found] @ q
            free = ~np.isin(found, np.fromiter(visited, dtype=np.int64, count=len(visited)))
            if mask is not None:
                free &= ~mask[found]
            best = int(np.argmax(np.where(free, sims, -np.inf))) if free.any() else -1
            top = float(sims[best]) if best >= 0 else float("-inf")
            bound = float(sims[probed].min()) if probed.any() else float("-inf")
            if top >= bound or bound < bar:
                return (int(found[best]), top) if best >= 0 and top >= bar else None
            k *= WIDEN

    return step


def select(
    scored: Mapping[int, tuple[float, Sequence[str]]],
    kinds: Sequence[str],
    params: RankingParams,
    mode: str = "targeted",
    limit: int | None = None,
    trace: dict[str, Any] | None = None,
) -> list[Ranked]:
    """Apply the per-result floor and the relative cut (kind-adjusted), sort, end the list at a
    relative drop, cap at the limit. ``trace``: see ``rank``."""
    floor = float(params.for_mode(params.result_floor, mode))
    if params.relative_floor > 0 and scored:
        floor = max(floor, params.relative_floor * max(s for s, _ in scored.values()))
    cap = int(limit if limit is not None else params.for_mode(params.limit, mode))
    kept = [
        Ranked(i, round(s, 4), tuple(r))
        for i, (s, r) in scored.items()
        if s >= floor + params.kind_offset.get(kinds[i], 0.0)
    ]
    kept.sort(key=lambda r: (-r.score, r.index))
    if params.relative_gap < 1.0 and len(kept) > 1:
        drop = params.relative_gap * max(s for s, _ in scored.values())
        end = next((n for n in range(1, len(kept)) if kept[n - 1].score - kept[n].score >= drop), len(kept))
        if trace is not None:
            trace["gap"] = (drop, [r.index for r in kept[end:]])
        kept = kept[:end]
    if trace is not None:
        trace.update(scored=scored, floor=floor, cap=cap)
    return kept[:cap]


def _mask(exclude: Collection[int] | np.ndarray, n: int) -> np.ndarray | None:
    """``exclude`` as a boolean mask over ``n`` rows; None when it excludes nothing."""
    if isinstance(exclude, np.ndarray):
        return exclude if exclude.any() else None
    if not exclude:
        return None
    mask = np.zeros(n, dtype=bool)
    mask[np.fromiter(exclude, dtype=np.int64)] = True
    return mask


def rank(
    qvec: np.ndarray | None,
    matrix: np.ndarray,
    keyword_hits: Sequence[tuple[int, float]],
    kinds: Sequence[str],
    *,
    salient: Sequence[str] = (),
    doc_freq: Callable[[str], int] | None = None,
    params: RankingParams | None = None,
    mode: str = "targeted",
    limit: int | None = None,
    ids: Sequence[str] | None = None,
    exclude: Collection[int] | np.ndarray = (),
    offsets: np.ndarray | None = None,
    near: Neighbours | None = None,
    evidence: Mapping[int, tuple[float, int, int, int]] | None = None,
    named: bool = False,
    unembedded: np.ndarray | None = None,
    prose: bool = False,
    trace: dict[str, Any] | None = None,
    nearest: Nearest | None = None,
) -> Ranking:
    """The whole scoring path for one scope: gate -> lanes -> association -> fuse -> select.

    ``matrix`` rows, ``kinds`` and the rows named in ``keyword_hits`` (row, raw BM25 score,
    best first) all index the same memories. ``qvec=None`` (no embedder) degrades to the
    keyword lane alone: there is then no similarity to gate on, so only keyword hits rank.
    ``exclude``: rows out of scope (archived, filtered by kind, the memory being checked)
    without rebuilding the matrix, as row numbers or a boolean mask over the rows; the answer
    is the one the matrix without those rows would give. ``offsets``: ``kind_offsets(kinds,
    params)``, precomputed. ``near``: see ``association_chain``. ``evidence``: for keyword hits,
    row -> (share of the query's idf the memory covers, memories of its store holding the
    rarest query identifier it holds verbatim (0: none), memories in its store, memories
    holding the rarest query word it holds); a hit without an entry covers the whole query and
    holds no identifier.
    ``named``: the query is nothing but identifiers of the store (``raise_for_status``); the
    memories that hold one verbatim then rank above all others. ``unembedded``: a boolean mask
    of the rows whose vector is not made yet (their matrix rows are placeholders): they enter
    through the keyword lane alone, with a stand-in similarity (``_stand_in``). ``prose``: the
    query names no identifier (``prose_query``); its keyword hits are weighed by coverage too.
    ``trace``: when given (an explained read, ``read/explain``), what the ranking computed on
    the way is noted in it; a plain read passes None and notes nothing. ``nearest``: the
    approximate vector lane of a row space with a store at its approximate threshold
    (``rowspace.nearest``): the similarities are then computed for its candidates and the
    keyword hits only (``approximate_sims``); None: for every row.
    """
    p = params or RankingParams()
    by_name: Ranking | None = None
    if named and p.named_answers_all:
        ex = _mask(exclude, len(kinds))
        blind = None if unembedded is None or not unembedded.any() else unembedded
        if blind is not None and ex is not None:
            blind = blind & ~ex
        hits = [(i, s) for i, s in keyword_hits if ex is None or not ex[i]]
        kw = normalize_keyword(hits)
        ev = evidence or {}
        # Holding the name: verbatim in ``code``, or every word of it in ``text`` (``httpx`` in
        # "use httpx, not requests" is a word there, not an identifier).
        holding = [i for i, _ in hits if i in kw and (ev.get(i, NO_EVIDENCE)[1] > 0
                                                        or ev.get(i, NO_EVIDENCE)[0] >= 1.0 - 1e-9)]
        if holding:
            by_name = _by_name(qvec, matrix, holding, kw, kinds, p, mode, limit, ex, blind, nearest is not None)
    asked = _rank(qvec, matrix, keyword_hits, kinds, salient=salient, doc_freq=doc_freq, params=p, mode=mode,
                  limit=limit, ids=ids, exclude=exclude, offsets=offsets, near=near, evidence=evidence,
                  named=named, unembedded=unembedded, prose=prose, trace=trace, nearest=nearest)
    if trace is not None and by_name is not None:
        trace["by_name"] = [r.index for r in by_name.results]
    if by_name is None:
        return asked
    return _with_holders(asked, by_name, limit if limit is not None else int(p.for_mode(p.limit, mode)))


def _with_holders(asked: Ranking, by_name: Ranking, cap: int) -> Ranking:
    """A look-up by name: what the question's path answers, then every other memory holding the
    name (best first, scored just under the last answer so the order holds downstream); when
    that path answers nothing (the name is not rare, the cosine is low), the holders alone."""
    if not asked.results:
        return by_name
    have = {r.index for r in asked.results}
    rest = [r for r in by_name.results if r.index not in have]
    if not rest or len(asked.results) >= cap:
        return asked
    floor = min(r.score for r in asked.results)
    top = max(r.score for r in rest) or 1.0
    scaled = [Ranked(r.index, round(0.99 * floor * r.score / top, 4), r.reasons) for r in rest]
    return Ranking([*asked.results, *scaled][:cap], asked.gate, asked.candidates + len(rest))


def _rank(
    qvec: np.ndarray | None,
    matrix: np.ndarray,
    keyword_hits: Sequence[tuple[int, float]],
    kinds: Sequence[str],
    *,
    salient: Sequence[str] = (),
    doc_freq: Callable[[str], int] | None = None,
    params: RankingParams,
    mode: str = "targeted",
    limit: int | None = None,
    ids: Sequence[str] | None = None,
    exclude: Collection[int] | np.ndarray = (),
    offsets: np.ndarray | None = None,
    near: Neighbours | None = None,
    evidence: Mapping[int, tuple[float, int, int, int]] | None = None,
    named: bool = False,
    unembedded: np.ndarray | None = None,
    prose: bool = False,
    trace: dict[str, Any] | None = None,
    nearest: Nearest | None = None,
) -> Ranking:
    """``rank`` for a question: gate -> lanes -> association -> fuse -> select."""
    p = params
    ex = _mask(exclude, len(kinds))
    blind = None if unembedded is None or not unembedded.any() else unembedded
    if blind is not None and ex is not None:
        blind = blind & ~ex
    if ex is not None:
        keyword_hits = [(i, s) for i, s in keyword_hits if not ex[i]]
    kw = normalize_keyword(keyword_hits)
    if trace is not None:
        trace["kw"] = kw
    kw_order = [i for i, _ in keyword_hits if i in kw]
    ev = evidence or {}
    verbatim = [i for i in kw_order if i in ev and rare(ev[i][1], ev[i][2], p.rare_share)]
    covering = [i for i in kw_order if i in ev and ev[i][0] >= p.gate_coverage - 1e-9
                and rare(ev[i][3], ev[i][2], p.rare_share) and i not in verbatim]
    no_vectors = blind is not None and bool((blind if ex is None else blind | ex).all())
    if qvec is None or matrix.shape[0] == 0 or (ex is not None and bool(ex.all())) or no_vectors:
        # No similarity to gate on: a memory must carry most of the query's rare words, or one
        # of its rare identifiers, or the answer is empty (an unrelated query shares a word or
        # two with almost any store).
        covered = [i for i in kw_order if ev.get(i, NO_EVIDENCE)[0] >= p.keyword_only_coverage or i in verbatim]
        degraded = {i: (kw[i] / (1.0 + p.keyword_weight), [f"keyword:{kw[i]:.2f}"]) for i in covered}
        _prefer_verbatim(degraded, verbatim, named, p.named_holders_only)
        gate = GateDecision(bool(degraded), 0.0, 0.0, "keyword only (no embeddings)")
        return Ranking(select(degraded, kinds, p, mode, limit, trace), gate, len(degraded))

    sims, scored_rows = similarities(qvec, matrix, ex, blind, nearest, kw_order, p, offsets, kinds)
    novel = novelty(salient, doc_freq)
    gate = _gate(sims, scored_rows, kinds, novel, p, mode, offsets)
    if not gate.passed and p.for_mode(p.small_store_slope, mode) > 0 and (
            len(kinds) < p.small_store_size or ex is not None or blind is not None):
        holders = [i for i in kw_order if i in ev and (rare(ev[i][3], ev[i][2], p.rare_share)
                                                       or rare(ev[i][1], ev[i][2], p.rare_share))]
        # Excluded rows and rows with no vector are -inf; the approximate lane left the others
        # -inf too, and has no row without a vector.
        in_scope = (int(np.isfinite(sims).sum()) if scored_rows is None
                    else len(kinds) - (int(ex.sum()) if ex is not None else 0))
        lower = small_store_lowering(in_scope, bool(holders), p, mode)
        if lower > 0 and p.small_store_holders:
            offs = offsets if offsets is not None else kind_offsets(kinds, p)
            held = np.asarray(holders)
            if float((sims[held] - offs[held]).max()) >= gate.bar - lower:
                gate = GateDecision(True, gate.top_similarity, gate.bar - lower, "ok")
        elif lower > 0:
            gate = _gate(sims, scored_rows, kinds, novel, p, mode, offsets, lower)
    if not gate.passed:
        # Rows without a vector cannot be judged by the gate: they pass as the keyword-only
        # path would pass them (most of the query's rare words).
        alone = [i for i in kw_order if blind is not None and blind[i]
                 and ev.get(i, NO_EVIDENCE)[0] >= p.keyword_only_coverage]
        if not verbatim and not covering and not alone:
            return Ranking([], gate, 0)
        # The store holds a rare identifier the query names, or all of the query's words (one of
        # them rare): those memories are answered (and only they), whatever the cosine says;
        # embeddings blur identifiers, and a short query's cosine is low even on its own words.
        why = ("a rare query identifier occurs verbatim" if verbatim else
               "every query word occurs in a memory" if covering else "keyword only (no vectors yet)")
        gate = GateDecision(True, gate.top_similarity, gate.bar, why)
        scored = fuse(_stand_in(sims, blind, kw), [], kw, [], p, extra=[*verbatim, *covering, *alone])
        _prefer_verbatim(scored, verbatim, named, p.named_holders_only)
        _mark_unembedded(scored, blind)
        return Ranking(select(scored, kinds, p, mode, limit, trace), gate, len(scored))

    if prose and p.prose_coverage > 0:
        kw = prose_keyword(kw, ev, p.prose_coverage)
        if trace is not None:
            trace["kw"] = kw
    if p.prf_weight > 0:
        first = fuse(_stand_in(sims, blind, kw), _top(sims, scored_rows, p.semantic_pool), kw, kw_order, p)
        top = sorted(first, key=lambda i: -first[i][0])[: p.prf_docs]
        qvec = expand_query(qvec, matrix, top, p.prf_weight)
        sims, scored_rows = similarities(qvec, matrix, ex, blind, nearest, kw_order, p, offsets, kinds)

    semantic = _top(sims, scored_rows, p.semantic_pool)
    scored = fuse(_stand_in(sims, blind, kw), semantic, kw, kw_order, p, extra=verbatim)
    if p.semantic_hops > 0 and p.hop_seeds > 0:
        seeds = sorted(scored.items(), key=lambda kv: -kv[1][0])[: p.hop_seeds]
        hops = association_chain(
            [(i, s) for i, (s, _) in seeds], matrix, p.hop_bars[: p.semantic_hops], ids,
            exclude=ex if ex is not None else (), near=near, decay=p.hop_decay,
            nearest=None if scored_rows is None else nearest,
        )
        for i, (rel, why) in hops.items():
            if i in scored:
                old, reasons = scored[i]
                scored[i] = (max(old, rel), [*reasons, why])
            else:
                scored[i] = (rel, [why])
    _prefer_verbatim(scored, verbatim, named, p.named_holders_only)
    _mark_unembedded(scored, blind)
    return Ranking(select(scored, kinds, p, mode, limit, trace), gate, len(scored))


def _gate(sims: np.ndarray, rows: np.ndarray | None, kinds: Sequence[str], novel: bool, p: RankingParams,
          mode: str, offsets: np.ndarray | None, lower: float = 0.0) -> GateDecision:
    """``query_gate`` over the rows the similarities were computed for (None: every row)."""
    if rows is None:
        return query_gate(sims, kinds, novel=novel, params=p, mode=mode, offsets=offsets, lower=lower)
    return query_gate(sims[rows], [kinds[i] for i in rows] if offsets is None else (), novel=novel, params=p,
                      mode=mode, offsets=None if offsets is None else offsets[rows], lower=lower)


def _by_name(qvec: np.ndarray | None, matrix: np.ndarray, holding: Sequence[int], kw: Mapping[int, float],
             kinds: Sequence[str], p: RankingParams, mode: str, limit: int | None,
             ex: np.ndarray | None, blind: np.ndarray | None, approximate: bool = False) -> Ranking:
    """A query that is nothing but names of the store (``url_for``, ``Flask.url_for``,
    ``E1101``): the memories holding one verbatim, best first (the fused score), however many
    share it. The gate and the relative cuts are for questions: a name either occurs in a
    memory or not, and a name six memories of twenty hold is not rare there, yet each of them
    is an answer."""
    if qvec is None or matrix.shape[0] == 0:
        sims = np.zeros(len(kinds), dtype=np.float32)
    elif approximate and blind is None:
        # Only the holders' similarities are read: those rows alone, not a pass over every row.
        sims = np.full(len(kinds), -np.inf, dtype=np.float32)
        held = np.asarray(holding, dtype=np.int64)
        sims[held] = matrix[held] @ qvec.astype(np.float32, copy=False)
        if ex is not None:
            sims[held[ex[held]]] = -np.inf
    else:
        sims = cosine_all(qvec, matrix)
        if ex is not None:
            sims[ex] = -np.inf
        if blind is not None:
            sims[blind] = -np.inf
    scored = fuse(_stand_in(sims, blind, kw), [], kw, [], p, extra=holding)
    for i in holding:
        scored[i][1].append("verbatim")
    _mark_unembedded(scored, blind)
    cap = int(limit if limit is not None else p.for_mode(p.limit, mode))
    ranked = sorted((Ranked(i, round(s, 4), tuple(r)) for i, (s, r) in scored.items()),
                    key=lambda r: (-r.score, r.index))
    finite = [float(sims[i]) for i in holding if np.isfinite(sims[i])]
    gate = GateDecision(True, max(finite, default=0.0), 0.0, "a look-up by name: the memories holding it")
    return Ranking(ranked[:cap], gate, len(scored))


def _stand_in(sims: np.ndarray, blind: np.ndarray | None, kw: Mapping[int, float]) -> np.ndarray:
    """``sims`` with a stand-in similarity for each keyword hit that has no vector yet: the mean
    similarity of the keyword hits that have one, in this query. Zero would bury those rows
    under every embedded one (the fused score is mostly similarity); the best similarity would
    put keyword luck above meaning. The mean says "as close as what the keyword lane usually
    finds for this query", and the fused keyword share then orders them among those rows.
    With no embedded keyword hit to learn from, the mean of the semantic lane's best few."""
    if blind is None:
        return sims
    out = sims.copy()
    seen = [i for i in kw if not blind[i] and np.isfinite(sims[i])]
    if seen:
        base = float(np.mean(sims[seen]))
    else:
        best = [s for _, s in top_k(sims, 10, floor=float("-inf")) if np.isfinite(s)]
        base = float(np.mean(best)) if best else 0.0
    for i in kw:
        if blind[i]:
            out[i] = base
    return out


def _mark_unembedded(scored: dict[int, tuple[float, list[str]]], blind: np.ndarray | None) -> None:
    """Say which results were found by the keyword lane alone because their vector is not made yet."""
    if blind is None:
        return
    for i, (_, reasons) in scored.items():
        if blind[i]:
            reasons.append("no-vector-yet")


def _prefer_verbatim(scored: dict[int, tuple[float, list[str]]], verbatim: Sequence[int], named: bool,
                     holders_only: bool = True) -> None:
    """Mark the memories holding a rare query identifier; when the query is only a name, the
    answer is those memories (``holders_only``), or every other memory is scaled below the
    lowest of them (their order kept). A query that says ``raise_for_status`` asks for the
    memories that call it, however close the prose of others is (``httpx.ReadTimeout`` is not
    a question about the preference for httpx); a sentence that mentions an identifier is
    still ranked as a whole (on GitBugs, ranking every title's identifier matches first cost
    hit@5 0.75 -> 0.70, docs/decisions/code-lane.md)."""
    held = {i for i in verbatim if i in scored}
    for i in held:
        scored[i][1].append("verbatim")
    if not named or not held:
        return
    if holders_only:
        for i in [i for i in scored if i not in held]:
            del scored[i]
        return
    floor = min(scored[i][0] for i in held)
    top = max((s for i, (s, _) in scored.items() if i not in held), default=0.0)
    if top < floor or top <= 0:
        return
    scale = 0.99 * floor / top
    for i, (score, reasons) in scored.items():
        if i not in held:
            scored[i] = (score * scale, reasons)
