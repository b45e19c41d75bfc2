"""Cross-validated choice of the relative cut (``RankingParams.relative_floor``, ``relative_gap``).

Two rules cut an answer relative to its best score: results below a fraction ``r`` of it
(grid 0..0.9 by 0.05), and everything after a drop between neighbours of at least ``g`` times
it (an elbow; grid 0.1..0.5, or off). A precision rule shrinks answers; recall measured on the
ranked list can only fall. The pair is chosen by the *method* "the smallest answers the
training data allows without losing recall": on the training folds, the (r, g) with the
smallest mean answer whose recall@10 (LoCoMo) / hit@10 (GitBugs, mean of title and
title+body queries) stays within ``TOLERANCE`` of no cut. ``TOLERANCE`` is the product's stated price (half a point),
not a tuned number. Folds: leave one LoCoMo conversation out (five folds); GitBugs duplicate
clusters split in two halves (tune on one, report the other, both ways). Every figure
printed is out of fold: each held-out part is scored with the ``r`` its training part chose.

The cut is a score threshold, so it removes a suffix of the ranked list: lists are ranked
once with no cut (the product's ranking functions, ``ranking.rank``) and cut afterwards.

    python bench/research/cv.py --locomo ../shared/eval/locomo/locomo_dev.json \\
        --corpus ../shared/eval/gitbugs/hadoop_corpus.jsonl --qrels ../shared/eval/gitbugs/hadoop_qrels.json

The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: eval_common and the evals

from eval_common import DEFAULT_CACHE, EmbeddingCache, build_store, cluster_halves, log, ranking_retriever

from memstore.read import ranking

RATIOS = tuple(round(0.05 * i, 2) for i in range(19))
GAPS = (1.0, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1)  # 1.0: off (no drop exceeds the best score)
GRID = tuple((r, g) for r in RATIOS for g in GAPS)
NO_CUT = (0.0, 1.0)
SHOWN = tuple(rule for rule in GRID if rule[1] == 1.0 or rule[0] == 0.0)  # each rule alone
TOLERANCE = 0.005
ANSWER = 10  # the product's targeted limit: what an agent is handed


def cut(scores: Sequence[float], rule: tuple[float, float]) -> int:
    """How many of a ranked list's results (scores best first) survive the cut (as
    ``ranking.relative_cut`` makes it)."""
    r, g = rule
    if not scores:
        return 0
    bar = r * scores[0]
    n = 1
    while n < len(scores) and scores[n] >= bar and scores[n - 1] - scores[n] < g * scores[0]:
        n += 1
    return n


# -- LoCoMo -----------------------------------------------------------------------------------
def locomo_lists(path: Path, cache: EmbeddingCache, params: ranking.RankingParams) -> list[list[dict]]:
    """Per conversation, per headline question: the ranked evidence labels and scores."""
    import eval_locomo as el

    convs, _ = el.load_conversations(path, "turns")
    stores = [build_store(c.name, c.texts, ["fact"] * len(c.texts), cache) for c in convs]
    run = ranking_retriever(params, limit=25)
    out: list[list[dict]] = []
    for i, (conv, store) in enumerate(zip(convs, stores, strict=True)):
        qvecs = cache.embed([q.text for q in conv.questions])
        other = stores[(i + 1) % len(stores)]
        rows: list[dict] = []
        for q, vec in zip(conv.questions, qvecs, strict=True):
            if q.category not in el.HEADLINE_CATEGORIES:
                continue
            ranked = run(store, q.text, vec)
            rows.append({"labels": [conv.labels[r.index] for r in ranked], "scores": [r.score for r in ranked],
                         "evidence": q.evidence, "mismatched_empty": not run(other, q.text, vec)})
        out.append(rows)
    return out


def locomo_metrics(rows: list[dict], r: tuple[float, float]) -> dict[str, float]:
    rec: dict[int, list[float]] = {5: [], 10: [], 25: []}
    size: list[int] = []
    prec: list[float] = []
    for q in rows:
        n = cut(q["scores"], r)
        ev = set(q["evidence"])
        for k in rec:
            found = {lab for labels in q["labels"][: min(k, n)] for lab in labels}
            rec[k].append(len(ev & found) / len(ev))
        answer = q["labels"][: min(ANSWER, n)]
        size.append(len(answer))
        if answer:
            prec.append(sum(1 for labels in answer if ev & set(labels)) / len(answer))
    out = {f"recall@{k}": float(np.mean(v)) for k, v in rec.items()}
    out["answer_size"] = float(np.mean(size))
    out["answer_precision"] = float(np.mean(prec)) if prec else 0.0
    out["abstention"] = float(np.mean([q["mismatched_empty"] for q in rows]))
    return out


# -- GitBugs ----------------------------------------------------------------------------------
def gitbugs_lists(corpus: Path, qrels: Path, cache: EmbeddingCache,
                  params: ranking.RankingParams) -> tuple[list[dict], list[int]]:
    """Per query (title, title+body): relevance of the ranked list, scores, and its cluster."""
    import eval_gitbugs as eg

    reports, rels = eg.load(corpus, qrels)
    row = {r.id: i for i, r in enumerate(reports)}
    store = build_store("gitbugs", [r.memory_text for r in reports], ["problem"] * len(reports), cache)
    qids = [q for q in rels if q in row and any(d in row for d in rels[q])]
    half = cluster_halves(qids, rels)
    run = ranking_retriever(params, limit=50)
    out: list[dict] = []
    halves: list[int] = []
    for qname, text_of in (("title", lambda r: r.title.strip()), ("title_body", lambda r: r.memory_text)):
        texts = [text_of(reports[row[q]]) for q in qids]
        qvecs = cache.embed(texts)
        for q, text, vec in zip(qids, texts, qvecs, strict=True):
            rel = {row[d] for d in rels[q] if d in row}
            ranked = run(store, text, vec, row[q])
            ranked = [x for x in ranked if x.index != row[q]]
            out.append({"query": qname, "rel": [x.index in rel for x in ranked], "scores": [x.score for x in ranked]})
            halves.append(half[q])
    return out, halves


def gitbugs_metrics(rows: list[dict], r: tuple[float, float]) -> dict[str, float]:
    hits = {1: [], 5: [], 10: []}
    rr: list[float] = []
    size: list[int] = []
    for q in rows:
        n = cut(q["scores"], r)
        rel = q["rel"][:n]
        first = next((i for i, x in enumerate(rel) if x), None)
        for k in hits:
            hits[k].append(first is not None and first < k)
        rr.append(0.0 if first is None else 1.0 / (first + 1))
        size.append(min(n, ANSWER))
    out = {f"hit@{k}": float(np.mean(v)) for k, v in hits.items()}
    out["mrr"] = float(np.mean(rr))
    out["answer_size"] = float(np.mean(size))
    return out


# -- the rule and the folds -------------------------------------------------------------------
def choose(objective: dict[tuple[float, float], float], size: dict[tuple[float, float], float]) -> tuple[float, float]:
    """The rule with the smallest training answers whose objective stays within TOLERANCE of
    no cut (ties: the milder rule)."""
    base = objective[NO_CUT]
    ok = [rule for rule in GRID if objective[rule] >= base - TOLERANCE]
    return min(ok, key=lambda rule: (round(size[rule], 6), rule[0], -rule[1]))


def locomo_choice(rows: list[dict]) -> tuple[float, float]:
    m = {rule: locomo_metrics(rows, rule) for rule in GRID}
    return choose({k: v["recall@10"] for k, v in m.items()}, {k: v["answer_size"] for k, v in m.items()})


def gitbugs_choice(rows: list[dict]) -> tuple[float, float]:
    m = {rule: [gitbugs_metrics([q for q in rows if q["query"] == name], rule) for name in ("title", "title_body")]
         for rule in GRID}
    return choose({k: float(np.mean([x["hit@10"] for x in v])) for k, v in m.items()},
                  {k: float(np.mean([x["answer_size"] for x in v])) for k, v in m.items()})


def locomo_cv(convs: list[list[dict]]) -> tuple[list[tuple[float, float]], dict[str, float]]:
    chosen: list[tuple[float, float]] = []
    held: list[dict] = []
    for i in range(len(convs)):
        train = [q for j, c in enumerate(convs) if j != i for q in c]
        r = locomo_choice(train)
        chosen.append(r)
        held += [dict(q, r=r) for q in convs[i]]
    # Out of fold: every question scored with the cut chosen without its conversation.
    parts = [locomo_metrics([q], q["r"]) for q in held]
    return chosen, {k: float(np.mean([p[k] for p in parts if k != "answer_precision" or p["answer_size"]]))
                    for k in parts[0]}


def gitbugs_cv(rows: list[dict], halves: list[int]) -> tuple[list[tuple[float, float]], dict[str, dict[str, float]]]:
    chosen: list[tuple[float, float]] = []
    out: dict[str, dict[str, list[float]]] = {}
    for test in (0, 1):
        train = [q for q, h in zip(rows, halves, strict=True) if h != test]
        held = [q for q, h in zip(rows, halves, strict=True) if h == test]
        r = gitbugs_choice(train)
        chosen.append(r)
        for name in ("title", "title_body"):
            sub = [q for q in held if q["query"] == name]
            for k, v in gitbugs_metrics(sub, r).items():
                out.setdefault(name, {}).setdefault(k, []).append(v * len(sub))
            out[name].setdefault("n", []).append(len(sub))
    return chosen, {name: {k: round(sum(v) / sum(m["n"]), 4) for k, v in m.items() if k != "n"}
                    for name, m in out.items()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--locomo", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--qrels", type=Path, required=True)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args(argv)
    cache = EmbeddingCache(args.cache_dir)
    params = dataclasses.replace(ranking.RankingParams(), relative_floor=0.0, relative_gap=1.0)

    convs = locomo_lists(args.locomo, cache, params)
    allq = [q for c in convs for q in c]
    log("LoCoMo (all questions, in sample) by cut:")
    for g in SHOWN:
        m = locomo_metrics(allq, g)
        log(f"  r={g[0]:.2f} g={g[1]:.2f} " + " ".join(f"{k}={v:.3f}" for k, v in m.items()))
    lo_chosen, lo_oof = locomo_cv(convs)
    log(f"LoCoMo leave-one-conversation-out: chosen r per fold {lo_chosen}")
    log(f"  out of fold: {json.dumps({k: round(v, 4) for k, v in lo_oof.items()})}")
    log(f"  no cut:      {json.dumps({k: round(v, 4) for k, v in locomo_metrics(allq, NO_CUT).items()})}")

    rows, halves = gitbugs_lists(args.corpus, args.qrels, cache, params)
    log("GitBugs (all queries, in sample) by cut:")
    for g in SHOWN:
        m = {name: gitbugs_metrics([q for q in rows if q["query"] == name], g) for name in ("title", "title_body")}
        log(f"  r={g[0]:.2f} g={g[1]:.2f} " + " | ".join(name + " " + " ".join(f"{k}={v:.3f}" for k, v in x.items())
                                         for name, x in m.items()))
    gb_chosen, gb_oof = gitbugs_cv(rows, halves)
    log(f"GitBugs cluster halves: chosen r (tested on half 0, half 1) {gb_chosen}")
    log(f"  out of fold: {json.dumps(gb_oof)}")
    no_cut = {name: {k: round(v, 4) for k, v in gitbugs_metrics([q for q in rows if q["query"] == name],
                                                                   NO_CUT).items()}
              for name in ("title", "title_body")}
    log(f"  no cut:      {json.dumps(no_cut)}")

    # The product's constant: the rule on each whole data set; a cut must hold on every one.
    lo, gb = locomo_choice(allq), gitbugs_choice(rows)
    final = (min(lo[0], gb[0]), max(lo[1], gb[1]))
    log(f"whole LoCoMo chooses {lo}, whole GitBugs {gb}: the product takes the milder of each, {final}")
    log(f"  LoCoMo at it: {json.dumps({k: round(v, 4) for k, v in locomo_metrics(allq, final).items()})}")
    for name in ("title", "title_body"):
        at = gitbugs_metrics([q for q in rows if q["query"] == name], final)
        log(f"  GitBugs {name} at it: {json.dumps({k: round(v, 4) for k, v in at.items()})}")
    out = {"relative_floor": final[0], "relative_gap": final[1], "locomo_folds": lo_chosen,
           "locomo_oof": {k: round(v, 4) for k, v in lo_oof.items()},
           "gitbugs_folds": gb_chosen, "gitbugs_oof": gb_oof, "gitbugs_no_cut": no_cut}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
