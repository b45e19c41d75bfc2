"""Cross-validation of the code lane's keyword-only bar (``keyword_only_coverage``, against the
identifier rarity ``rare_share``) through the real ``memstore.read.ranking.rank`` over the
product's keyword index. The rarity rules with the model (``rare_share``, ``gate_coverage``,
``named_holders_only``; ``verbatim_idf`` before them) are swept by rarity.py.

LoCoMo: leave one conversation out (tune on four, report the fifth); the objective is the mean of
recall@10 and abstention (the two things a read is judged on). GitBugs (Hadoop): the duplicate
clusters split in two halves, tune on one and report the other, both ways; objective MRR (title
and title+body queries). Every figure printed as "out of fold" comes from a value chosen without
the data it is reported on.

    python bench/research/codelane.py --locomo ../shared/eval/locomo/locomo_dev.json \\
        --corpus ../shared/eval/gitbugs/hadoop_corpus.jsonl --qrels ../shared/eval/gitbugs/hadoop_qrels.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: eval_common and the evals

from eval_common import DEFAULT_CACHE, EmbeddingCache, Evidence, Store, build_store
from eval_gitbugs import load as load_gitbugs
from eval_locomo import HEADLINE_CATEGORIES, load_conversations, recall_at

from memstore.read import ranking

SHARES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)  # rare_share; 0.0: only a term one memory holds is rare
COVERAGE = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # 0.0: no keyword-only abstention


class Cached:
    """Keyword hits per (store, query), computed once: only the ranking varies in a sweep."""

    def __init__(self) -> None:
        self.memo: dict[tuple[str, str, int], tuple[list[tuple[int, float]], dict[int, Evidence], bool]] = {}

    def rank(self, store: Store, query: str, qvec: np.ndarray | None, p: ranking.RankingParams,
             own: int | None = None, limit: int = 25) -> list[ranking.Ranked]:
        key = (store.name, query, p.keyword_pool + (own is not None))
        if key not in self.memo:
            self.memo[key] = store.code.hits(query, key[2])
        hits, evidence, named = self.memo[key]
        evidence = self.evidence_for(p, evidence)
        return ranking.rank(qvec, store.matrix, hits, store.kinds, evidence=evidence, named=named,
                            salient=ranking.salient_terms(query), doc_freq=store.code.doc_freq, params=p,
                            limit=limit, exclude=() if own is None else {own}).results

    def evidence_for(self, p: ranking.RankingParams, evidence: dict[int, Evidence]) -> dict[int, Evidence]:
        """The keyword evidence a setting ranks with (a sweep may view it differently)."""
        return evidence


def locomo_table(path: Path, cache: EmbeddingCache, grid: Sequence[ranking.RankingParams], keyword_only: bool,
                 memo: Cached) -> np.ndarray:
    """[setting, conversation, (recall@10 sum, questions, empty mismatched, mismatched)]."""
    convs, _ = load_conversations(path, "turns")
    stores = [build_store(c.name, c.texts, ["fact"] * len(c.texts), cache) for c in convs]
    qvecs = [cache.embed([q.text for q in c.questions]) for c in convs]
    out = np.zeros((len(grid), len(convs), 4))
    for ci, (conv, store, qv) in enumerate(zip(convs, stores, qvecs, strict=True)):
        other = stores[(ci + 1) % len(stores)]
        for q, vec in zip(conv.questions, qv, strict=True):
            if q.category not in HEADLINE_CATEGORIES:
                continue
            for gi, p in enumerate(grid):
                got = memo.rank(store, q.text, None if keyword_only else vec, p)
                out[gi, ci] += (recall_at(got, conv.labels, q.evidence, 10), 1, 0, 0)
                out[gi, ci] += (0, 0, not memo.rank(other, q.text, None if keyword_only else vec, p), 1)
    return out


def locomo_cv(table: np.ndarray, labels: Sequence[str]) -> None:
    def score(rows: np.ndarray) -> tuple[float, float]:
        s = rows.sum(axis=0)
        return s[0] / s[1], s[2] / s[3]

    n = table.shape[1]
    oof = np.zeros(4)
    for held in range(n):
        train = [c for c in range(n) if c != held]
        best = max(range(len(labels)), key=lambda g: sum(score(table[g, train])))
        oof += table[best, held]
        r, a = score(table[best, [held]])
        print(f"  fold {held}: chose {labels[best]}; held-out recall@10 {r:.3f}, abstention {a:.3f}")
    print(f"  LoCoMo out of fold: recall@10 {oof[0] / oof[1]:.4f}, abstention {oof[2] / oof[3]:.4f}")
    for g, label in enumerate(labels):
        r, a = score(table[g])
        print(f"    (all folds) {label}: recall@10 {r:.4f}, abstention {a:.4f}")


def gitbugs_table(corpus: Path, qrels: Path, cache: EmbeddingCache, grid: Sequence[ranking.RankingParams],
                  keyword_only: bool, memo: Cached) -> tuple[np.ndarray, list[int]]:
    """[setting, query (title then title+body), (hit@1, hit@5, hit@10, rr)], and each query's half."""
    reports, rels = load_gitbugs(corpus, qrels)
    row = {r.id: i for i, r in enumerate(reports)}
    store = build_store("gitbugs", [r.memory_text for r in reports], ["problem"] * len(reports), cache)
    qids = [q for q in rels if q in row and any(d in row for d in rels[q])]
    # A cluster is the query and its duplicates; clusters go to halves by the smallest id in them.
    clusters = sorted({min([q, *rels[q]]) for q in qids})
    half_of = {c: i % 2 for i, c in enumerate(clusters)}
    rows: list[tuple[int, str, set[int]]] = []
    halves: list[int] = []
    for text_of in (lambda r: r.title.strip(), lambda r: r.memory_text):
        for q in qids:
            rows.append((row[q], text_of(reports[row[q]]), {row[d] for d in rels[q] if d in row}))
            halves.append(half_of[min([q, *rels[q]])])
    qvecs = cache.embed([t for _, t, _ in rows])
    out = np.zeros((len(grid), len(rows), 4))
    for qi, ((own, text, rel), vec) in enumerate(zip(rows, qvecs, strict=True)):
        for gi, p in enumerate(grid):
            got = memo.rank(store, text, None if keyword_only else vec, p, own=own, limit=50)
            first = next((pos for pos, r in enumerate(got) if r.index in rel), None)
            if first is not None:
                out[gi, qi] = (first < 1, first < 5, first < 10, 1.0 / (first + 1))
    return out, halves


def halves_cv(table: np.ndarray, halves: list[int], labels: Sequence[str], name: str = "GitBugs") -> None:
    """Tune on one half (objective MRR), report the other, both ways. ``table``'s last axis is
    (hit@1, hit@5, hit@10, rr[, answer size])."""
    h = np.asarray(halves)
    sized = table.shape[-1] > 4

    def line(m: np.ndarray, digits: int) -> str:
        size = f", answer size {m[4]:.2f}" if sized else ""
        return (f"hit@1 {m[0]:.{digits}f}, hit@5 {m[1]:.{digits}f}, hit@10 {m[2]:.{digits}f}, "
                f"MRR {m[3]:.{digits}f}{size}")

    oof = np.zeros(table.shape[-1])
    for tune in (0, 1):
        best = max(range(len(labels)), key=lambda g: table[g, h == tune, 3].mean())
        other = table[best, h != tune]
        oof += other.sum(axis=0)
        print(f"  tuned on half {tune}: chose {labels[best]}; other half {line(other.mean(axis=0), 3)}")
    print(f"  {name} out of fold: {line(oof / len(halves), 4)}")
    for g, label in enumerate(labels):
        print(f"    (all) {label}: {line(table[g].mean(axis=0), 4)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--locomo", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--qrels", type=Path, required=True)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args()
    cache = EmbeddingCache(args.cache_dir)
    base = ranking.RankingParams()
    memo = Cached()
    sweeps: list[tuple[str, bool, list[tuple[str, ranking.RankingParams]]]] = []
    sweeps.append(("keyword_only_coverage x rare_share, keyword only", True,
                   [(f"coverage={c} rare_share={v}", dataclasses.replace(base, keyword_only_coverage=c, rare_share=v))
                    for c in COVERAGE for v in SHARES]))
    for title, kw_only, grid in sweeps:
        labels = [label for label, _ in grid]
        params = [p for _, p in grid]
        print(f"## {title}", flush=True)
        locomo_cv(locomo_table(args.locomo, cache, params, kw_only, memo), labels)
        table, halves = gitbugs_table(args.corpus, args.qrels, cache, params, kw_only, memo)
        halves_cv(table, halves, labels)



if __name__ == "__main__":
    main()
