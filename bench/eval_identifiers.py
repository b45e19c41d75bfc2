"""Identifier look-up benchmark (protocol: ../shared/eval/identifiers/README.md, results:
bench/RESULTS.md).

One store, one ``fact`` memory per commit message of psf/requests (whitespace collapsed); the
query is an identifier alone, targeted mode, top 10. Two halves: whole names as the messages
write them, and names the messages only use inside a dotted call (``raise_for_status`` for
``resp.raise_for_status()``). Metrics per half: hit@1/5/10 and MRR (first relevant in the
returned list), and the fraction of empty answers; plain BM25 (identifiers kept whole, as
memstore's keyword lane had it before the code lane) in the same run.

    python bench/eval_identifiers.py --corpus ../shared/eval/identifiers/requests_corpus.jsonl \\
        --qrels ../shared/eval/identifiers/requests_qrels.json

The last stdout line is one JSON object (see ``main``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_common import (
    DEFAULT_CACHE,
    EmbeddingCache,
    PipelineStores,
    Retriever,
    Store,
    bm25_retriever,
    build_store,
    fmt,
    log,
    percentile_ms,
    ranking_retriever,
)

from memstore.read import ranking

KS = (1, 5, 10)
WHOLE_NAMES = 100  # the qrels' first keys are whole names, the rest names inside dotted calls


def load(corpus: Path, qrels: Path) -> tuple[list[str], list[str], dict[str, list[str]]]:
    ids: list[str] = []
    texts: list[str] = []
    with corpus.open() as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                ids.append(str(row["id"]))
                texts.append(re.sub(r"\s+", " ", str(row["text"])).strip())
    return ids, texts, {str(k): [str(x) for x in v] for k, v in json.loads(qrels.read_text()).items()}


def evaluate(store: Store, queries: list[tuple[str, set[int]]], retriever: Retriever,
             qvecs: np.ndarray) -> tuple[dict[str, float], list[float]]:
    hits = {k: 0 for k in KS}
    rr = 0.0
    empty = 0
    lat: list[float] = []
    for (query, rel), vec in zip(queries, qvecs, strict=True):
        t0 = time.perf_counter()
        ranked = retriever(store, query, vec)[:10]
        lat.append(time.perf_counter() - t0)
        empty += not ranked
        first = next((pos for pos, r in enumerate(ranked) if r.index in rel), None)
        if first is not None:
            rr += 1.0 / (first + 1)
            for k in KS:
                hits[k] += first < k
    n = max(len(queries), 1)
    out = {f"hit@{k}": round(hits[k] / n, 4) for k in KS}
    out["mrr"] = round(rr / n, 4)
    out["empty"] = round(empty / n, 4)
    return out, lat


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--qrels", type=Path, required=True)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--engine", choices=("pipeline", "ranking"), default="pipeline",
                    help="pipeline: memstore.read over a real on-disk store (the headline); ranking: the pure "
                    "ranking functions over in-memory arrays")
    ap.add_argument("--keyword-only", action="store_true",
                    help="as a read without the embedding model (ranking engine, no query vector)")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    ids, texts, rels = load(args.corpus, args.qrels)
    row = {mid: i for i, mid in enumerate(ids)}
    cache = EmbeddingCache(args.cache_dir)
    store = build_store("identifiers", texts, ["fact"] * len(texts), cache)
    names = list(rels)
    halves = {"whole": names[:WHOLE_NAMES], "inner": names[WHOLE_NAMES:]}
    log(f"{len(texts)} memories, {len(names)} queries ({len(halves['whole'])} whole names, "
        f"{len(halves['inner'])} names inside dotted calls)")

    pipeline = None
    if args.engine == "pipeline" and not args.keyword_only:
        pipeline = PipelineStores(cache, kind="fact")
        pipeline.retriever()(store, "warm up", np.zeros(1))  # write the store, build its indexes
        main_retriever = pipeline.retriever(limit=10)
        engine = "pipeline"
    else:
        main_retriever = ranking_retriever(ranking.RankingParams(), limit=10, keyword_only=args.keyword_only)
        engine = "ranking, keyword only" if args.keyword_only else "ranking"
    out: dict = {"engine": engine}
    for half, qs in halves.items():
        queries = [(q, {row[m] for m in rels[q] if m in row}) for q in qs]
        qvecs = cache.embed([q for q, _ in queries])
        res, lat = evaluate(store, queries, main_retriever, qvecs)
        res["p50_ms"] = percentile_ms(lat, 50)
        bm25, _ = evaluate(store, queries, bm25_retriever(10), qvecs)
        out[half] = {"memstore": res, "bm25": bm25}
        log(f"{half:6s} memstore: " + ", ".join(f"{k}={fmt(v)}" for k, v in res.items()))
        log(f"{half:6s} bm25    : " + ", ".join(f"{k}={fmt(v)}" for k, v in bm25.items()))
    every = [(q, {row[m] for m in rels[q] if m in row}) for q in names]
    res, _ = evaluate(store, every, main_retriever, cache.embed(names))
    out["all"] = {"memstore": res, "bm25": evaluate(store, every, bm25_retriever(10), cache.embed(names))[0]}
    log("all    memstore: " + ", ".join(f"{k}={fmt(v)}" for k, v in res.items()))
    if pipeline is not None:
        pipeline.close()
    log(f"total {time.perf_counter() - t_start:.1f}s")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
