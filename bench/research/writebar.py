"""The bar above which ``write`` shows an existing memory as similar to the one being written.

A write answers with the closest existing memories so the agent can judge redundancy
(reinforce with a vote) or contradiction (supersede, or link ``contradicts``) itself. The bar
trades two things, measured on GitBugs (Hadoop duplicate reports stored as ``problem``
memories, title + body as the drafted memory):

- shown: the report has a duplicate in the store; is the duplicate at or above the bar?
- false alarm: the same report written into a store holding none of its duplicates; does any
  other memory reach the bar (noise the agent must read and dismiss)?

The bar maximises shown - false alarm on one half of the duplicate clusters and is reported on
the other half (two-fold, clusters never split), then chosen on all of them for the default.

    python bench/research/writebar.py --data-dir ../shared/eval
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: eval_common and the evals

from eval_common import DEFAULT_CACHE, EmbeddingCache, cluster_halves, log
from eval_gitbugs import load

GRID = [round(x, 2) for x in np.arange(0.40, 0.96, 0.01)]

# Facts that contradict each other (same subject, different claim), and facts on neighbouring
# subjects that do not, written for this check: the first must clear the bar, the second not.
CONTRADICTING = [
    ("CI runs pytest serially", "CI uses pytest-xdist"),
    ("CI runs the test suite with pytest serially, one test at a time.",
     "CI runs the test suite with pytest-xdist (pytest -n auto), in parallel across workers."),
    ("The database driver is asyncpg; connection URLs use postgresql+asyncpg://.",
     "The database driver is psycopg 3; connection URLs use postgresql+psycopg://."),
    ("The API is deployed to AWS Lambda behind API Gateway.", "The API runs as a container on ECS Fargate."),
    ("Python 3.10 is the oldest version the package supports.", "The package supports Python 3.8 and newer."),
]
UNRELATED = [
    ("CI uses pytest-xdist", "Tests live under tests/ and use pytest fixtures from conftest.py"),
    ("The database driver is psycopg 3.", "Migrations are written with alembic and live in migrations/."),
    ("The API runs as a container on ECS Fargate.", "The frontend is built with Vite and deployed to a CDN."),
]


def rates(best_dup: np.ndarray, best_other: np.ndarray, bar: float) -> tuple[float, float]:
    return float(np.mean(best_dup >= bar)), float(np.mean(best_other >= bar))


def choose(best_dup: np.ndarray, best_other: np.ndarray) -> float:
    return max(GRID, key=lambda b: (rates(best_dup, best_other, b)[0] - rates(best_dup, best_other, b)[1], -b))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    a = ap.parse_args(argv)
    gb = a.data_dir / "gitbugs"
    reports, rels = load(gb / "hadoop_corpus.jsonl", gb / "hadoop_qrels.json")
    pos = {r.id: i for i, r in enumerate(reports)}
    vecs = EmbeddingCache(a.cache_dir).embed([r.memory_text for r in reports])
    qids = [q for q in rels if q in pos and any(d in pos for d in rels[q])]
    sims = vecs[[pos[q] for q in qids]] @ vecs.T
    best_dup, best_other = [], []
    for row, q in zip(sims, qids, strict=True):
        cluster = {q, *rels[q]}
        dups = [pos[d] for d in rels[q] if d in pos]
        best_dup.append(max(row[i] for i in dups))
        mask = np.ones(len(reports), dtype=bool)
        mask[[pos[x] for x in cluster if x in pos]] = False
        best_other.append(float(row[mask].max()))
    bd, bo = np.asarray(best_dup), np.asarray(best_other)
    half = cluster_halves(qids, rels)
    folds = []
    for k in (0, 1):
        train = np.asarray([half[q] != k for q in qids])
        bar = choose(bd[train], bo[train])
        shown, alarm = rates(bd[~train], bo[~train], bar)
        folds.append({"tuned_on_half": 1 - k, "bar": bar, "shown": round(shown, 3), "false_alarm": round(alarm, 3)})
    bar = choose(bd, bo)
    shown, alarm = rates(bd, bo, bar)
    out = {"queries": len(qids), "out_of_fold": folds, "all": {"bar": bar, "shown": round(shown, 3),
                                                               "false_alarm": round(alarm, 3)},
           "duplicate_cosine_p10_p50_p90": [round(float(np.percentile(bd, p)), 3) for p in (10, 50, 90)],
           "best_other_cosine_p10_p50_p90": [round(float(np.percentile(bo, p)), 3) for p in (10, 50, 90)]}
    for fixed in (0.6, 0.65, 0.7, 0.75, 0.8, 0.95):
        s, f = rates(bd, bo, fixed)
        out[f"at_{fixed}"] = {"shown": round(s, 3), "false_alarm": round(f, 3)}
    pairs = [a for pair in CONTRADICTING + UNRELATED for a in pair]
    pv = EmbeddingCache(a.cache_dir).embed(pairs)
    cos = [round(float(pv[i] @ pv[i + 1]), 3) for i in range(0, len(pairs), 2)]
    out["contradicting_pairs_cosine"] = cos[:len(CONTRADICTING)]
    out["neighbouring_subject_pairs_cosine"] = cos[len(CONTRADICTING):]
    log(json.dumps(out))
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
