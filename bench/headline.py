"""The headline table of bench/RESULTS.md, from one command.

Runs the shipped read on every data set with its protocol (the eval modules' own ``main``, so
nothing here re-implements a metric) and renders one table: LoCoMo dev recall@5/10/25 and
abstention through the real pipeline, the same without the model (keyword only), GitBugs
(Hadoop) title and title+body queries beside BM25 and vector alone, and the identifier look-up
in both halves beside plain BM25. Each goal of issue #11 is checked in the last column.

    python bench/headline.py --data-dir ../shared/eval            # print the table
    python bench/headline.py --data-dir ../shared/eval --write    # and rewrite it in RESULTS.md

``--write`` replaces what lies between the markers ``<!-- headline:begin -->`` and
``<!-- headline:end -->`` and nothing else; a file without exactly one pair is left untouched.
Every constant behind these figures was chosen by cross-validation (bench/cv.py,
bench/research_codelane.py, bench/research_recall.py): the shipped defaults, not a fit to this run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval_gitbugs
import eval_identifiers
import eval_locomo
from eval_common import DEFAULT_CACHE, ROOT, log

BEGIN = "<!-- headline:begin -->"
END = "<!-- headline:end -->"
RESULTS = ROOT / "bench" / "RESULTS.md"
COMMAND = "python bench/headline.py --data-dir ../shared/eval --write"

# Issue #11's out-of-fold goals.
LOCOMO_RECALL10 = 0.72
LOCOMO_ABSTENTION = 0.90
IDENT_HIT5 = 0.97
IDENT_EMPTY = 0.01


class MarkerError(Exception):
    """The results file does not hold exactly one pair of headline markers."""


def _quiet(main: Callable[..., dict], argv: list[str]) -> dict:
    # Each eval prints its JSON on stdout; the headline prints only its table there.
    with contextlib.redirect_stdout(io.StringIO()):
        return main(argv)


def measure(data: Path, cache: Path) -> dict[str, Any]:
    """Every figure of the table, from the eval modules run with their protocols."""
    locomo = data / "locomo" / "locomo_dev.json"
    common = ["--cache-dir", str(cache)]
    log("headline: LoCoMo through memstore.read ...")
    lo = _quiet(eval_locomo.main, ["--data", str(locomo), "--engine", "pipeline", *common])
    log("headline: LoCoMo keyword only ...")
    kw = _quiet(eval_locomo.main, ["--data", str(locomo), "--keyword-only", "--no-baselines", *common])
    log("headline: GitBugs ...")
    gb = _quiet(eval_gitbugs.main, ["--corpus", str(data / "gitbugs" / "hadoop_corpus.jsonl"),
                                    "--qrels", str(data / "gitbugs" / "hadoop_qrels.json"),
                                    "--no-dup-analysis", *common])
    log("headline: identifiers ...")
    ident = _quiet(eval_identifiers.main, ["--corpus", str(data / "identifiers" / "requests_corpus.jsonl"),
                                           "--qrels", str(data / "identifiers" / "requests_qrels.json"), *common])
    return {"locomo": lo, "keyword_only": kw, "gitbugs": gb, "identifiers": ident}


def _f(x: float) -> str:
    return f"{x:.3f}"


def _mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def _hits(m: dict[str, float]) -> str:
    return f"{_f(m['hit@1'])} / {_f(m['hit@5'])} / {_f(m['hit@10'])}, {_f(m['mrr'])}"


def render(fig: dict[str, Any], stamp: str) -> str:
    """The table (Markdown), with the command and the code it was measured on."""
    lo, kw, gb, ident = fig["locomo"], fig["keyword_only"], fig["gitbugs"], fig["identifiers"]
    base = lo.get("baselines", {})

    def rec(m: dict[str, float]) -> str:
        return f"{_f(m['recall@5'])} / {_f(m['recall@10'])} / {_f(m['recall@25'])}"

    lo_ok = lo["recall@10"] >= LOCOMO_RECALL10 and lo["abstention"] >= LOCOMO_ABSTENTION
    lines = [
        f"Measured {stamp} with",
        "",
        f"    {COMMAND}",
        "",
        "The shipped defaults; LoCoMo and identifiers through `memstore.read` over real stores, GitBugs",
        "through `memstore.read.ranking.rank` (which can leave the query's own report out).",
        "",
        "| benchmark | metric | memstore | BM25 alone | vector alone | goal (issue #11) |",
        "|---|---|---|---|---|---|",
        f"| LoCoMo dev, turns, cat 1-4 | recall@5 / @10 / @25 | **{rec(lo)}** | {rec(base['bm25'])} | "
        f"{rec(base['vector'])} | R@10 ≥ {LOCOMO_RECALL10} {_mark(lo['recall@10'] >= LOCOMO_RECALL10)} |",
        f"| | abstention on mismatched queries | **{_f(lo['abstention'])}** | {_f(base['bm25']['abstention'])} | "
        f"{_f(base['vector']['abstention'])} | ≥ {LOCOMO_ABSTENTION:.2f} "
        f"{_mark(lo['abstention'] >= LOCOMO_ABSTENTION)} |",
    ]
    cats = lo.get("per_category", {})
    per = "; ".join(f"{eval_locomo.CATEGORY_NAMES.get(int(c), c)} {_f(m['recall@10'])} (n {m['n']})"
                    for c, m in cats.items() if int(c) in eval_locomo.HEADLINE_CATEGORIES)
    lines.append(f"| | recall@10 per category | {per} | | | |")
    lines.append(f"| | read p50 / p95 (query encode included) | {lo['p50_ms']} / {lo['p95_ms']} ms | | | |")
    lines.append(f"| LoCoMo, keyword only (no model) | recall@5 / @10 / @25, abstention | {rec(kw)}, "
                 f"{_f(kw['abstention'])} | | | |")
    gb_ok = True
    for q, name in (("title", "title-only"), ("title_body", "title+body")):
        ours = gb[q]
        others = [gb["baselines"][b][q] for b in ("bm25", "vector") if b in gb.get("baselines", {})]
        ok = all(ours[k] >= max(o[k] for o in others) for k in ("hit@1", "hit@5", "hit@10", "mrr")) if others else False
        gb_ok &= ok
        cols = [_hits(gb["baselines"][b][q]) if b in gb.get("baselines", {}) else "" for b in ("bm25", "vector")]
        lines.append(f"| GitBugs Hadoop, {name} | hit@1 / @5 / @10, MRR | **{_hits(ours)}** | {cols[0]} | {cols[1]} | "
                     f"≥ the better baseline on each {_mark(ok)} |")
    id_ok = True
    for half, name in (("whole", "whole names"), ("inner", "names inside dotted calls")):
        ours, bm25 = ident[half]["memstore"], ident[half]["bm25"]
        ok = ours["hit@5"] >= IDENT_HIT5 and ours["empty"] <= IDENT_EMPTY
        id_ok &= ok
        lines.append(f"| identifiers (requests), {name} | hit@1 / @5 / @10, MRR, empty | **{_hits(ours)}, "
                     f"{_f(ours['empty'])}** | {_hits(bm25)}, {_f(bm25['empty'])} | | hit@5 ≥ {IDENT_HIT5}, "
                     f"empty ≤ {IDENT_EMPTY} {_mark(ok)} |")
    met = {"LoCoMo": lo_ok, "GitBugs": gb_ok, "identifiers": id_ok}
    lines += ["", "Goals met: " + ", ".join(f"{k} {_mark(v)}" for k, v in met.items()) + "."]
    return "\n".join(lines) + "\n"


def replace_between(text: str, table: str) -> str:
    """``text`` with the part between the headline markers replaced by ``table``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise MarkerError(f"expected one {BEGIN} followed by one {END}")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def stamp() -> str:
    day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "memstore"],
                               cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return day
    return f"{day} (code at {commit}{', with uncommitted changes to memstore/' if dirty else ''})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "eval",
                    help="the evaluation data: locomo/, gitbugs/, identifiers/ (default ../shared/eval)")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--write", action="store_true", help="rewrite the table between the markers of --results")
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.write:
        # Checked before minutes of measuring: a file the table cannot go into is refused now.
        try:
            replace_between(args.results.read_text(), "")
        except (OSError, MarkerError) as exc:
            print(f"headline: cannot write {args.results}: {exc}", file=sys.stderr)
            return 2
    table = render(measure(args.data_dir, args.cache_dir), stamp())
    print(table, end="")
    if args.write:
        args.results.write_text(replace_between(args.results.read_text(), table))
        log(f"headline: wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
