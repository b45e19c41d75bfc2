"""Scratch: fast numpy sweeps over the dense score matrices from research_locomo.py."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np

CACHE = Path(__file__).resolve().parent / ".cache"


def load(unit: str = "turns") -> list[dict]:
    return pickle.loads((CACHE / f"locomo_{unit}_scores.pkl").read_bytes())


def recall(order: np.ndarray, labels: list[list[str]], ev: list[str], k: int) -> float:
    found: set[str] = set()
    for i in order[:k]:
        found.update(labels[i])
    return sum(e in found for e in ev) / len(ev)


Scorer = Callable[[dict, int, bool], np.ndarray | None]


def run(data: list[dict], scorer: Scorer, ks: tuple[int, ...] = (5, 10, 25), cats=(1, 2, 3, 4)) -> dict:
    rs: dict[int, list[float]] = {k: [] for k in ks}
    percat: dict[tuple[int, int], list[float]] = {}
    empty = tot = 0
    for d in data:
        for qi, c in enumerate(d["cats"]):
            if c not in cats:
                continue
            order = scorer(d, qi, True)
            for k in ks:
                r = 0.0 if order is None or len(order) == 0 else recall(order, d["labels"], d["evidence"][qi], k)
                rs[k].append(r)
                percat.setdefault((k, c), []).append(r)
            o = scorer(d, qi, False)
            tot += 1
            empty += o is None or len(o) == 0
    out = {f"R@{k}": round(float(np.mean(v)), 4) for k, v in rs.items()}
    out["abst"] = round(empty / tot, 4)
    out["cat10"] = {c: round(float(np.mean(percat[(10, c)])), 3) for c in cats}
    return out
