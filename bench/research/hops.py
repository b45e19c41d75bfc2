"""The association chain, measured: what semantic hops add, at which bars, out of fold.

Question: from the best ``hop_seeds`` candidates, memstore follows "the most similar other
memory" for up to two hops (``RankingParams.hop_bars``). At the old bars (0.85, 0.90) a hop
reaches only restatements (the duplicate gate is 0.95). Do lower bars reach *related* memories
that pay for themselves, and how should a hop's score decay?

Protocol (the product's ranking functions, ``ranking.rank``, as bench/research/cv.py runs them):
- Configurations: no chain; bars (b, b + 0.1) for b in 0.35 .. 0.65, and the old (0.85, 0.90),
  each with the hop's score its parent's times the hop similarity (decay "sim", the old rule) or
  times a constant 0.7 or 0.8 (a hop's score must clear the relative cut: 45% of the best, no
  drop of 40% of it between neighbours).
- Chain cases (bench/data/chain_cases.yaml): a question, the memory that answers it, and a
  related memory the agent needs too, read against one store of every precision-store memory
  (tests/data/precision_cases.yaml) plus every case's pair. A case counts only when the related
  memory is not in the top 10 without the chain ("reachable only through a related memory");
  the figure is how many of those the chain brings into the top 10, and the mean answer size.
- LoCoMo (turns, targeted, limit 25): recall@10 per conversation and abstention on the
  mismatched questions. Out of fold: leave one conversation out; on the rest choose the
  configuration with the best recall@10 whose abstention is within 0.005 of no chain; report
  the held-out conversation with that choice, beside no chain.
- GitBugs (title queries, limit 50): MRR and hit@10, each half of the duplicate clusters.
- Identifiers (whole names): hit@5.

    python bench/research/hops.py --data-dir ../shared/eval

Prints one table row per configuration and the out-of-fold choice; the last line is JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: eval_common and the evals

from eval_common import DEFAULT_CACHE, EmbeddingCache, build_store, cluster_halves, log, ranking_retriever
from eval_gitbugs import evaluate as gitbugs_evaluate
from eval_gitbugs import load as gitbugs_load
from eval_identifiers import WHOLE_NAMES
from eval_identifiers import evaluate as ident_evaluate
from eval_identifiers import load as ident_load
from eval_locomo import evaluate as locomo_evaluate
from eval_locomo import load_conversations

from memstore.read import ranking

ROOT = Path(__file__).resolve().parents[2]
BASE = ranking.RankingParams()
BARS = (0.35, 0.45, 0.55, 0.65, 0.85)
DECAYS = (0.0, 0.7, 0.8)
ABSTENTION_SLACK = 0.005


def configs() -> list[tuple[str, ranking.RankingParams]]:
    out = [("no chain", dataclasses.replace(BASE, semantic_hops=0))]
    for b in BARS:
        for d in DECAYS:
            bars = (b, min(round(b + 0.1, 2), 0.94)) if b < 0.85 else (0.85, 0.90)
            out.append((f"bars {bars} decay {d or 'sim'}", dataclasses.replace(BASE, hop_bars=bars, hop_decay=d)))
    return out


def chain_store(cache: EmbeddingCache) -> tuple[object, list[tuple[str, str, int, int]]]:
    prec = yaml.safe_load((ROOT / "tests" / "data" / "precision_cases.yaml").read_text(encoding="utf-8"))
    cases = yaml.safe_load((ROOT / "bench" / "data" / "chain_cases.yaml").read_text(encoding="utf-8"))["cases"]
    texts = [m["text"] for mems in prec["stores"].values() for m in mems]
    kinds = [m["kind"] for mems in prec["stores"].values() for m in mems]
    rows = []
    for c in cases:
        seed, target = len(texts), len(texts) + 1
        texts += [c["seed"]["text"], c["target"]["text"]]
        kinds += [c["seed"]["kind"], c["target"]["kind"]]
        rows.append((c["name"], c["query"], seed, target))
    return build_store("chain", texts, kinds, cache), rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True)
    args = ap.parse_args()
    cache = EmbeddingCache(DEFAULT_CACHE)
    confs = configs()

    chain, cases = chain_store(cache)
    cvecs = cache.embed([q for _, q, _, _ in cases])
    convs, _ = load_conversations(args.data_dir / "locomo" / "locomo_dev.json", "turns")
    lstores = [build_store(c.name, c.texts, ["fact"] * len(c.texts), cache) for c in convs]
    lvecs = [cache.embed([q.text for q in c.questions]) for c in convs]
    reports, rels = gitbugs_load(args.data_dir / "gitbugs" / "hadoop_corpus.jsonl",
                                 args.data_dir / "gitbugs" / "hadoop_qrels.json")
    grow = {r.id: i for i, r in enumerate(reports)}
    gstore = build_store("gitbugs", [r.memory_text for r in reports], ["problem"] * len(reports), cache)
    qids = [q for q in rels if q in grow and any(d in grow for d in rels[q])]
    half = cluster_halves(qids, rels)
    gq = {h: [(grow[q], reports[grow[q]].title.strip(), {grow[d] for d in rels[q] if d in grow})
              for q in qids if half[q] == h] for h in (0, 1)}
    gvecs = {h: cache.embed([t for _, t, _ in gq[h]]) for h in (0, 1)}
    ids, itexts, irels = ident_load(args.data_dir / "identifiers" / "requests_corpus.jsonl",
                                    args.data_dir / "identifiers" / "requests_qrels.json")
    irow = {m: i for i, m in enumerate(ids)}
    istore = build_store("identifiers", itexts, ["fact"] * len(itexts), cache)
    iq = [(q, {irow[m] for m in irels[q] if m in irow}) for q in list(irels)[:WHOLE_NAMES]]
    ivecs = cache.embed([q for q, _ in iq])

    # Which chain cases the question alone does not answer with the related memory (no chain).
    plain = ranking_retriever(confs[0][1], limit=10)
    reach_only = [c for c, v in zip(cases, cvecs, strict=True)
                  if c[3] not in {r.index for r in plain(chain, c[1], v)}]
    log(f"chain cases: {len(cases)}, of which {len(reach_only)} need the chain")

    print("| configuration | chain cases reached | answer size | LoCoMo R@10 | abstention | "
          "GitBugs MRR (halves) | identifiers hit@5 |")
    print("|---|---|---|---|---|---|---|")
    table: dict[str, dict] = {}
    for label, p in confs:
        run = ranking_retriever(p, limit=10)
        reached, sizes = 0, []
        for (_name, q, _seed, target), v in zip(cases, cvecs, strict=True):
            got = run(chain, q, v)
            sizes.append(len(got))
            if (_name, q, _seed, target) in reach_only and target in {r.index for r in got}:
                reached += 1
        lrun = ranking_retriever(p)
        per_conv = [locomo_evaluate([c], [s], [v], lrun, [10], mismatched=False).overall[10]
                    for c, s, v in zip(convs, lstores, lvecs, strict=True)]
        abst = locomo_evaluate(convs, lstores, lvecs, lrun, [10]).abstention
        grun = ranking_retriever(p, limit=50)
        g = [gitbugs_evaluate(gstore, gq[h], gvecs[h], grun)[0] for h in (0, 1)]
        ident, _ = ident_evaluate(istore, iq, ranking_retriever(p, limit=10), ivecs)
        row = {"chain_reached": reached, "chain_n": len(reach_only), "answer_size": float(np.mean(sizes)),
               "locomo_r10": per_conv, "locomo_r10_mean": float(np.mean(per_conv)), "abstention": abst,
               "gitbugs_mrr": [x["mrr"] for x in g], "identifiers_hit5": ident["hit@5"]}
        table[label] = row
        print(f"| {label} | {reached} of {len(reach_only)} | {row['answer_size']:.1f} | "
              f"{row['locomo_r10_mean']:.3f} | {abst:.3f} | {g[0]['mrr']:.3f} / {g[1]['mrr']:.3f} | "
              f"{ident['hit@5']:.3f} |", flush=True)

    # Leave one conversation out: choose on the rest, score the held-out one.
    base_abst = table["no chain"]["abstention"]
    chosen, held, held_none = [], [], []
    for k in range(len(convs)):
        def train(label: str, k: int = k) -> float:
            r = table[label]["locomo_r10"]
            return float(np.mean([x for i, x in enumerate(r) if i != k]))

        ok = [lb for lb in table if table[lb]["abstention"] >= base_abst - ABSTENTION_SLACK]
        best = max(ok, key=train)
        chosen.append(best)
        held.append(table[best]["locomo_r10"][k])
        held_none.append(table["no chain"]["locomo_r10"][k])
    print(f"\nLoCoMo out of fold: chosen per fold {chosen}; recall@10 {np.mean(held):.4f} "
          f"against no chain {np.mean(held_none):.4f}")
    print(json.dumps({"table": table, "oof": {"chosen": chosen, "r10": float(np.mean(held)),
                                              "r10_no_chain": float(np.mean(held_none))}}))


if __name__ == "__main__":
    main()
