"""LoCoMo retrieval benchmark (protocol: ../shared/eval/README.md, results: bench/RESULTS.md).

One isolated store per conversation; each turn (or each observation, ``--unit observations``)
is one memory. Questions are asked verbatim. recall@k = fraction of a question's evidence
dia_ids found in the top k, averaged over questions, per category and over categories 1-4.
Abstention = fraction of *mismatched* queries (conversation i's questions against conversation
i+1's store) answered with zero results. Baselines: BM25 alone, vector top-k alone.

    python bench/eval_locomo.py --data ../shared/eval/locomo/locomo_dev.json
    python bench/eval_locomo.py --data ../shared/eval/locomo/locomo_dev.json --keyword-only  # no model

The last stdout line is one JSON object (see ``main``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
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
    vector_retriever,
)

from memstore.index.embedder import BACKEND_ENV, BACKENDS, get_embedder
from memstore.read import ranking

HEADLINE_CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}

# Evidence ids are "D<session>:<turn>". The malformed ones seen in the data and their fate:
#   'D8:6; D9:17', 'D1:3 D1:5'  -> split on ';', ',' and whitespace -> D8:6, D9:17 / D1:3, D1:5
#   'D:11:26'                   -> stray colon after D dropped      -> D11:26
#   'D30:05'                    -> numbers parsed as ints           -> D30:5
#   'D' (or anything else unparsable)                               -> dropped
# An id that parses but names no turn of the conversation (e.g. 'D10:19' in conv-42) is dropped
# too: no retriever could find it. A question left with no evidence is not scored.
_EVIDENCE_RE = re.compile(r"D:?(\d+):(\d+)")


def normalize_dia_ids(raw: object) -> tuple[list[str], int]:
    """Parse one evidence entry (string or list) into canonical ids; also return #pieces dropped."""
    pieces: list[str] = []
    if isinstance(raw, str):
        pieces = [p for p in re.split(r"[;,\s]+", raw.strip()) if p]
    elif isinstance(raw, list | tuple):
        for item in raw:
            sub, _ = normalize_dia_ids(item)
            pieces.extend(sub)
    out: list[str] = []
    dropped = 0
    for p in pieces:
        m = _EVIDENCE_RE.fullmatch(p)
        if m:
            out.append(f"D{int(m.group(1))}:{int(m.group(2))}")
        else:
            dropped += 1
    return out, dropped


@dataclass
class Question:
    text: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    name: str
    texts: list[str]
    labels: list[list[str]]  # dia_ids each memory covers
    questions: list[Question]


def _sessions(conv: dict) -> list[tuple[int, str, list[dict]]]:
    out = []
    for key, turns in conv.items():
        m = re.fullmatch(r"session_(\d+)", key)
        if m and isinstance(turns, list):
            out.append((int(m.group(1)), str(conv.get(f"{key}_date_time", "")), turns))
    return sorted(out)


def load_conversations(path: Path, unit: str) -> tuple[list[Conversation], Counter]:
    data = json.loads(path.read_text())
    stats: Counter = Counter()
    convs: list[Conversation] = []
    for ci, sample in enumerate(data):
        conv = sample["conversation"]
        name = str(sample.get("sample_id", f"conv-{ci}"))
        sessions = _sessions(conv)
        dates = {s: d for s, d, _ in sessions}
        turn_ids: set[str] = set()
        texts: list[str] = []
        labels: list[list[str]] = []
        for s, date, turns in sessions:
            for turn in turns:
                ids, _ = normalize_dia_ids(turn.get("dia_id", ""))
                turn_ids.update(ids)
                if unit == "turns":
                    text = f"({date}) {turn['speaker']}: {turn['text']}"
                    if turn.get("blip_caption"):
                        text += f" [shares {turn['blip_caption']}]"
                    texts.append(text)
                    labels.append(ids)
            del s
        if unit == "observations":
            for key, per_speaker in sample.get("observation", {}).items():
                m = re.fullmatch(r"session_(\d+)_observation", key)
                date = dates.get(int(m.group(1)), "") if m else ""
                for facts in per_speaker.values():
                    for fact in facts:
                        ids, _ = normalize_dia_ids(fact[1] if len(fact) > 1 else "")
                        texts.append(f"({date}) {fact[0]}" if date else str(fact[0]))
                        labels.append([i for i in ids if i in turn_ids])
        questions: list[Question] = []
        for qa in sample.get("qa", []):
            ev: list[str] = []
            for raw in qa.get("evidence", []):
                ids, dropped = normalize_dia_ids(raw)
                stats["evidence_unparsable"] += dropped
                for i in ids:
                    if i in turn_ids:
                        ev.append(i)
                    else:
                        stats["evidence_unknown_turn"] += 1
            ev = list(dict.fromkeys(ev))
            if not ev:
                stats["questions_without_evidence"] += 1
                continue
            questions.append(Question(str(qa["question"]), int(qa["category"]), ev))
        convs.append(Conversation(name, texts, labels, questions))
    return convs, stats


def recall_at(ranked: list[ranking.Ranked], labels: list[list[str]], evidence: list[str], k: int) -> float:
    found: set[str] = set()
    for r in ranked[:k]:
        found.update(labels[r.index])
    return sum(1 for e in evidence if e in found) / len(evidence)


@dataclass
class RunResult:
    recall: dict[int, dict[int, float]]  # k -> category -> mean recall
    overall: dict[int, float]  # k -> mean over categories 1-4 questions
    abstention: float
    latencies: list[float]
    n_questions: dict[int, int]


def evaluate(
    convs: list[Conversation],
    stores: list[Store],
    qvecs: list[np.ndarray],
    retriever: Retriever,
    ks: list[int],
    *,
    mismatched: bool = True,
    live_embed: bool = False,
) -> RunResult:
    per_cat: dict[int, dict[int, list[float]]] = {k: defaultdict(list) for k in ks}
    latencies: list[float] = []
    embedder = get_embedder() if live_embed else None
    for conv, store, qv in zip(convs, stores, qvecs, strict=True):
        for q, vec in zip(conv.questions, qv, strict=True):
            t0 = time.perf_counter()
            if embedder is not None:
                # Latency includes embedding the query, as a real read must.
                vec = embedder.encode([q.text])[0]
            ranked = retriever(store, q.text, vec)
            latencies.append(time.perf_counter() - t0)
            for k in ks:
                per_cat[k][q.category].append(recall_at(ranked, conv.labels, q.evidence, k))
    empty = total = 0
    if mismatched and len(stores) > 1:
        for i, (conv, qv) in enumerate(zip(convs, qvecs, strict=True)):
            other = stores[(i + 1) % len(stores)]
            for q, vec in zip(conv.questions, qv, strict=True):
                if q.category not in HEADLINE_CATEGORIES:
                    continue
                total += 1
                empty += not retriever(other, q.text, vec)
    recall = {k: {c: float(np.mean(v)) for c, v in sorted(per_cat[k].items())} for k in ks}
    overall = {k: float(np.mean([x for c in HEADLINE_CATEGORIES for x in per_cat[k].get(c, [])])) for k in ks}
    n_q = {c: len(v) for c, v in per_cat[ks[0]].items()}
    return RunResult(recall, overall, empty / total if total else 0.0, latencies, n_q)


def summary(res: RunResult, ks: list[int]) -> dict:
    out: dict = {f"recall@{k}": round(res.overall[k], 4) for k in ks}
    out["abstention"] = round(res.abstention, 4)
    return out


def main(argv: list[str] | None = None, retriever: Retriever | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--unit", choices=("turns", "observations"), default="turns")
    ap.add_argument("--k", type=int, nargs="+", default=[5, 10, 25])
    ap.add_argument("--mode", choices=("targeted", "ambient"), default="targeted")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--embed-backend", choices=BACKENDS, help=f"embedder backend (default: ${BACKEND_ENV} or onnx)")
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--engine", choices=("pipeline", "ranking"), default="pipeline",
                    help="pipeline: memstore.read over real on-disk stores (the headline); ranking: the pure "
                    "ranking functions over in-memory arrays (fast, for parameter sweeps)")
    ap.add_argument("--keyword-only", action="store_true",
                    help="as a read without the embedding model: the ranking functions with no query vector "
                    "(implies --engine ranking)")
    args = ap.parse_args(argv)
    if args.keyword_only:
        args.engine = "ranking"
    ks = sorted(set(args.k) | {5, 10, 25})
    if args.embed_backend:
        os.environ[BACKEND_ENV] = args.embed_backend  # read when the embedder settles its backend
    log(f"embedder: {get_embedder().model_id}")

    t_start = time.perf_counter()
    convs, stats = load_conversations(args.data, args.unit)
    log(
        f"{len(convs)} conversations, {sum(len(c.texts) for c in convs)} memories ({args.unit}), "
        f"{sum(len(c.questions) for c in convs)} questions; evidence cleanup: {dict(stats)}"
    )
    cache = EmbeddingCache(args.cache_dir)
    stores = [build_store(c.name, c.texts, ["fact"] * len(c.texts), cache) for c in convs]
    qvecs = [cache.embed([q.text for q in c.questions]) for c in convs]

    pipeline = PipelineStores(cache) if retriever is None and args.engine == "pipeline" else None
    if retriever is not None:
        main_retriever = retriever
    elif pipeline is not None:
        for s in stores:  # write the stores and build their indexes before timing any read
            pipeline.retriever(args.mode)(s, "warm up", np.zeros(1))
        main_retriever = pipeline.retriever(args.mode, limit=max(ks))
    else:
        main_retriever = ranking_retriever(ranking.RankingParams(), mode=args.mode, keyword_only=args.keyword_only)
    res = evaluate(convs, stores, qvecs, main_retriever, ks, live_embed=pipeline is None and not args.keyword_only)
    if pipeline is not None:
        pipeline.close()
    baselines = {}
    if not args.no_baselines:
        for bname, br in (("bm25", bm25_retriever()), ("vector", vector_retriever())):
            baselines[bname] = summary(evaluate(convs, stores, qvecs, br, ks), ks)

    header = "category".ljust(14) + "".join(f"R@{k}".rjust(8) for k in ks) + "      n"
    log(header)
    for c in sorted(res.n_questions):
        name = f"{c} {CATEGORY_NAMES.get(c, '')}"
        log(name.ljust(14) + "".join(fmt(res.recall[k][c]).rjust(8) for k in ks) + f"{res.n_questions[c]:7d}")
    log("cat 1-4".ljust(14) + "".join(fmt(res.overall[k]).rjust(8) for k in ks))
    log(f"abstention on mismatched queries: {fmt(res.abstention)}")
    for bname, b in baselines.items():
        log(f"baseline {bname}: " + ", ".join(f"{k}={v}" for k, v in b.items()))
    log(f"read latency p50 {percentile_ms(res.latencies, 50)} ms, p95 {percentile_ms(res.latencies, 95)} ms")
    log(f"total {time.perf_counter() - t_start:.1f}s")

    out = {f"recall@{k}": round(res.overall[k], 4) for k in (5, 10, 25)}
    out["abstention"] = round(res.abstention, 4)
    out["p50_ms"] = percentile_ms(res.latencies, 50)
    out["p95_ms"] = percentile_ms(res.latencies, 95)
    out["per_category"] = {
        str(c): {f"recall@{k}": round(res.recall[k][c], 4) for k in ks} | {"n": res.n_questions[c]}
        for c in sorted(res.n_questions)
    }
    out["baselines"] = baselines
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
