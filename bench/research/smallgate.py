"""A query gate that knows the store's size.

The gate's bar (targeted 0.40, +0.15 when the query's names are new to the store) was set on
LoCoMo stores of 369-680 memories, where an unrelated query's best cosine is the maximum over
hundreds of memories. The maximum of N draws grows with N (extreme values: ~ mu + sigma *
sqrt(2 ln N)), so in a store of 15 an unrelated query's best cosine is lower and the same
false-answer rate allows a lower bar. This script measures that curve instead of assuming it.

Derivation (no fitting to the precision cases): LoCoMo dev's mismatched queries (conversation
i's category 1-4 questions against conversation i+1's store, bench/eval_locomo.py's protocol).
Each store is subsampled to N in SIZES (``--draws`` random subsamples per N). A query's gate
statistic is its best cosine in the subsample, minus the novelty penalty when it names things
and no memory of the subsample holds one of them (the product's rule: the bar rises by the
penalty). At full size the shipped bar refuses a share A of the queries; q(N) is the A-quantile
of the statistic at size N, and the size-aware bar is bar + (q(N) - q(full)). One constant would
carry it: q(N) fitted as a + b * sqrt(2 ln N) (over SIZES and the full stores), the bar lowered by
b * (sqrt(2 ln N_cal) - sqrt(2 ln N)) below N_cal, the smallest store the bar was calibrated on
(never raised: GitBugs' and the identifiers' stores are thousands), N counted from 4 (the
smallest size measured) up. The plain rule is emulated here by the parameters with the bar
lowered for each store's size. The product ships it only for queries specific to the store (a
query word or identifier it holds is rare there: ``RankingParams.small_store_slope``), measured
here as the fourth setting; a vague query (``tests``) keeps the full bar (RESULTS.md).

Validation, out of fold: the slope is derived on four conversations and tested on the fifth,
through the product's ``ranking.rank`` (gate, both lanes, the verbatim and coverage rules, the
cut) over real subsampled stores (the product's keyword index built on each subsample):
abstention of the held-out questions against subsamples of the next conversation's store
(mismatched), and recall@10 of the held-out questions against subsamples of their own store
that hold every evidence turn (matched), shipped bar beside size-aware bar, same subsamples.
``--cases``: then tests/data/precision_cases.yaml through the real ``memstore.read`` (stores in
git repos, as tests/test_precision.py builds them), shipped bar beside the bar the whole of
LoCoMo gives for each store's size.

    python bench/research/smallgate.py --locomo ../shared/eval/locomo/locomo_dev.json [--draws 200 --reps 8] [--cases]

The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: eval_common and the evals

from eval_common import DEFAULT_CACHE, EmbeddingCache, ProductKeyword, Store, build_store, log
from eval_locomo import HEADLINE_CATEGORIES, Question, load_conversations, recall_at

from memstore.index.terms import code_shaped
from memstore.read import ranking

SIZES = (4, 8, 15, 30, 60, 120, 250)
SMALLEST = 4  # the smallest size measured: a store of fewer counts as one of 4
# The gate without a size rule.
SHIPPED = dataclasses.replace(ranking.RankingParams(), small_store_slope={"targeted": 0.0, "ambient": 0.0})
Setting = Callable[[int], ranking.RankingParams]  # the parameters for a store of N memories


def shift(n: int, slope: float, cal: int) -> float:
    """How much the size-aware bar lies under the shipped one in a store of ``n`` memories."""
    if slope <= 0 or n >= cal:
        return 0.0
    return slope * (x_of(cal) - x_of(max(n, SMALLEST)))


def size_aware(slope: float, cal: int, novel_slope: float | None = None) -> Setting:
    """Every bar (the novelty penalty's included) lowered by ``shift``; with ``novel_slope``, the
    bar of a query whose names are new to the store by that slope instead (the penalty grows to
    make up the difference), as the novel queries' own curve would have it."""

    def at(n: int) -> ranking.RankingParams:
        down = shift(n, slope, cal)
        bars = {mode: bar - down for mode, bar in SHIPPED.query_bar.items()}
        gap = 0.0 if novel_slope is None else down - shift(n, novel_slope, cal)
        return dataclasses.replace(SHIPPED, query_bar=bars, novelty_penalty=SHIPPED.novelty_penalty + gap)

    return at


def specific_only(slope: float, cal: int, holders: bool = False) -> Setting:
    """``size_aware``'s bar, but only for a query specific to the store (a query word or
    identifier it holds is rare there); with ``holders`` (the product's rule,
    ``RankingParams.small_store_slope``), only for the memories that hold such a word."""
    p = dataclasses.replace(SHIPPED, small_store_slope={"targeted": slope, "ambient": 0.0}, small_store_size=cal,
                            small_store_holders=holders)
    return lambda n: p


SETTINGS = ("shipped", "size-aware", "size-aware, novel bar by its own curve", "size-aware, specific queries only",
            "size-aware, for the memories holding a rare query word")


def x_of(n: float) -> float:
    return math.sqrt(2.0 * math.log(n))


# -- which memories hold a query's names (the novelty rule, per subsample) ------------------------
def holders(store: Store, word: str) -> set[int]:
    """Rows holding ``word`` as ``KeywordIndex.doc_freq`` counts it: as an identifier in ``code``
    when it is one, else any of its analysed terms in ``text``."""
    index = store.code.index
    s = index.searcher
    pairs = [("code", word.lower())] if code_shaped(word) else [("text", t) for t in index.analyse([word])]
    out: set[int] = set()
    for field_name, term in pairs:
        try:
            docs = s.postings(field_name, term).all_ids()
        except Exception:  # whoosh's TermNotFound: no memory holds it
            continue
        out.update(int(s.stored_fields(d)["id"]) for d in docs)
    return out


def named_mask(store: Store, queries: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(queries x rows: the row holds one of the query's names, query names anything)."""
    held = np.zeros((len(queries), len(store.texts)), dtype=bool)
    names = np.zeros(len(queries), dtype=bool)
    for qi, q in enumerate(queries):
        salient = ranking.salient_terms(q)
        names[qi] = bool(salient)
        for word in salient:
            rows = list(holders(store, word))
            if rows:
                held[qi, rows] = True
    return held, names


# -- the curve ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Mismatch:
    """One conversation's questions against the next conversation's store."""

    conv: int
    sims: np.ndarray  # queries x rows
    held: np.ndarray  # queries x rows
    names: np.ndarray  # queries
    size: int

    def stat(self, rows: np.ndarray | None, penalty: float) -> np.ndarray:
        """The gate statistic (best cosine - penalty if novel) per query, for the subsample
        ``rows`` (draws x N row numbers; None: the whole store): queries x draws."""
        if rows is None:
            best = self.sims.max(axis=1)[:, None]
            novel = (self.names & ~self.held.any(axis=1))[:, None]
        else:
            best = self.sims[:, rows].max(axis=2)
            novel = self.names[:, None] & ~self.held[:, rows].any(axis=2)
        return best - penalty * novel


def draws_of(n: int, size: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    return np.argsort(rng.random((draws, n)), axis=1)[:, :size]


def curve(mm: Sequence[Mismatch], bar: float, penalty: float, draws: int, seed: int,
          group: str = "all") -> dict[str, Any]:
    """q(N) - q(full) at the abstention level the shipped bar gives at full size, pooled over
    ``mm`` (each query weighs the same). ``group``: all queries, or only those novel / not
    novel at full size (with the cosine alone as the statistic for the novel ones' bar)."""
    rng = np.random.default_rng(seed)
    full: list[np.ndarray] = []
    per: dict[int, list[np.ndarray]] = {n: [] for n in SIZES}
    for m in mm:
        novel_full = m.names & ~m.held.any(axis=1)
        keep = {"all": np.ones_like(novel_full), "novel": novel_full, "plain": ~novel_full}[group]
        full.append(m.stat(None, penalty)[keep, 0])
        for n in SIZES:
            if n < m.size:
                per[n].append(m.stat(draws_of(m.size, n, draws, rng), penalty)[keep].ravel())
    f = np.concatenate(full)
    level = float(np.mean(f < bar))
    q_full = float(np.quantile(f, level))
    q = {n: float(np.quantile(np.concatenate(v), level)) for n, v in per.items() if v}
    # Fit q(N) = a + b * sqrt(2 ln N) over the subsample sizes and each full store.
    xs = [x_of(n) for n in q] + [x_of(m.size) for m in mm]
    ys = list(q.values()) + [q_full] * len(mm)
    b, a = np.polyfit(xs, ys, 1)
    return {"level": level, "q_full": q_full, "q": q, "delta": {n: v - q_full for n, v in q.items()},
            "slope": float(b), "intercept": float(a), "queries": len(f)}


# -- validation through ranking.rank ------------------------------------------------------------------
class Sub:
    """A subsample of a store as the product sees it: its rows' matrix, the product's keyword
    index over their texts."""

    def __init__(self, store: Store, rows: Sequence[int]) -> None:
        self.rows = list(rows)
        texts = [store.texts[r] for r in self.rows]
        kinds = [store.kinds[r] for r in self.rows]
        self.matrix = store.matrix[self.rows]
        self.kinds = kinds
        self.code = ProductKeyword(texts, kinds, SHIPPED)

    def rank(self, query: str, qvec: np.ndarray, settings: Sequence[Setting]) -> list[list[int]]:
        """The ranked rows (of the whole store) under each setting; keyword hits once."""
        hits, evidence, named = self.code.hits(query, SHIPPED.keyword_pool)
        out = []
        for setting in settings:
            p = setting(len(self.rows))
            got = ranking.rank(qvec, self.matrix, hits, self.kinds, evidence=evidence, named=named,
                               salient=ranking.salient_terms(query), doc_freq=self.code.doc_freq, params=p,
                               limit=10, prose=ranking.prose_query(query)).results
            out.append([self.rows[r.index] for r in got])
        return out


def evidence_rows(labels: list[list[str]], q: Question) -> set[int]:
    ev = set(q.evidence)
    return {i for i, lab in enumerate(labels) if ev & set(lab)}


def validate(convs: list, stores: list[Store], qs: list[list[Question]], qvecs: list[np.ndarray], test: int,
             params: Sequence[Setting], reps: int, seed: int) -> dict[str, Any]:
    """Held-out conversation ``test``: per size, [empty mismatched answers per setting, mismatched
    queries] and [recall@10 sum per setting, gate passes per setting, matched queries]."""
    rng = np.random.default_rng(seed + 1000 * test)
    other = stores[(test + 1) % len(stores)]
    own = stores[test]
    k = len(params)
    out: dict[str, Any] = {"mismatched": {}, "matched": {}}
    sizes = [*SIZES, len(other.texts)]
    for n in sizes:
        empty = np.zeros(k)
        total = 0
        for _ in range(reps if n < len(other.texts) else 1):
            sub = Sub(other, rng.choice(len(other.texts), n, replace=False) if n < len(other.texts)
                      else range(len(other.texts)))
            for q, v in zip(qs[test], qvecs[test], strict=True):
                got = sub.rank(q.text, v, params)
                empty += [not g for g in got]
                total += 1
            sub.code.index.close()
        out["mismatched"][n] = (empty.tolist(), total)
    labels = convs[test].labels
    order = list(range(len(qs[test])))
    for n in [*SIZES, len(own.texts)]:
        rec = np.zeros(k)
        passed = np.zeros(k)
        total = 0
        if n >= len(own.texts):
            groups = [order]
        else:
            # Each subsample holds the evidence of max(1, n // 10) questions, the rest random.
            per = max(1, n // 10)
            rng.shuffle(order)
            groups = [order[i:i + per] for i in range(0, len(order), per)]
        for group in groups:
            need: set[int] = set()
            members = []
            for qi in group:
                ev = evidence_rows(labels, qs[test][qi])
                if ev and len(need | ev) <= n:
                    need |= ev
                    members.append(qi)
            if not members:
                continue
            if n < len(own.texts):
                rest = np.setdiff1d(np.arange(len(own.texts)), sorted(need))
                rows = sorted(need) + rng.choice(rest, n - len(need), replace=False).tolist()
            else:
                rows = list(range(len(own.texts)))
            sub = Sub(own, rows)
            for qi in members:
                q = qs[test][qi]
                got = sub.rank(q.text, qvecs[test][qi], params)
                rec += [recall_at([ranking.Ranked(r, 0.0, ()) for r in g], labels, q.evidence, 10) for g in got]
                passed += [bool(g) for g in got]
                total += 1
            sub.code.index.close()
        out["matched"][n] = (rec.tolist(), passed.tolist(), total)
    return out


def precision_cases(slope: float, cal: int) -> dict[str, Any]:
    """tests/data/precision_cases.yaml through the real read (each store in a git repo, written
    through the library), the shipped bar beside the size-aware one: which cases pass."""
    import os
    import tempfile

    tests = Path(__file__).resolve().parents[2] / "tests"
    sys.path.insert(0, str(tests))
    home = tempfile.mkdtemp(prefix="memstore-smallgate-")
    os.environ.update({"MEMSTORE_HOME": home, "MEMSTORE_DAEMON": "0"})
    import test_precision as tp  # the cases' own store builder and checks

    from memstore.read import retrieve
    from memstore.store.workspace import open_workspace

    out: dict[str, Any] = {}
    for case in tp.CASES:
        repo, ids = tp.build(case["store"], Path(home))
        ws = open_workspace(cwd=repo)
        n = len(tp.STORES[case["store"]])  # no memory of the case file is archived: all in scope
        row: dict[str, Any] = {"n": n}
        for name, setting in (("shipped", lambda n: SHIPPED), ("size-aware", size_aware(slope, cal)),
                              ("specific", specific_only(slope, cal)), ("holders", specific_only(slope, cal, True))):
            params = retrieve.ReadParams(ranking=setting(n))
            answer = retrieve.read(ws, {"query": case["query"], "include_global": False}, params=params,
                                   log_episode=False)
            try:
                tp.check(case, answer["results"], ids)
                row[name] = True
            except AssertionError:
                row[name] = False
            gate = answer["stats"]["gate"]
            row[f"{name} bar"], row["top"] = gate["bar"], gate["top_similarity"]
        out[case["id"]] = row
        names = ("shipped", "size-aware", "specific", "holders")
        if len({row[k] for k in names}) > 1 or case["id"] in tp.NOT_YET:
            log(f"  {case['id']:28s} N {n:2d} best cosine {row['top']:.3f}, bar {row['shipped bar']:.3f} -> "
                f"{row['size-aware bar']:.3f} (specific: {row['specific bar']:.3f}, holders: "
                f"{row['holders bar']:.3f}): " + " -> ".join("pass" if row[k] else "fail" for k in names))
    for name in ("shipped", "size-aware", "specific", "holders"):
        log(f"precision cases passing, {name}: {sum(r[name] for r in out.values())} of {len(out)}")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--locomo", type=Path, required=True)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--draws", type=int, default=200, help="random subsamples per size for the curve")
    ap.add_argument("--reps", type=int, default=8, help="subsamples per size and held-out conversation (validation)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--curve-only", action="store_true")
    ap.add_argument("--cases", action="store_true", help="also read the precision cases (tests/data)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    cache = EmbeddingCache(args.cache_dir)
    convs, _ = load_conversations(args.locomo, "turns")
    stores = [build_store(c.name, c.texts, ["fact"] * len(c.texts), cache) for c in convs]
    qs = [[q for q in c.questions if q.category in HEADLINE_CATEGORIES] for c in convs]
    qvecs = [cache.embed([q.text for q in qq]) for qq in qs]
    bar = float(SHIPPED.query_bar["targeted"])
    pen = SHIPPED.novelty_penalty
    mm = []
    for i in range(len(convs)):
        other = stores[(i + 1) % len(stores)]
        held, names = named_mask(other, [q.text for q in qs[i]])
        mm.append(Mismatch(i, qvecs[i] @ other.matrix.T, held, names, len(other.texts)))
    log(f"stores {[len(s.texts) for s in stores]}, mismatched queries {[len(q) for q in qs]} "
        f"({time.perf_counter() - t0:.0f}s)")

    report: dict[str, Any] = {"sizes": SIZES, "stores": [len(s.texts) for s in stores]}
    # The curve on all of LoCoMo (in sample), by group: how the novelty penalty should scale.
    for group, penalty in (("all", pen), ("plain", pen), ("novel", pen), ("all", 0.0), ("plain", 0.0)):
        c = curve(mm, bar, penalty, args.draws, args.seed, group)
        report[f"curve_{group}_{penalty}"] = c
        log(f"curve ({group}, penalty {penalty}, {c['queries']} queries): abstention level {c['level']:.3f}, q(full) "
            f"{c['q_full']:.3f}; q(N) - q(full): " + ", ".join(f"{n}: {d:+.3f}" for n, d in c["delta"].items())
            + f"; fit slope {c['slope']:.4f}")
    # The ambient bar's level (cosine alone): does one slope serve both modes?
    for lvl_bar, name in ((float(SHIPPED.query_bar["ambient"]), "ambient"),):
        c = curve(mm, lvl_bar, 0.0, args.draws, args.seed)
        report[f"curve_{name}"] = c
        log(f"curve (ambient bar {lvl_bar}, penalty 0.0): level {c['level']:.3f}; q(N) - q(full): "
            + ", ".join(f"{n}: {d:+.3f}" for n, d in c["delta"].items()) + f"; fit slope {c['slope']:.4f}")
    whole = curve(mm, bar, 0.0, args.draws, args.seed)
    cal = min(m.size for m in mm)
    report["whole"] = {"slope": whole["slope"], "cal": cal}
    log(f"whole LoCoMo: slope {whole['slope']:.4f}, N_cal {cal}; bar lowered by "
        + ", ".join(f"{n}: {shift(n, whole['slope'], cal):.3f}" for n in (4, 5, 6, 8, 10, 15, 30, 100)))
    if args.cases:
        report["cases"] = precision_cases(whole["slope"], cal)
    if args.curve_only:
        print(json.dumps(report))
        return report

    # Out of fold: the slope from four conversations, tested on the fifth.
    folds = []
    for test in range(len(convs)):
        train = [m for m in mm if m.conv != test]
        # The cosine's own curve (no penalty), and the novel queries' at their bar's level.
        c = curve(train, bar, 0.0, args.draws, args.seed)
        cn = curve(train, bar, pen, args.draws, args.seed, "novel")
        cal = min(m.size for m in train)
        slope, novel = max(c["slope"], 0.0), max(cn["slope"], 0.0)
        same, own, spec = size_aware(slope, cal), size_aware(slope, cal, novel), specific_only(slope, cal)
        held = specific_only(slope, cal, holders=True)
        t1 = time.perf_counter()
        v = validate(convs, stores, qs, qvecs, test, [lambda n: SHIPPED, same, own, spec, held], args.reps, args.seed)
        folds.append({"test": test, "slope": slope, "novel_slope": novel, "cal": cal, **v})
        log(f"fold {test}: slope {slope:.4f}, novel {novel:.4f} (N_cal {cal}), validated in "
            f"{time.perf_counter() - t1:.0f}s")
    rows = []
    log(f"size | mismatched abstention: {' / '.join(SETTINGS)} | matched recall@10, same | matched gate passes, "
        "same | bar lowered by (plain / novel, fold mean)")
    for key in [*SIZES, "full"]:
        emp = np.zeros(len(SETTINGS))
        tot = 0
        rec = np.zeros(len(SETTINGS))
        pas = np.zeros(len(SETTINGS))
        mt = 0
        for f in folds:
            e, t = f["mismatched"][key if key != "full" else max(f["mismatched"])]
            emp += e
            tot += t
            r, p, t2 = f["matched"][key if key != "full" else max(f["matched"])]
            rec += r
            pas += p
            mt += t2
        n = int(key) if key != "full" else 10**6
        shifts = [float(np.mean([shift(n, f[slope], f["cal"]) for f in folds])) for slope in ("slope", "novel_slope")]
        row = {"size": key, "abstention": (emp / tot).tolist(), "recall@10": (rec / mt).tolist(),
               "passes": (pas / mt).tolist(), "mismatched": tot, "matched": mt, "shift": shifts}
        rows.append(row)
        three = " / ".join
        log(f"{key!s:>5} | {three(f'{x:.3f}' for x in row['abstention'])} (n {tot}) | "
            f"{three(f'{x:.3f}' for x in row['recall@10'])} | {three(f'{x:.3f}' for x in row['passes'])} (n {mt}) "
            f"| {shifts[0]:.3f} / {shifts[1]:.3f}")
    report["folds"] = [{k: f[k] for k in ("test", "slope", "novel_slope", "cal")} for f in folds]
    report["out_of_fold"] = rows
    log(f"total {time.perf_counter() - t0:.0f}s")
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
