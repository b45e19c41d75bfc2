"""Cross-validation of the small-store rules (``rare_share``, ``gate_coverage``,
``named_holders_only``) through the real ``memstore.read.ranking.rank`` over the product's
keyword index, on three data sets none of which the rules were written from.

Protocol (bench/research/cv.py's): LoCoMo, leave one conversation out (tune on four, report the fifth),
objective the mean of recall@10 and abstention on mismatched questions; GitBugs (Hadoop),
duplicate clusters split in two halves, tune on one and report the other, both ways, objective
MRR (title and title+body queries); identifiers (psf/requests), queries split alternately in
two halves, the same both ways, objective MRR. Every "out of fold" figure comes from a value
chosen without the data it is reported on. Each sweep varies one rule, the others at the
shipped defaults; "idf>=1.5" is the rule ``rare_share`` replaced (an identifier is rare when
its Robertson idf reaches 1.5), kept as a reference row. A fourth rule, ``coverage_lift`` (the
gate's cosine plus a weight times the memory's keyword coverage), was swept by this script at
commit ea76056 (``--only lift``) and rejected by every LoCoMo fold; the product has no such
parameter since.

    python bench/research/rarity.py --locomo ../shared/eval/locomo/locomo_dev.json \\
        --corpus ../shared/eval/gitbugs/hadoop_corpus.jsonl --qrels ../shared/eval/gitbugs/hadoop_qrels.json \\
        --identifiers ../shared/eval/identifiers/requests_corpus.jsonl \\
        --identifier-qrels ../shared/eval/identifiers/requests_qrels.json \\
        [--only rare|coverage|named] [--keyword-only]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: eval_common and the evals

from codelane import Cached, gitbugs_table, halves_cv, locomo_cv, locomo_table
from eval_common import DEFAULT_CACHE, EmbeddingCache, build_store
from eval_identifiers import load as load_identifiers

from memstore.read import ranking

SHARES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)  # 0.0: only a term one memory holds is rare
COVERAGES = (2.0, 1.0, 0.9, 0.8, 0.6)  # 2.0: off

Evidence = dict[int, tuple[float, int, int, int]]


def idf(df: int, docs: int) -> float:
    return math.log(1.0 + (docs - df + 0.5) / (df + 0.5))


def old_rule(evidence: Evidence) -> Evidence:
    """The evidence as the replaced rule saw it: an identifier counts only at idf >= 1.5."""
    return {i: (c, df if df and idf(df, n) >= 1.5 else 0, n, w) for i, (c, df, n, w) in evidence.items()}


def no_identifiers(evidence: Evidence) -> Evidence:
    return {i: (c, 0, n, w) for i, (c, _df, n, w) in evidence.items()}


class Setting:
    """One column of a sweep: ranking parameters and a view of the keyword evidence."""

    def __init__(self, label: str, params: ranking.RankingParams,
                 view: Callable[[Evidence], Evidence] | None = None) -> None:
        self.label, self.params, self.view = label, params, view


class Memo(Cached):
    """Cached keyword hits, each setting's evidence seen through its ``view``."""

    def __init__(self, settings: Sequence[Setting]) -> None:
        super().__init__()
        self.view = {id(s.params): s.view for s in settings}

    def evidence_for(self, p: ranking.RankingParams, evidence: Evidence) -> Evidence:
        view = self.view.get(id(p))
        return evidence if view is None else view(evidence)


def identifiers_table(corpus: Path, qrels: Path, cache: EmbeddingCache, grid: Sequence[ranking.RankingParams],
                      keyword_only: bool, memo: Memo) -> tuple[np.ndarray, list[int]]:
    """[setting, query, (hit@1, hit@5, hit@10, rr, answer size)], and each query's half."""
    ids, texts, rels = load_identifiers(corpus, qrels)
    row = {mid: i for i, mid in enumerate(ids)}
    store = build_store("identifiers", texts, ["fact"] * len(texts), cache)
    names = list(rels)
    qvecs = cache.embed(names)
    out = np.zeros((len(grid), len(names), 5))
    for qi, (name, vec) in enumerate(zip(names, qvecs, strict=True)):
        rel = {row[m] for m in rels[name] if m in row}
        for gi, p in enumerate(grid):
            got = memo.rank(store, name, None if keyword_only else vec, p, limit=10)
            first = next((pos for pos, r in enumerate(got) if r.index in rel), None)
            out[gi, qi, 4] = len(got)
            if first is not None:
                out[gi, qi, :4] = (first < 1, first < 5, first < 10, 1.0 / (first + 1))
    return out, [i % 2 for i in range(len(names))]


def sweeps(only: str | None) -> list[tuple[str, list[Setting]]]:
    base = ranking.RankingParams()
    out: list[tuple[str, list[Setting]]] = []
    if only in (None, "rare"):
        rare = [Setting("identifiers off", dataclasses.replace(base), no_identifiers),
                Setting("idf>=1.5", dataclasses.replace(base, rare_share=1.0), old_rule)]
        rare += [Setting(f"rare_share={s}", dataclasses.replace(base, rare_share=s)) for s in SHARES]
        out.append(("rare_share", rare))
    if only in (None, "coverage"):
        out.append(("gate_coverage", [Setting(f"gate_coverage={v}", dataclasses.replace(base, gate_coverage=v))
                                      for v in COVERAGES]))
    if only in (None, "named"):
        out.append(("named_holders_only", [Setting(f"named_holders_only={v}",
                                                   dataclasses.replace(base, named_holders_only=v))
                                           for v in (False, True)]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--locomo", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--qrels", type=Path, required=True)
    ap.add_argument("--identifiers", type=Path, required=True)
    ap.add_argument("--identifier-qrels", type=Path, required=True)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--only", choices=("rare", "coverage", "named"), default=None)
    ap.add_argument("--keyword-only", action="store_true", help="no query vector (a read without the model)")
    args = ap.parse_args()
    cache = EmbeddingCache(args.cache_dir)
    for title, settings in sweeps(args.only):
        labels = [s.label for s in settings]
        grid = [s.params for s in settings]
        memo = Memo(settings)
        print(f"## {title}{' (keyword only)' if args.keyword_only else ''}", flush=True)
        locomo_cv(locomo_table(args.locomo, cache, grid, args.keyword_only, memo), labels)  # type: ignore[arg-type]
        table, halves = gitbugs_table(args.corpus, args.qrels, cache, grid, args.keyword_only, memo)  # type: ignore[arg-type]
        halves_cv(table, halves, labels)
        table, halves = identifiers_table(args.identifiers, args.identifier_qrels, cache, grid, args.keyword_only, memo)
        halves_cv(table, halves, labels, "identifiers")


if __name__ == "__main__":
    main()
