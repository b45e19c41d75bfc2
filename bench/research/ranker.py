"""Recall research: a linear ranker over every candidate signal, fitted out of fold.

The shipped fusion is one hand-shaped linear form, ``cos + 0.5 * keyword`` with the keyword
feature ``0.25 * bm25/max + 0.75 * coverage`` for prose queries (``bm25/max`` alone otherwise),
each constant chosen by cross-validation one at a time (recall.py). This asks whether
fitting all the weights together, with two more signals the one-at-a-time sweeps found to move
LoCoMo (hubness, length), lifts recall where every data set can see it.

Candidates and features are those ``ranking.rank`` sees: the union of the semantic pool (50
best cosines) and the keyword pool (50 best BM25F hits), per candidate

    cos, bm25/max (prose queries), bm25/max (queries naming an identifier), coverage (prose),
    coverage (identifier queries), hubness (mean cosine to its 25 nearest memories, centred),
    log(1 + words) (centred)

and the score is ``cos + w . (the rest)``. No gate, association chain or cut: those act after
the order and are the same for every weight vector, so ranked-list figures compare like for
like (the ranking engine's "no cut" rows of RESULTS.md).

Weights are fitted by coordinate ascent over a grid, from the shipped point:

- LoCoMo alone: leave one conversation out, objective recall@10;
- GitBugs alone: duplicate clusters in two halves, tune on one, score the other, objective MRR
  (title and title+body pooled);
- jointly (the product has one set of weights): tune on four LoCoMo conversations and one
  GitBugs half (objective: the mean of the two, each relative to the shipped point's), score
  the held-out conversation and the other half; all 5 x 2 pairs.

    python bench/research/ranker.py --data-dir ../shared/eval

The last stdout line is one JSON object with the out-of-fold figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: eval_common and the evals

from eval_common import DEFAULT_CACHE, ROOT, EmbeddingCache, Store, build_store, cluster_halves, log
from eval_gitbugs import load as load_gitbugs
from eval_locomo import HEADLINE_CATEGORIES, load_conversations

from memstore.index.terms import keyword_terms, top_k
from memstore.read import ranking

PARAMS = ranking.RankingParams()
FEATURES = ("kw_prose", "kw_code", "cov_prose", "cov_code", "hub", "length")
SHIPPED = np.array([PARAMS.keyword_weight * (1 - PARAMS.prose_coverage), PARAMS.keyword_weight,
                    PARAMS.keyword_weight * PARAMS.prose_coverage, 0.0, 0.0, 0.0])
GRID = {
    "kw_prose": [0.0, 0.05, 0.1, 0.125, 0.15, 0.2, 0.3, 0.4, 0.5],
    "kw_code": [0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0],
    "cov_prose": [0.0, 0.1, 0.2, 0.3, 0.375, 0.45, 0.6, 0.8],
    "cov_code": [0.0, 0.05, 0.1, 0.2, 0.3],
    "hub": [-0.8, -0.6, -0.5, -0.4, -0.3, -0.2, -0.1, 0.0],
    "length": [-0.02, -0.01, 0.0, 0.01, 0.02, 0.03, 0.05],
}


@dataclass
class Query:
    """One query's candidates: their cosine, the other features (rows: candidates) and relevance."""

    cos: np.ndarray
    feats: np.ndarray
    gain: list[frozenset[str]]  # per candidate, the evidence ids it carries (LoCoMo) or {"rel"}
    need: int  # evidence ids to find (LoCoMo); 1 for GitBugs
    group: int  # LoCoMo conversation, or GitBugs half
    source: str  # "locomo", "title", "body"


def hubness(m: np.ndarray, k: int = 25) -> np.ndarray:
    out = np.empty(len(m), dtype=np.float32)
    for a in range(0, len(m), 2048):
        block = m[a:a + 2048] @ m.T
        for j in range(block.shape[0]):
            block[j, a + j] = -np.inf
        out[a:a + 2048] = np.partition(block, -k, axis=1)[:, -k:].mean(axis=1)
    return out - float(out.mean())


def lengths(store: Store) -> np.ndarray:
    ln = np.log1p(np.array([len(keyword_terms(t)) for t in store.texts], dtype=np.float32))
    return ln - float(ln.mean())


def candidates(store: Store, query: str, qvec: np.ndarray, hub: np.ndarray, ln: np.ndarray,
               own: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    hits, ev, _ = store.code.hits(query, PARAMS.keyword_pool + (own is not None))
    if own is not None:
        hits = [(i, s) for i, s in hits if i != own]
    sims = ranking.cosine_all(qvec, store.matrix)
    if own is not None:
        sims[own] = -np.inf
    kw = ranking.normalize_keyword(hits)
    rows = list(dict.fromkeys([i for i, _ in top_k(sims, PARAMS.semantic_pool)] + [i for i, _ in hits if i in kw]))
    prose = ranking.prose_query(query)
    f = np.zeros((len(rows), len(FEATURES)), dtype=np.float32)
    for n, i in enumerate(rows):
        k = kw.get(i, 0.0)
        c = ev.get(i, ranking.NO_EVIDENCE)[0] if i in kw else 0.0
        f[n] = (k if prose else 0.0, 0.0 if prose else k, c if prose else 0.0, 0.0 if prose else c, hub[i], ln[i])
    return np.array(rows), sims[rows].astype(np.float32), f


def locomo_queries(path: Path, cache: EmbeddingCache) -> list[Query]:
    convs, _ = load_conversations(path, "turns")
    out = []
    for ci, conv in enumerate(convs):
        store = build_store(conv.name, conv.texts, ["fact"] * len(conv.texts), cache)
        hub, ln = hubness(store.matrix), lengths(store)
        qs = [q for q in conv.questions if q.category in HEADLINE_CATEGORIES]
        for q, vec in zip(qs, cache.embed([q.text for q in qs]), strict=True):
            rows, cos, f = candidates(store, q.text, vec, hub, ln)
            ev = set(q.evidence)
            out.append(Query(cos, f, [frozenset(set(conv.labels[i]) & ev) for i in rows], len(q.evidence), ci,
                             "locomo"))
    return out


def gitbugs_queries(corpus: Path, qrels: Path, cache: EmbeddingCache) -> list[Query]:
    reports, rels = load_gitbugs(corpus, qrels)
    row = {x.id: i for i, x in enumerate(reports)}
    store = build_store("gitbugs", [x.memory_text for x in reports], ["problem"] * len(reports), cache)
    hub, ln = hubness(store.matrix), lengths(store)
    qids = [q for q in rels if q in row and any(d in row for d in rels[q])]
    half = cluster_halves(qids, rels)
    out = []
    for source, texts in (("title", [reports[row[q]].title.strip() for q in qids]),
                          ("body", [reports[row[q]].memory_text for q in qids])):
        for q, text, vec in zip(qids, texts, cache.embed(texts), strict=True):
            rel = {row[d] for d in rels[q] if d in row}
            rows, cos, f = candidates(store, text, vec, hub, ln, own=row[q])
            out.append(Query(cos, f, [frozenset({"rel"}) if i in rel else frozenset() for i in rows], 1, half[q],
                             source))
    return out


def score(queries: list[Query], w: np.ndarray) -> dict[str, float]:
    """recall@5/10/25 (LoCoMo) or hit@1/5/10 and MRR (GitBugs), means over ``queries``."""
    r5 = r10 = r25 = h1 = h5 = h10 = mrr = 0.0
    for q in queries:
        order = np.argsort(-(q.cos + q.feats @ w), kind="stable")
        if q.source == "locomo":
            found: set[str] = set()
            for n, i in enumerate(order[:25]):
                found |= q.gain[i]
                if n == 4:
                    r5 += len(found) / q.need
                if n == 9:
                    r10 += len(found) / q.need
            r25 += len(found) / q.need
            if len(order) < 10:
                r10 += len(found) / q.need
            if len(order) < 5:
                r5 += len(found) / q.need
        else:
            first = next((n for n, i in enumerate(order[:10]) if q.gain[i]), None)
            if first is not None:
                h1 += first < 1
                h5 += first < 5
                h10 += 1
                mrr += 1 / (first + 1)
    n = max(len(queries), 1)
    if queries and queries[0].source == "locomo":
        return {"recall@5": r5 / n, "recall@10": r10 / n, "recall@25": r25 / n}
    return {"hit@1": h1 / n, "hit@5": h5 / n, "hit@10": h10 / n, "mrr": mrr / n}


def objective(queries: list[Query], w: np.ndarray) -> float:
    m = score(queries, w)
    return m["recall@10"] if "recall@10" in m else m["mrr"]


def ascend(objective_of, start: np.ndarray, rounds: int = 3) -> np.ndarray:
    """Coordinate ascent over GRID from ``start``; a move must gain more than 1e-9 (ties stay)."""
    w = start.copy()
    best = objective_of(w)
    for _ in range(rounds):
        moved = False
        for j, name in enumerate(FEATURES):
            for v in GRID[name]:
                trial = w.copy()
                trial[j] = v
                got = objective_of(trial)
                if got > best + 1e-9:
                    best, w, moved = got, trial, True
        if not moved:
            break
    return w


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "eval")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args(argv)
    cache = EmbeddingCache(args.cache_dir)
    t0 = time.perf_counter()
    lo = locomo_queries(args.data_dir / "locomo" / "locomo_dev.json", cache)
    gb = gitbugs_queries(args.data_dir / "gitbugs" / "hadoop_corpus.jsonl",
                         args.data_dir / "gitbugs" / "hadoop_qrels.json", cache)
    log(f"features for {len(lo)} LoCoMo and {len(gb)} GitBugs queries in {time.perf_counter() - t0:.0f}s")
    convs = sorted({q.group for q in lo})
    report: dict = {"shipped": {"locomo": score(lo, SHIPPED),
                                "title": score([q for q in gb if q.source == "title"], SHIPPED),
                                "body": score([q for q in gb if q.source == "body"], SHIPPED)}}
    log(f"shipped weights {SHIPPED.tolist()}: {json.dumps(report['shipped'])}")

    # LoCoMo alone, leave one conversation out.
    held: list[Query] = []
    picks = []
    for c in convs:
        train = [q for q in lo if q.group != c]
        w = ascend(lambda w, t=train: objective(t, w), SHIPPED)
        picks.append(w.round(3).tolist())
        held_c = [q for q in lo if q.group == c]
        held.append((held_c, w))
    oof = sum((np.array(list(score(h, w).values())) * len(h) for h, w in held), np.zeros(3)) / len(lo)
    report["locomo_alone"] = {"weights": picks, "oof": dict(zip(("recall@5", "recall@10", "recall@25"),
                                                                  oof.round(4).tolist(), strict=True))}
    log(f"LoCoMo alone, out of fold: {report['locomo_alone']}")

    # GitBugs alone, halves.
    gpicks, gheld = [], {"title": [], "body": []}
    for test in (0, 1):
        train = [q for q in gb if q.group != test]
        w = ascend(lambda w, t=train: objective(t, w), SHIPPED)
        gpicks.append(w.round(3).tolist())
        for src in gheld:
            gheld[src].append(([q for q in gb if q.group == test and q.source == src], w))
    report["gitbugs_alone"] = {"weights": gpicks, **{src: pooled(parts) for src, parts in gheld.items()}}
    log(f"GitBugs alone, out of fold: {report['gitbugs_alone']}")

    # Jointly: every (held-out conversation, held-out half) pair.
    base_lo = {c: objective([q for q in lo if q.group != c], SHIPPED) for c in convs}
    base_gb = {h: objective([q for q in gb if q.group != h], SHIPPED) for h in (0, 1)}
    jpicks, jlo, jgb = [], [], {"title": [], "body": []}
    for c in convs:
        for h in (0, 1):
            tl = [q for q in lo if q.group != c]
            tg = [q for q in gb if q.group != h]
            w = ascend(lambda w, tl=tl, tg=tg, c=c, h=h: 0.5 * (objective(tl, w) / base_lo[c]
                                                                  + objective(tg, w) / base_gb[h]), SHIPPED)
            jpicks.append(w.round(3).tolist())
            jlo.append(([q for q in lo if q.group == c], w))
            for src in jgb:
                jgb[src].append(([q for q in gb if q.group == h and q.source == src], w))
    # Each held-out part is scored twice (once per partner); the mean of the two is its figure.
    report["joint"] = {"weights": jpicks, "locomo": pooled(jlo), **{src: pooled(p) for src, p in jgb.items()}}
    log(f"jointly, out of fold: {json.dumps({k: v for k, v in report['joint'].items() if k != 'weights'})}")
    log(f"  weights chosen ({', '.join(FEATURES)}): {jpicks}")
    print(json.dumps(report))
    return report


def pooled(parts: list[tuple[list[Query], np.ndarray]]) -> dict[str, float]:
    """Query-weighted means of each part's figures under its own weights."""
    total: dict[str, float] = {}
    n = 0
    for qs, w in parts:
        for k, v in score(qs, w).items():
            total[k] = total.get(k, 0.0) + v * len(qs)
        n += len(qs)
    return {k: round(v / n, 4) for k, v in total.items()}


if __name__ == "__main__":
    main()
