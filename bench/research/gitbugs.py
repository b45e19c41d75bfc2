"""The same sweeps on GitBugs (Hadoop) through the real ``memstore.read.ranking.rank``: hit@1/5/10
and MRR of title and title+body queries (bench/eval_gitbugs.py's protocol) per setting of the
gate, the fusion weight, the lanes and BM25's b. What they decided:
docs/decisions/query-gate-and-fusion.md.

    python bench/research/gitbugs.py --corpus ../shared/eval/gitbugs/hadoop_corpus.jsonl \
        --qrels ../shared/eval/gitbugs/hadoop_qrels.json [--sweep bar weight hops prf lanes bm25]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: eval_common and the evals

from eval_common import DEFAULT_CACHE, EmbeddingCache, ProductKeyword, build_store, ranking_retriever
from eval_gitbugs import evaluate, load

from memstore.read import ranking


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--qrels", type=Path, required=True)
    ap.add_argument("--sweep", nargs="*", default=["bar", "weight", "hops", "prf", "bm25", "lanes"])
    args = ap.parse_args()
    reports, rels = load(args.corpus, args.qrels)
    row = {r.id: i for i, r in enumerate(reports)}
    cache = EmbeddingCache(DEFAULT_CACHE)
    store = build_store("gitbugs", [r.memory_text for r in reports], ["problem"] * len(reports), cache)
    qids = [q for q in rels if q in row and any(d in row for d in rels[q])]
    sets = {}
    for qname, text_of in (("title", lambda r: r.title.strip()), ("title_body", lambda r: r.memory_text)):
        queries = [(row[q], text_of(reports[row[q]]), {row[d] for d in rels[q] if d in row}) for q in qids]
        sets[qname] = (queries, cache.embed([t for _, t, _ in queries]))
    base = ranking.RankingParams()
    r = dataclasses.replace
    print("| setting | title hit@1 | hit@5 | hit@10 | MRR | empty | title+body hit@5 | MRR |")
    print("|---|---|---|---|---|---|---|---|")

    def line(label: str, p: ranking.RankingParams) -> None:
        a, _ = evaluate(store, *sets["title"], ranking_retriever(p, limit=50))
        b, _ = evaluate(store, *sets["title_body"], ranking_retriever(p, limit=50))
        print(
            f"| {label} | {a['hit@1']:.3f} | {a['hit@5']:.3f} | {a['hit@10']:.3f} | {a['mrr']:.3f} | "
            f"{a['empty']:.3f} | {b['hit@5']:.3f} | {b['mrr']:.3f} |",
            flush=True,
        )

    line("defaults", base)
    if "bar" in args.sweep:
        for bar in (0.0, 0.40, 0.45, 0.5):
            line(f"bar {bar}", r(base, query_bar={"targeted": bar}))
    if "weight" in args.sweep:
        for w in (0.0, 0.2, 0.3, 0.5, 0.7, 1.0):
            line(f"keyword_weight {w}", r(base, keyword_weight=w))
    if "hops" in args.sweep:
        line("no association chain", r(base, semantic_hops=0))
        for bars in ((0.6, 0.7), (0.7, 0.8), (0.75, 0.85), (0.85, 0.9)):
            for seeds in (3, 5, 10):
                line(f"hops {bars} seeds {seeds}", r(base, hop_bars=bars, hop_seeds=seeds))
    if "prf" in args.sweep:
        for w in (0.3, 0.6, 1.0):
            for d in (1, 3, 5):
                line(f"prf {w} docs {d}", r(base, prf_weight=w, prf_docs=d))
    if "lanes" in args.sweep:
        for lane in (0, 10, 25):
            line(f"keyword_lane {lane}", r(base, keyword_lane=lane))
    if "bm25" in args.sweep:
        kw = store.code
        for b, k1 in ((0.75, 1.2), (0.3, 1.2), (0.4, 0.9), (0.4, 2.0)):
            store.code = ProductKeyword(store.texts, store.kinds, ranking.RankingParams(bm25_b=b, bm25_k1=k1))
            line(f"bm25 b={b} k1={k1}", base)
        store.code = kw


if __name__ == "__main__":
    main()
