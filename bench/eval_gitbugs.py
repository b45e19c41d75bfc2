"""GitBugs duplicate-report benchmark (protocol: ../shared/eval/README.md, results: bench/RESULTS.md).

Every report is one ``problem`` memory (title + first ~1,500 chars of body) in one store.
Each query report is asked twice, by its title alone (an agent's short description) and by
title + body; the query's own report is excluded from the store for that query (as if it
were not written yet); relevant = its duplicates. Metrics: hit@1/5/10 and MRR (first
relevant rank within the returned list, 0 if absent). Baselines: BM25 alone, vector alone.

Also measures, for the write-time duplicate check, the cosine between duplicate pairs vs
each report's nearest non-duplicate (``--dup-analysis``, on by default).

    python bench/eval_gitbugs.py --corpus ../shared/eval/gitbugs/hadoop_corpus.jsonl \\
        --qrels ../shared/eval/gitbugs/hadoop_qrels.json

The last stdout line is one JSON object (see ``main``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_common import (
    DEFAULT_CACHE,
    EmbeddingCache,
    Store,
    bm25_retriever,
    build_store,
    fmt,
    log,
    percentile_ms,
    ranking_retriever,
    vector_retriever,
)

from memstore.index.embedder import get_embedder
from memstore.read import ranking

BODY_CHARS = 1500
KS = (1, 5, 10)


@dataclass
class Report:
    id: str
    title: str
    body: str

    @property
    def memory_text(self) -> str:
        body = self.body.strip()[:BODY_CHARS]
        return f"{self.title.strip()}\n\n{body}" if body else self.title.strip()


def load(corpus: Path, qrels: Path) -> tuple[list[Report], dict[str, list[str]]]:
    reports = []
    with corpus.open() as fh:
        for line in fh:
            if line.strip():
                r = json.loads(line)
                reports.append(Report(str(r["id"]), str(r.get("title") or ""), str(r.get("body") or "")))
    rels = {str(k): [str(x) for x in v] for k, v in json.loads(qrels.read_text()).items()}
    return reports, rels


# A retriever here also gets the row to exclude (the query's own report).
def baseline_excl(base):  # type: ignore[no-untyped-def]
    def run(store: Store, query: str, qvec: np.ndarray, own: int) -> list[ranking.Ranked]:
        return [r for r in base(store, query, qvec) if r.index != own]

    return run


def evaluate(
    store: Store,
    queries: list[tuple[int, str, set[int]]],
    qvecs: np.ndarray,
    retriever,  # type: ignore[no-untyped-def]
    live_embed: bool = False,
) -> tuple[dict[str, float], list[float]]:
    hits = {k: 0 for k in KS}
    rr = 0.0
    empty = 0
    lat: list[float] = []
    embedder = get_embedder() if live_embed else None
    for (own, text, rel), vec in zip(queries, qvecs, strict=True):
        t0 = time.perf_counter()
        if embedder is not None:
            vec = embedder.encode([text])[0]
        ranked = retriever(store, text, vec, own)
        lat.append(time.perf_counter() - t0)
        empty += not ranked
        first = next((pos for pos, r in enumerate(ranked) if r.index in rel), None)
        if first is not None:
            rr += 1.0 / (first + 1)
            for k in KS:
                hits[k] += first < k
    n = len(queries)
    out = {f"hit@{k}": round(hits[k] / n, 4) for k in KS}
    out["mrr"] = round(rr / n, 4)
    out["empty"] = round(empty / n, 4)
    return out, lat


def duplicate_analysis(store: Store, reports: list[Report], rels: dict[str, list[str]]) -> dict[str, object]:
    """Cosine of known duplicate pairs vs each query report's nearest non-duplicate."""
    row = {r.id: i for i, r in enumerate(reports)}
    x = store.matrix
    dup_sims: list[float] = []
    nn_non: list[float] = []
    for qid, dups in rels.items():
        if qid not in row:
            continue
        i = row[qid]
        sims = x @ x[i]
        sims[i] = -np.inf
        drows = [row[d] for d in dups if d in row]
        dup_sims.extend(float(sims[j]) for j in drows)
        sims[drows] = -np.inf
        nn_non.append(float(np.max(sims)))
    # Nearest neighbour of every report not in any qrels cluster: a proxy for "a genuinely
    # new memory arrives; how close is the closest existing one?" (the corpus has unlabelled
    # duplicates too, so the top of this distribution overstates false refusals).
    in_qrels = {row[q] for q in rels if q in row} | {row[d] for v in rels.values() for d in v if d in row}
    others = np.array([i for i in range(len(reports)) if i not in in_qrels])
    nn_all: list[float] = []
    for start in range(0, len(others), 512):
        block = others[start : start + 512]
        s = x[block] @ x.T
        s[np.arange(len(block)), block] = -np.inf
        nn_all.extend(np.max(s, axis=1).tolist())
    pct = (5, 10, 25, 50, 75, 90, 95, 99)

    def dist(v: list[float]) -> dict[str, float]:
        a = np.asarray(v)
        return {f"p{p}": round(float(np.percentile(a, p)), 3) for p in pct} | {"n": len(v)}

    out: dict[str, object] = {
        "duplicate_pairs": dist(dup_sims),
        "nearest_non_duplicate_of_query": dist(nn_non),
        "nearest_neighbour_unlabelled": dist(nn_all),
    }
    table = []
    for t in (0.80, 0.85, 0.88, 0.90, 0.92, 0.95, 0.97):
        table.append(
            {
                "threshold": t,
                "dup_pairs_caught": round(float(np.mean(np.asarray(dup_sims) >= t)), 3),
                "query_nearest_non_dup_refused": round(float(np.mean(np.asarray(nn_non) >= t)), 3),
                "unlabelled_refused": round(float(np.mean(np.asarray(nn_all) >= t)), 4),
            }
        )
    out["thresholds"] = table
    return out


def main(argv: list[str] | None = None, params: ranking.RankingParams | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--qrels", type=Path, required=True)
    ap.add_argument("--mode", choices=("targeted", "ambient"), default="targeted")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--no-dup-analysis", action="store_true")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    reports, rels = load(args.corpus, args.qrels)
    row = {r.id: i for i, r in enumerate(reports)}
    cache = EmbeddingCache(args.cache_dir)
    store = build_store("gitbugs", [r.memory_text for r in reports], ["problem"] * len(reports), cache)
    qids = [q for q in rels if q in row and any(d in row for d in rels[q])]
    log(f"{len(reports)} reports, {len(qids)} queries with a duplicate in the corpus")

    p = params or ranking.RankingParams()
    out: dict = {}
    baselines: dict = {}
    for qname, text_of in (("title", lambda r: r.title.strip()), ("title_body", lambda r: r.memory_text)):
        queries = [(row[q], text_of(reports[row[q]]), {row[d] for d in rels[q] if d in row}) for q in qids]
        qvecs = cache.embed([t for _, t, _ in queries])
        res, lat = evaluate(store, queries, qvecs, ranking_retriever(p, args.mode, limit=50), live_embed=True)
        res["p50_ms"] = percentile_ms(lat, 50)
        res["p95_ms"] = percentile_ms(lat, 95)
        out[qname] = res
        log(f"{qname:10s} memstore: " + ", ".join(f"{k}={fmt(v)}" for k, v in res.items()))
        if not args.no_baselines:
            for bname, base in (("bm25", bm25_retriever(51)), ("vector", vector_retriever(51))):
                b, _ = evaluate(store, queries, qvecs, baseline_excl(base))
                b.pop("empty")
                baselines.setdefault(bname, {})[qname] = b
                log(f"{qname:10s} {bname:8s}: " + ", ".join(f"{k}={fmt(v)}" for k, v in b.items()))
    out["baselines"] = baselines
    if not args.no_dup_analysis:
        dup = duplicate_analysis(store, reports, rels)
        log("duplicate check (cosine, title+body memories):")
        for key in ("duplicate_pairs", "nearest_non_duplicate_of_query", "nearest_neighbour_unlabelled"):
            log(f"  {key}: {dup[key]}")
        for t in dup["thresholds"]:  # type: ignore[attr-defined]
            log(f"  {t}")
        out["duplicate_check"] = dup
    log(f"total {time.perf_counter() - t_start:.1f}s")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
