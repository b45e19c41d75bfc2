"""Scratch: precompute dense score matrices for LoCoMo so fusion variants can be swept fast.

    python bench/research_locomo.py --data ../shared/eval/locomo/locomo_dev.json
writes bench/.cache/locomo_<unit>_scores.npz-like pickle used by the sweep functions below.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_common import DEFAULT_CACHE, EmbeddingCache, build_store
from eval_locomo import load_conversations

from memstore.index import terms
from memstore.read import ranking


def dense_bm25(store, query: str) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = np.zeros(len(store.texts), dtype=np.float32)
    for i, s in store.keyword.search(terms.keyword_terms(query), len(store.texts)):
        out[i] = s
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--unit", default="turns")
    args = ap.parse_args()
    convs, _ = load_conversations(args.data, args.unit)
    cache = EmbeddingCache(DEFAULT_CACHE)
    stores = [build_store(c.name, c.texts, ["fact"] * len(c.texts), cache) for c in convs]
    data = []
    for i, (c, st) in enumerate(zip(convs, stores, strict=True)):
        other = stores[(i + 1) % len(stores)]
        qv = cache.embed([q.text for q in c.questions])
        salient = [ranking.salient_terms(q.text) for q in c.questions]
        data.append(
            {
                "name": c.name,
                "labels": c.labels,
                "cats": [q.category for q in c.questions],
                "evidence": [q.evidence for q in c.questions],
                "questions": [q.text for q in c.questions],
                "texts": c.texts,
                "qv": qv,
                "X": st.matrix,
                "Xo": other.matrix,
                "sim": qv @ st.matrix.T,
                "simo": qv @ other.matrix.T,
                "bm": np.stack([dense_bm25(st, q.text) for q in c.questions]),
                "bmo": np.stack([dense_bm25(other, q.text) for q in c.questions]),
                "df": [[st.code.doc_freq(t) for t in s] for s in salient],
                "dfo": [[other.code.doc_freq(t) for t in s] for s in salient],
                "salient": salient,
            }
        )
    out = DEFAULT_CACHE / f"locomo_{args.unit}_scores.pkl"
    out.write_bytes(pickle.dumps(data))
    print(out)


if __name__ == "__main__":
    main()
