"""Recall research: generic ways to lift LoCoMo recall@10, each measured out of fold.

Every method is a family of settings (one of them "off"). Each family's setting is chosen by
cross-validation and only the held-out figures are reported: LoCoMo leaves one conversation out
(tune on four, score the fifth; objective recall@10, subject to abstention >= 0.90 on the
training folds); GitBugs (Hadoop) splits the duplicate clusters in two halves, tunes on one and
scores the other, both ways (objective MRR of title and title+body queries pooled); the
identifier look-up is tuned on nothing and scored at the setting the whole of LoCoMo chooses.

The methods (``Variant``), all on top of ``ranking.rank`` called with ``prose=False`` (the path
before ``RankingParams.prose_coverage``, which the ``prose`` family below chose: same gate, lanes,
association chain, verbatim rule and cut), changing one step:

- ``vprf``: pseudo-relevance feedback on the vector lane (Rocchio): the query vector moves
  towards the mean of the first pass's best fused results (``RankingParams.prf_weight``/``prf_docs``).
- ``kwprf``: a second keyword pass, the query plus the most distinctive words of the first
  pass's best results (RM3-like), blended into the keyword feature.
- ``fusion``: the keyword feature mixes BM25 / best BM25 with the share of the query's idf a
  memory covers (an absolute scale): ``(1 - m) * bm25/max + m * coverage`` (m = 1: coverage
  alone), or their maximum or product, at keyword weight ``w``.
- ``prose``: the ``fusion`` mix (share ``m`` of coverage) only for a query that names no
  identifier (coverage counts ``text`` words alone, blind to what the ``code`` field matched).
- ``covmix``: coverage as a third feature beside both lanes, ``cos + w * bm25/max + w2 * coverage``.
- ``mmr``: maximal marginal relevance within the answer: each next result pays ``mu`` times its
  cosine with the most similar result already chosen.
- ``centre``: cosines against the store's mean-centred vectors in the lanes (the gate unchanged).
- ``split``: a question with several parts ("X and Y", "X, Y") asks each part too; a memory's
  similarity is the best over the parts.

Four more, on top of the shipped prose rule (their first setting is the shipped ranking):

- ``hub``: hubness reduction (CSLS): a memory's cosine minus ``beta`` times its mean cosine to its
  ``k`` nearest memories (centred on the store's mean, so the gate's scale stays); ``hubprose``:
  the same for prose queries only.
- ``lenprior``: a document-length prior, ``w * (log(1 + words) - its store mean)`` on the cosine.
- ``smooth``: score regularisation on the similarity graph, ``(1 - a) * cos + a * mean cos of
  the k nearest memories``.

    python bench/research/recall.py --data-dir ../shared/eval [--only vprf mmr ...]

The last stdout line is one JSON object (per family: the settings chosen and the out-of-fold figures).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: eval_common and the evals

from eval_common import DEFAULT_CACHE, ROOT, EmbeddingCache, Store, build_store, cluster_halves, log
from eval_gitbugs import load as load_gitbugs
from eval_identifiers import WHOLE_NAMES
from eval_identifiers import load as load_identifiers
from eval_locomo import HEADLINE_CATEGORIES, load_conversations, recall_at

from memstore.index.terms import CODE_PATTERN, code_shaped, keyword_terms, top_k
from memstore.read import ranking

PARAMS = ranking.RankingParams()


@dataclass(frozen=True)
class Variant:
    family: str
    setting: tuple[Any, ...] = ()

    @property
    def off(self) -> bool:
        return not self.setting

    def __str__(self) -> str:
        return f"{self.family}{list(self.setting) if self.setting else ' off'}"


FAMILIES: dict[str, list[tuple[Any, ...]]] = {
    "vprf": [(), *[(w, d) for w in (0.1, 0.2, 0.3, 0.5) for d in (1, 2, 3, 5)]],
    "kwprf": [(), *[(m, t, lam) for m in (3, 5) for t in (5, 10) for lam in (0.3, 0.5)]],
    "fusion": [(), *[("mix", m, 0.5) for m in (0.25, 0.5, 0.75, 1.0)], ("mix", 1.0, 0.3), ("mix", 1.0, 0.8),
               ("max", 1.0, 0.5), ("product", 1.0, 0.5)],
    "mmr": [(), (0.05,), (0.1,), (0.2,), (0.3,)],
    "prose": [(), *[(m,) for m in (0.5, 0.75, 1.0)]],
    "covmix": [(), *[("mix", w2) for w2 in (0.1, 0.2, 0.3, 0.5)]],
    "centre": [(), (0.5,), (1.0,)],
    "split": [(), ("max",), ("mean",)],
    # On top of the shipped prose rule (the first setting is the shipped ranking through this path).
    "hub": [(0.0, 25), *[(b, k) for b in (0.3, 0.5, 0.7, 1.0) for k in (10, 25, 50)]],
    "hubprose": [(0.0, 25), *[(b, k) for b in (0.3, 0.5, 0.7, 1.0) for k in (10, 25, 50)]],
    "lenprior": [(0.0,), (0.01,), (0.02,), (0.03,), (0.05,)],
    "smooth": [(0.0, 5), *[(a, k) for a in (0.1, 0.2, 0.3, 0.5) for k in (3, 5, 10)]],
}


class Ranker:
    """``ranking.rank`` with one step changed by a ``Variant``; keyword hits computed once."""

    def __init__(self) -> None:
        self.memo: dict[tuple[str, str, int], tuple[list[tuple[int, float]], dict[int, tuple[float, float]], bool]] = {}
        self.means: dict[str, np.ndarray] = {}
        self.hubness: dict[tuple[str, int], np.ndarray] = {}
        self.knn: dict[tuple[str, int], np.ndarray] = {}
        self.lengths: dict[str, np.ndarray] = {}
        self.qvec_of: Callable[[str], np.ndarray] | None = None

    def hits(self, store: Store, query: str,
             pool: int) -> tuple[list[tuple[int, float]], dict[int, tuple[float, float]], bool]:
        key = (store.name, query, pool)
        if key not in self.memo:
            self.memo[key] = store.code.hits(query, pool)
        return self.memo[key]

    def rank(self, v: Variant, store: Store, query: str, qvec: np.ndarray, own: int | None = None,
             limit: int = 25) -> list[ranking.Ranked]:
        p = PARAMS
        if v.family == "vprf" and not v.off:
            p = dataclasses.replace(PARAMS, prf_weight=v.setting[0], prf_docs=v.setting[1])
        pool = p.keyword_pool + (own is not None)
        hits, ev, named = self.hits(store, query, pool)
        exclude = () if own is None else {own}
        base = ranking.rank(qvec, store.matrix, hits, store.kinds, evidence=ev, named=named,
                            salient=ranking.salient_terms(query), doc_freq=store.code.doc_freq, params=p,
                            limit=limit if v.off or v.family == "vprf" else 200, exclude=exclude)
        if v.off or v.family == "vprf" or not base.results:
            return base.results
        if not base.gate.passed or base.gate.reason != "ok":
            return base.results[:limit]  # the verbatim-only path: not what these methods change
        return self._variant(v, store, query, qvec, own, hits, ev, named, base.results, limit)

    def _variant(self, v: Variant, store: Store, query: str, qvec: np.ndarray, own: int | None,
                 hits: list[tuple[int, float]], ev: dict[int, tuple[float, float]], named: bool,
                 first: list[ranking.Ranked], limit: int) -> list[ranking.Ranked]:
        p = PARAMS
        m = store.matrix
        if v.family == "mmr":
            return mmr(first, m, v.setting[0])[:limit]
        sims = ranking.cosine_all(qvec, m)
        if v.family == "centre":
            mean = self.means.setdefault(store.name, m.mean(axis=0))
            c = m - v.setting[0] * mean
            c /= np.linalg.norm(c, axis=1, keepdims=True)
            qc = qvec - v.setting[0] * mean
            sims = c @ (qc / np.linalg.norm(qc)).astype(np.float32)
        prose = not any(code_shaped(t) for t in re.findall(CODE_PATTERN, query))
        if v.family in ("hub", "hubprose") and v.setting[0] > 0 and (prose or v.family == "hub"):
            # CSLS (hubness reduction): a memory close to many others (chit-chat, boilerplate) is
            # close to every query too; it pays beta times its mean cosine to its k nearest.
            hub = self.hub(store, v.setting[1])
            sims = sims - v.setting[0] * (hub - float(hub.mean()))
        if v.family == "lenprior" and v.setting[0] > 0:
            ln = self.lengths.setdefault(store.name, np.log1p(np.array(
                [len(keyword_terms(t)) for t in store.texts], dtype=np.float32)))
            sims = sims + v.setting[0] * (ln - float(ln.mean()))
        if v.family == "smooth" and v.setting[0] > 0:
            # Score regularisation over the similarity graph: a memory's similarity is blended
            # with its k nearest memories' (the context a short reply lacks).
            nn = self.neighbours(store, v.setting[1])
            sims = (1 - v.setting[0]) * sims + v.setting[0] * sims[nn].mean(axis=1)
        if v.family == "split":
            parts = split_question(query)
            if len(parts) > 1 and self.qvec_of is not None:
                per = np.stack([sims] + [ranking.cosine_all(self.qvec_of(t), m) for t in parts])
                sims = per.max(axis=0) if v.setting[0] == "max" else 0.5 * (sims + per[1:].mean(axis=0))
        if own is not None:
            sims[own] = -np.inf
            hits = [(i, s) for i, s in hits if i != own]
        kw = ranking.normalize_keyword(hits)
        order = [i for i, _ in hits if i in kw]
        if v.family == "fusion":
            how, share, w = v.setting
            cov = {i: ev.get(i, ranking.NO_EVIDENCE)[0] for i in kw}
            mix = {"mix": lambda b, c: (1 - share) * b + share * c, "product": lambda b, c: b * c, "max": max}[how]
            kw = {i: mix(kw[i], cov[i]) for i in kw}
            p = dataclasses.replace(p, keyword_weight=w)
        if v.family in ("prose", "hub", "hubprose", "smooth", "lenprior") and prose:
            # Coverage counts the query's words in ``text`` only: blind to identifiers matched in
            # ``code``, so only a query that names none reads it.
            cov = {i: ev.get(i, ranking.NO_EVIDENCE)[0] for i in kw}
            share = v.setting[0] if v.family == "prose" else PARAMS.prose_coverage
            kw = {i: (1 - share) * kw[i] + share * cov[i] for i in kw}
        if v.family == "covmix":
            # cos + w * bm25/max + w2 * coverage, over 1 + w + w2: both keyword readings at once.
            w, w2 = p.keyword_weight, v.setting[1]
            cov = {i: ev.get(i, ranking.NO_EVIDENCE)[0] for i in kw}
            kw = {i: (w * kw[i] + w2 * cov[i]) / w for i in kw}
            p = dataclasses.replace(p, keyword_weight=w)
            sims = sims * (1 + w) / (1 + w + w2)
            kw = {i: x * (1 + w) / (1 + w + w2) for i, x in kw.items()}
        if v.family == "kwprf":
            mdocs, nterms, lam = v.setting
            terms = expansion_terms(store, query, [r.index for r in first[:mdocs]], nterms)
            if terms:
                more, _, _ = self.hits(store, query + " " + " ".join(terms), p.keyword_pool + (own is not None))
                if own is not None:
                    more = [(i, s) for i, s in more if i != own]
                kw2 = ranking.normalize_keyword(more)
                kw = {i: (1 - lam) * kw.get(i, 0.0) + lam * kw2.get(i, 0.0) for i in set(kw) | set(kw2)}
                order = sorted(kw, key=lambda i: -kw[i])
        verbatim = [i for i in order if i in ev and ranking.rare(ev[i][1], ev[i][2], p.rare_share)]
        scored = ranking.fuse(sims, top_k(sims, p.semantic_pool), kw, order, p, extra=verbatim)
        seeds = sorted(scored.items(), key=lambda kv: -kv[1][0])[: p.hop_seeds]
        hops = ranking.association_chain([(i, s) for i, (s, _) in seeds], m, p.hop_bars[: p.semantic_hops],
                                         exclude=() if own is None else {own})
        for i, (rel, why) in hops.items():
            old, reasons = scored.get(i, (0.0, []))
            scored[i] = (max(old, rel), [*reasons, why])
        ranking._prefer_verbatim(scored, verbatim, named, p.named_holders_only)
        return ranking.select(scored, store.kinds, p, limit=limit)


    def _top(self, store: Store, k: int) -> tuple[np.ndarray, np.ndarray]:
        m = store.matrix
        vals = np.empty((len(m), k), dtype=np.float32)
        idx = np.empty((len(m), k), dtype=np.int64)
        for a in range(0, len(m), 2048):
            block = m[a:a + 2048] @ m.T
            for j in range(block.shape[0]):
                block[j, a + j] = -np.inf
            part = np.argpartition(block, -k, axis=1)[:, -k:]
            idx[a:a + 2048] = part
            vals[a:a + 2048] = np.take_along_axis(block, part, axis=1)
        return vals, idx

    def hub(self, store: Store, k: int) -> np.ndarray:
        key = (store.name, k)
        if key not in self.hubness:
            self.hubness[key] = self._top(store, k)[0].mean(axis=1)
        return self.hubness[key]

    def neighbours(self, store: Store, k: int) -> np.ndarray:
        key = (store.name, k)
        if key not in self.knn:
            self.knn[key] = self._top(store, k)[1]
        return self.knn[key]


def mmr(ranked: list[ranking.Ranked], matrix: np.ndarray, mu: float, top: int = 10) -> list[ranking.Ranked]:
    """The first ``top`` re-ordered greedily by score - mu * (cosine with the closest one chosen)."""
    rest = list(ranked)
    chosen: list[ranking.Ranked] = []
    while rest and len(chosen) < top:
        if chosen:
            sel = matrix[[r.index for r in chosen]]
            red = (matrix[[r.index for r in rest]] @ sel.T).max(axis=1)
            best = int(np.argmax([r.score - mu * float(x) for r, x in zip(rest, red, strict=True)]))
        else:
            best = 0
        chosen.append(rest.pop(best))
    return chosen + rest


_SPLIT_RE = re.compile(r",\s*|\s+(?:and|or|as well as)\s+", re.IGNORECASE)


def split_question(query: str) -> list[str]:
    """The parts of a question joined by "and", "or" or commas (each at least two content words)."""
    parts = [s.strip(" ?.!") for s in _SPLIT_RE.split(query)]
    parts = [s for s in parts if len(keyword_terms(s)) >= 2]
    return parts if len(parts) > 1 else []


def expansion_terms(store: Store, query: str, rows: Sequence[int], n: int) -> list[str]:
    """The ``n`` words of ``rows``' texts with the most tf x idf mass, not in the query."""
    asked = {t.lower() for t in keyword_terms(query)}
    tf: Counter[str] = Counter()
    for i in rows:
        tf.update(t.lower() for t in keyword_terms(store.texts[i]))
    n_docs = len(store.texts)
    weight = {}
    for t, c in tf.items():
        if t in asked or len(t) < 3 or not t.isalpha():
            continue
        df = store.code.doc_freq(t)
        if df <= 1:
            continue  # a word only one memory holds points back to itself
        weight[t] = c * math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
    return sorted(weight, key=lambda t: -weight[t])[:n]


# -- data sets ------------------------------------------------------------------------------------
def locomo_table(path: Path, cache: EmbeddingCache, variants: list[Variant], r: Ranker) -> np.ndarray:
    """[variant, conversation, (recall@5, recall@10, recall@25 sums, questions, empty mismatched, mismatched)]."""
    convs, _ = load_conversations(path, "turns")
    stores = [build_store(c.name, c.texts, ["fact"] * len(c.texts), cache) for c in convs]
    out = np.zeros((len(variants), len(convs), 6))
    for ci, (conv, store) in enumerate(zip(convs, stores, strict=True)):
        qs = [q for q in conv.questions if q.category in HEADLINE_CATEGORIES]
        qv = cache.embed([q.text for q in qs])
        other = stores[(ci + 1) % len(stores)]
        for q, vec in zip(qs, qv, strict=True):
            for vi, v in enumerate(variants):
                got = r.rank(v, store, q.text, vec)
                out[vi, ci, :3] += [recall_at(got, conv.labels, q.evidence, k) for k in (5, 10, 25)]
                out[vi, ci, 3] += 1
                out[vi, ci, 4] += not r.rank(v, other, q.text, vec)
                out[vi, ci, 5] += 1
    return out


def locomo_metrics(rows: np.ndarray) -> dict[str, float]:
    s = rows.sum(axis=0)
    return {"recall@5": s[0] / s[3], "recall@10": s[1] / s[3], "recall@25": s[2] / s[3], "abstention": s[4] / s[5]}


def gitbugs_table(corpus: Path, qrels: Path, cache: EmbeddingCache, variants: list[Variant],
                  r: Ranker) -> tuple[np.ndarray, np.ndarray]:
    """[variant, query, (hit@1, hit@5, hit@10, rr)] over title then title+body queries; each query's half."""
    reports, rels = load_gitbugs(corpus, qrels)
    row = {x.id: i for i, x in enumerate(reports)}
    store = build_store("gitbugs", [x.memory_text for x in reports], ["problem"] * len(reports), cache)
    qids = [q for q in rels if q in row and any(d in row for d in rels[q])]
    half = cluster_halves(qids, rels)
    texts = [reports[row[q]].title.strip() for q in qids] + [reports[row[q]].memory_text for q in qids]
    qvecs = cache.embed(texts)
    out = np.zeros((len(variants), len(texts), 4))
    for n, (text, vec) in enumerate(zip(texts, qvecs, strict=True)):
        q = qids[n % len(qids)]
        rel = {row[d] for d in rels[q] if d in row}
        for vi, v in enumerate(variants):
            got = [x for x in r.rank(v, store, text, vec, own=row[q], limit=10) if x.index != row[q]]
            first = next((k for k, x in enumerate(got) if x.index in rel), None)
            if first is not None:
                out[vi, n] = (first < 1, first < 5, first < 10, 1.0 / (first + 1))
    return out, np.array([half[qids[n % len(qids)]] for n in range(len(texts))])


def identifiers_table(corpus: Path, qrels: Path, cache: EmbeddingCache, variants: list[Variant],
                      r: Ranker) -> dict[str, dict[str, dict[str, float]]]:
    ids, texts, rels = load_identifiers(corpus, qrels)
    row = {m: i for i, m in enumerate(ids)}
    store = build_store("identifiers", texts, ["fact"] * len(texts), cache)
    names = list(rels)
    qvecs = cache.embed(names)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for v in variants:
        res: dict[str, list[tuple[float, ...]]] = {"whole": [], "inner": []}
        for n, (name, vec) in enumerate(zip(names, qvecs, strict=True)):
            rel = {row[m] for m in rels[name] if m in row}
            got = r.rank(v, store, name, vec, limit=10)
            first = next((k for k, x in enumerate(got) if x.index in rel), None)
            res["whole" if n < WHOLE_NAMES else "inner"].append(
                (first is not None and first < 5, 0.0 if first is None else 1.0 / (first + 1), not got))
        out[str(v)] = {h: {"hit@5": float(np.mean([x[0] for x in xs])), "mrr": float(np.mean([x[1] for x in xs])),
                           "empty": float(np.mean([x[2] for x in xs]))} for h, xs in res.items() if xs}
    return out


# -- cross-validation -----------------------------------------------------------------------------
def choose_locomo(table: np.ndarray, train: list[int]) -> int:
    """The best training recall@10 among settings whose training abstention is >= 0.90 (ties: off)."""
    best, best_score = 0, -1.0
    for vi in range(table.shape[0]):
        m = locomo_metrics(table[vi, train])
        if m["abstention"] >= 0.90 and m["recall@10"] > best_score + 1e-9:
            best, best_score = vi, m["recall@10"]
    return best


def locomo_oof(table: np.ndarray) -> tuple[list[int], dict[str, float]]:
    n = table.shape[1]
    picks = [choose_locomo(table, [j for j in range(n) if j != i]) for i in range(n)]
    held = np.stack([table[picks[i], i] for i in range(n)])
    return picks, locomo_metrics(held)


def gitbugs_metrics(rows: np.ndarray) -> dict[str, float]:
    return dict(zip(("hit@1", "hit@5", "hit@10", "mrr"), (float(x) for x in rows.mean(axis=0)), strict=True))


def gitbugs_oof(table: np.ndarray, halves: np.ndarray) -> tuple[list[int], dict[str, dict[str, float]]]:
    n = table.shape[1] // 2
    kind = np.array([0] * n + [1] * n)
    picks = []
    held: list[np.ndarray] = [np.zeros((0, 4)), np.zeros((0, 4))]
    for test in (0, 1):
        train = halves != test
        scores = [table[vi, train, 3].mean() for vi in range(table.shape[0])]
        pick = int(np.argmax(np.asarray(scores) - 1e-9 * (np.arange(len(scores)) > 0)))
        picks.append(pick)
        for k in (0, 1):
            held[k] = np.concatenate([held[k], table[pick, (halves == test) & (kind == k)]])
    return picks, {"title": gitbugs_metrics(held[0]), "title_body": gitbugs_metrics(held[1])}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "eval")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--only", nargs="+", choices=sorted(FAMILIES), default=sorted(FAMILIES))
    args = ap.parse_args(argv)
    cache = EmbeddingCache(args.cache_dir)
    r = Ranker()
    r.qvec_of = lambda text: cache.embed([text])[0]
    data = args.data_dir
    report: dict[str, Any] = {}
    for fam in args.only:
        t0 = time.perf_counter()
        variants = [Variant(fam, s) for s in FAMILIES[fam]]
        lo = locomo_table(data / "locomo" / "locomo_dev.json", cache, variants, r)
        gb, halves = gitbugs_table(data / "gitbugs" / "hadoop_corpus.jsonl", data / "gitbugs" / "hadoop_qrels.json",
                                   cache, variants, r)
        lo_picks, lo_oof = locomo_oof(lo)
        gb_picks, gb_oof = gitbugs_oof(gb, halves)
        whole = choose_locomo(lo, list(range(lo.shape[1])))
        ident = identifiers_table(data / "identifiers" / "requests_corpus.jsonl",
                                  data / "identifiers" / "requests_qrels.json", cache,
                                  [variants[0], variants[whole]], r)
        log(f"== {fam} ({time.perf_counter() - t0:.0f}s)")
        n = gb.shape[1] // 2
        for vi, v in enumerate(variants):
            m = locomo_metrics(lo[vi])
            g = (gitbugs_metrics(gb[vi, :n]), gitbugs_metrics(gb[vi, n:]))
            log(f"  {v!s:28s} LoCoMo R@5/10/25 {m['recall@5']:.3f}/{m['recall@10']:.3f}/{m['recall@25']:.3f} "
                f"abst {m['abstention']:.3f} | GitBugs title MRR {g[0]['mrr']:.3f} hit@5 {g[0]['hit@5']:.3f}, "
                f"t+b MRR {g[1]['mrr']:.3f} hit@5 {g[1]['hit@5']:.3f}")
        log(f"  LoCoMo folds chose {[str(variants[i]) for i in lo_picks]}; out of fold "
            + json.dumps({k: round(v, 4) for k, v in lo_oof.items()}))
        log(f"  GitBugs halves chose {[str(variants[i]) for i in gb_picks]}; out of fold "
            + json.dumps({q: {k: round(v, 4) for k, v in m.items()} for q, m in gb_oof.items()}))
        log(f"  identifiers: {json.dumps(ident)}")
        report[fam] = {"locomo_folds": [str(variants[i]) for i in lo_picks], "locomo_oof": lo_oof,
                       "gitbugs_halves": [str(variants[i]) for i in gb_picks], "gitbugs_oof": gb_oof,
                       "locomo_off": locomo_metrics(lo[0]),
                       "gitbugs_off": {"title": gitbugs_metrics(gb[0, :n]), "title_body": gitbugs_metrics(gb[0, n:])},
                       "identifiers": ident}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
