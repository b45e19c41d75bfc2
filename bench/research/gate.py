"""Sweeps of the query gate, the lanes and the fusion weight on LoCoMo through the real
``memstore.read.ranking.rank``, each setting beside the shipped ``RankingParams()``: recall@5/10/25
of the evidence turns and abstention on mismatched questions (bench/eval_locomo.py's protocol).
What they decided: docs/decisions/query-gate-and-fusion.md.

    python bench/research/gate.py --data ../shared/eval/locomo/locomo_dev.json [--sweep bar perresult lanes weight ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: eval_common and the evals

from eval_common import DEFAULT_CACHE, EmbeddingCache, Store, build_store, ranking_retriever
from eval_locomo import evaluate, load_conversations

from memstore.read import ranking

BASE = ranking.RankingParams()


def row(label: str, convs: list, stores: list[Store], qvecs: list[np.ndarray], p: ranking.RankingParams) -> None:
    res = evaluate(convs, stores, qvecs, ranking_retriever(p), [5, 10, 25])
    o = res.overall
    print(f"| {label} | {o[5]:.3f} | {o[10]:.3f} | {o[25]:.3f} | {res.abstention:.3f} |", flush=True)


def per_result_bar(bar: float):  # type: ignore[no-untyped-def]
    """Counter-example: the bar applied to every result's cosine instead of once per query."""

    def run(store: Store, query: str, qvec: np.ndarray) -> list[ranking.Ranked]:
        lane = ranking.semantic_lane(qvec, store.matrix, k=25, floor=bar)
        return [ranking.Ranked(i, s, ()) for i, s in lane]

    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--sweep", nargs="*", default=["bar", "floor", "lanes", "weight", "hops", "prf", "perresult"])
    args = ap.parse_args()
    convs, _ = load_conversations(args.data, "turns")
    cache = EmbeddingCache(DEFAULT_CACHE)
    stores = [build_store(c.name, c.texts, ["fact"] * len(c.texts), cache) for c in convs]
    qvecs = [cache.embed([q.text for q in c.questions]) for c in convs]
    print("| setting | R@5 | R@10 | R@25 | abstention |\n|---|---|---|---|---|")
    r = dataclasses.replace
    if "bar" in args.sweep:
        for pen in (0.0, 0.05, 0.10, 0.15):
            for bar in (0.0, 0.35, 0.40, 0.425, 0.45, 0.475, 0.50, 0.55):
                p = r(BASE, query_bar={"targeted": bar}, novelty_penalty=pen, result_floor={"targeted": 0.0})
                row(f"bar {bar} novelty +{pen} floor 0", convs, stores, qvecs, p)
    if "floor" in args.sweep:
        for fl in (0.0, 0.10, 0.15, 0.20, 0.25, 0.30):
            row(f"result floor {fl}", convs, stores, qvecs, r(BASE, result_floor={"targeted": fl}))
    if "lanes" in args.sweep:
        for pool in (25, 50, 100):
            for lane in (0, 5, 10, 25):
                p = r(BASE, semantic_pool=pool, keyword_lane=lane)
                row(f"semantic_pool {pool} keyword_lane {lane}", convs, stores, qvecs, p)
    if "weight" in args.sweep:
        for w in (0.0, 0.3, 0.4, 0.5, 0.6, 0.8):
            row(f"keyword_weight {w}", convs, stores, qvecs, r(BASE, keyword_weight=w))
    if "hops" in args.sweep:
        row("no association chain", convs, stores, qvecs, r(BASE, semantic_hops=0))
        for bars in ((0.6, 0.7), (0.7, 0.8), (0.8, 0.88), (0.85, 0.9)):
            for seeds in (3, 5):
                p = r(BASE, hop_bars=bars, hop_seeds=seeds)
                row(f"hops bars {bars} seeds {seeds}", convs, stores, qvecs, p)
    if "prf" in args.sweep:
        for w in (0.0, 0.3, 0.6, 1.0):
            row(f"prf weight {w} docs 3", convs, stores, qvecs, r(BASE, prf_weight=w))
    if "perresult" in args.sweep:
        for bar in (0.30, 0.35, 0.40, 0.45):
            res = evaluate(convs, stores, qvecs, per_result_bar(bar), [5, 10, 25])
            o = res.overall
            print(
                f"| per-result cosine bar {bar} (vector only) | {o[5]:.3f} | {o[10]:.3f} | {o[25]:.3f} | "
                f"{res.abstention:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
