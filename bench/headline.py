"""The headline table of bench/RESULTS.md (quality, speed, faults), from one command.

Quality: the shipped read on every data set with its protocol (the eval modules' own ``main``, so
nothing here re-implements a metric): LoCoMo dev recall@5/10/25 and abstention through the real
pipeline, the same without the model (keyword only), GitBugs (Hadoop) title and title+body
queries beside BM25 and vector alone, and the identifier look-up in both halves beside plain
BM25. Speed: bench/perf.py's warm run (daemon, CLI, library, writes, change -> visible) and its
cold run (the first read after a clone, embedding) at ``--speed-size`` memories, each beside its
floor from the same run (``python -c pass``, the encoder alone). Faults: bench/faults.py at
reduced counts (``--fault-trials`` etc.; ``python bench/faults.py`` alone runs the full ones).
Speed and faults run as the user runs those scripts, in their own processes, and are read from
the JSON each prints last. Each goal is checked in the last column; a speed goal stated for a
larger store than the run's is shown, not checked.

    python bench/headline.py --data-dir ../shared/eval                      # print the table
    python bench/headline.py --data-dir ../shared/eval --write              # and rewrite it in RESULTS.md
    python bench/headline.py --data-dir ../shared/eval --skip speed faults  # quality only (~5 min warm)
    python bench/headline.py --skip quality --speed-size 10000              # speed at the goals' size

On a quiet 2-core machine: quality ~5 min warm, speed at 1,000 memories ~3-4 min, faults at the
default reduced counts ~5 min. The table is stamped with the commit, the machine's load average
(``os.getloadavg()``) at the start and the end, and the sizes and counts it ran at.

``--write`` replaces what lies between the markers ``<!-- headline:begin -->`` and
``<!-- headline:end -->`` and nothing else; a file without exactly one pair is left untouched.
Every constant behind the quality figures was chosen by cross-validation (bench/research/cv.py,
bench/research/codelane.py, bench/research/recall.py; docs/decisions/): the shipped defaults, not
a fit to this run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
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
PARTS = ("quality", "speed", "faults")

# Out-of-fold quality goals.
LOCOMO_RECALL10 = 0.72
LOCOMO_ABSTENTION = 0.90
IDENT_HIT5 = 0.97
IDENT_EMPTY = 0.01
# Speed goals, each with the store size it is stated for.
READ_P50_MS, READ_P95_MS, READ_GOAL_N = 30.0, 60.0, 10_000
WARM_GAP_MS = 15.0  # a warm read through the daemon over `python -c pass`, at 10k
WRITE_P50_MS = 50.0
VISIBLE_MS = 1000.0
FIRST_READ_MS, FIRST_READ_GOAL_N = 2000.0, 10_000


class MarkerError(Exception):
    """The results file does not hold exactly one pair of headline markers."""


def _quiet(main: Callable[..., dict], argv: list[str]) -> dict:
    # Each eval prints its JSON on stdout; the headline prints only its table there.
    with contextlib.redirect_stdout(io.StringIO()):
        return main(argv)


def measure_quality(data: Path, cache: Path) -> dict[str, Any]:
    """The quality figures, from the eval modules run with their protocols."""
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


def _last_json(cmd: list[str], what: str) -> dict[str, Any]:
    """Run a bench script as a user runs it and return the JSON object it prints last."""
    log(f"headline: {what}: {' '.join(cmd[1:])} ...")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"{what} printed no JSON (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def measure_speed(size: int, reps: int, cold: bool) -> dict[str, Any]:
    """bench/perf.py's warm run and (``cold``) its first read after a clone, at ``size`` memories."""
    perf = str(ROOT / "bench" / "perf.py")
    out = {"warm": _last_json([sys.executable, perf, "--sizes", str(size), "--reps", str(reps)], "speed")["rows"][0]}
    if cold:
        workers = str(os.cpu_count() or 1)  # the product's default: one encoder process a core
        out["cold"] = _last_json([sys.executable, perf, "cold", "--sizes", str(size), "--reps", str(min(reps, 10)),
                                  "--workers", workers], "speed, cold")["rows"][0]
    return out


def measure_faults(trials: int, writers: int, writes: int, only: str) -> dict[str, Any]:
    """bench/faults.py's scenarios at the given counts."""
    cmd = [sys.executable, str(ROOT / "bench" / "faults.py"), "--trials", str(trials), "--writers", str(writers),
           "--writes", str(writes), "--max-reads", "3", "--build-trials", str(trials), "--build-memories", "1000"]
    if only:
        cmd += ["--only", only]
    return _last_json(cmd, "faults")


def _f(x: float) -> str:
    return f"{x:.3f}"


def _mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def _hits(m: dict[str, float]) -> str:
    return f"{_f(m['hit@1'])} / {_f(m['hit@5'])} / {_f(m['hit@10'])}, {_f(m['mrr'])}"


def _goal(text: str, ok: bool | None) -> str:
    return f"{text} {_mark(ok)}" if ok is not None else f"{text} (not checked at this size)"


def render_quality(fig: dict[str, Any]) -> tuple[list[str], dict[str, bool]]:
    """The quality rows, and whether each data set met its goal."""
    lo, kw, gb, ident = fig["locomo"], fig["keyword_only"], fig["gitbugs"], fig["identifiers"]
    base = lo.get("baselines", {})

    def rec(m: dict[str, float]) -> str:
        return f"{_f(m['recall@5'])} / {_f(m['recall@10'])} / {_f(m['recall@25'])}"

    lo_ok = lo["recall@10"] >= LOCOMO_RECALL10 and lo["abstention"] >= LOCOMO_ABSTENTION
    lines = [
        f"| LoCoMo dev, turns, cat 1-4 | recall@5 / @10 / @25 | **{rec(lo)}** | BM25 alone {rec(base['bm25'])}; "
        f"vector alone {rec(base['vector'])} | R@10 ≥ {LOCOMO_RECALL10} {_mark(lo['recall@10'] >= LOCOMO_RECALL10)} |",
        f"| | abstention on mismatched queries | **{_f(lo['abstention'])}** | "
        f"BM25 alone {_f(base['bm25']['abstention'])}; vector alone {_f(base['vector']['abstention'])} | "
        f"≥ {LOCOMO_ABSTENTION:.2f} "
        f"{_mark(lo['abstention'] >= LOCOMO_ABSTENTION)} |",
    ]
    cats = lo.get("per_category", {})
    per = "; ".join(f"{eval_locomo.CATEGORY_NAMES.get(int(c), c)} {_f(m['recall@10'])} (n {m['n']})"
                    for c, m in cats.items() if int(c) in eval_locomo.HEADLINE_CATEGORIES)
    lines.append(f"| | recall@10 per category | {per} | | |")
    lines.append(f"| | read p50 / p95 (query encode included) | {lo['p50_ms']} / {lo['p95_ms']} ms | | |")
    lines.append(f"| LoCoMo, keyword only (no model) | recall@5 / @10 / @25, abstention | {rec(kw)}, "
                 f"{_f(kw['abstention'])} | | |")
    gb_ok = True
    for q, name in (("title", "title-only"), ("title_body", "title+body")):
        ours = gb[q]
        others = [gb["baselines"][b][q] for b in ("bm25", "vector") if b in gb.get("baselines", {})]
        ok = all(ours[k] >= max(o[k] for o in others) for k in ("hit@1", "hit@5", "hit@10", "mrr")) if others else False
        gb_ok &= ok
        cols = "; ".join(f"{label} {_hits(gb['baselines'][b][q])}" for b, label in
                         (("bm25", "BM25 alone"), ("vector", "vector alone")) if b in gb.get("baselines", {}))
        lines.append(f"| GitBugs Hadoop, {name} | hit@1 / @5 / @10, MRR | **{_hits(ours)}** | {cols} | "
                     f"≥ the better baseline on each {_mark(ok)} |")
    id_ok = True
    for half, name in (("whole", "whole names"), ("inner", "names inside dotted calls")):
        ours, bm25 = ident[half]["memstore"], ident[half]["bm25"]
        ok = ours["hit@5"] >= IDENT_HIT5 and ours["empty"] <= IDENT_EMPTY
        id_ok &= ok
        lines.append(f"| identifiers (requests), {name} | hit@1 / @5 / @10, MRR, empty | **{_hits(ours)}, "
                     f"{_f(ours['empty'])}** | plain BM25 {_hits(bm25)}, {_f(bm25['empty'])} | hit@5 ≥ {IDENT_HIT5}, "
                     f"empty ≤ {IDENT_EMPTY} {_mark(ok)} |")
    return lines, {"LoCoMo": lo_ok, "GitBugs": gb_ok, "identifiers": id_ok}


def render_speed(fig: dict[str, Any]) -> tuple[list[str], dict[str, bool]]:
    """The speed rows (bench/perf.py), and the goals checked at the run's size."""
    w = fig["warm"]
    n = w["n"]
    at_goal_size = n >= READ_GOAL_N
    gap = round(w["cli_read_daemon_p50_ms"] - w["python_start_p50_ms"], 1)
    read_ok = (w["cli_read_daemon_p50_ms"] <= READ_P50_MS and w["cli_read_daemon_p95_ms"] <= READ_P95_MS
               and gap <= WARM_GAP_MS) if at_goal_size else None
    write_ok = w["write_socket_p50_ms"] <= WRITE_P50_MS
    visible_ok = w["visible_max_ms"] <= VISIBLE_MS
    lines = [
        f"| speed, {n:,} memories (bench/perf.py) | CLI read through the daemon p50 / p95 | "
        f"**{w['cli_read_daemon_p50_ms']} / {w['cli_read_daemon_p95_ms']} ms** | `python -c pass` p50 "
        f"{w['python_start_p50_ms']} ms (gap +{gap}) | "
        + _goal(f"p50 ≤ {READ_P50_MS:.0f}, p95 ≤ {READ_P95_MS:.0f}, gap ≤ {WARM_GAP_MS:.0f} ms at 10k", read_ok) + " |",
        f"| | `memstore context` through the daemon p50 / p95 | {w['cli_context_daemon_p50_ms']} / "
        f"{w['cli_context_daemon_p95_ms']} ms | in-process p50 {w['cli_context_inproc_p50_ms']} ms | |",
        f"| | library read (watched workspace) p50 / p95 | {w['lib_read_p50_ms']} / {w['lib_read_p95_ms']} ms | "
        f"floor: vector search {w['faiss_p50_ms']}, keyword search {w['whoosh_p50_ms']}, query encode "
        f"{w['encode_p50_ms']} ms | |",
        f"| | write through the daemon p50 / p95 (CLI p50) | **{w['write_socket_p50_ms']} / {w['write_socket_p95_ms']} "
        f"ms** ({w['write_cli_p50_ms']} ms) | | p50 ≤ {WRITE_P50_MS:.0f} ms {_mark(write_ok)} |",
        f"| | a file changed by hand -> visible to a read, p50 / max | **{w['visible_p50_ms']} / "
        f"{w['visible_max_ms']} ms** | | ≤ 1 s {_mark(visible_ok)} |",
        f"| | rebuild from the embedding cache; daemon peak RSS | {w['rebuild_cache_s']} s; "
        f"{w['daemon_peak_rss_mb']} MB | | |",
    ]
    checked = [ok for ok in (read_ok, write_ok, visible_ok) if ok is not None]
    c = fig.get("cold")
    if c:
        first_ok = c["first_read_ms"] <= FIRST_READ_MS if c["n"] >= FIRST_READ_GOAL_N else None
        lines += [
            f"| first read after a clone, {c['n']:,} memories (bench/perf.py cold) | first read, daemon running / "
            f"none yet | **{c['first_read_ms']} / {c.get('no_daemon_first_read_ms')} ms** | `git clone` "
            f"{c['clone_s']} s | " + _goal(f"≤ {FIRST_READ_MS / 1000:.0f} s at 10k (daemon running)", first_ok) + " |",
            f"| | every memory with a vector ({c['workers']} encoder processes) | {c['all_vectors_s']} s "
            f"({c['embed_rate_per_s']}/s) | encoder alone {c['encoder_alone_per_s']} texts/s | |",
            f"| | read while embedding p50 / max; warm read p50 / p95 | {c['read_while_embedding_p50_ms']} / "
            f"{c['read_while_embedding_max_ms']}; {c['warm_read_p50_ms']} / {c['warm_read_p95_ms']} ms | | |",
        ]
        checked += [first_ok] if first_ok is not None else []
    # A goal stated at 10k is not met or missed by a smaller run: the key says what was checked.
    key = "speed" if at_goal_size and (not c or c["n"] >= FIRST_READ_GOAL_N) else \
        f"speed (the goals that apply at {n:,} memories)"
    return lines, {key: all(checked)}


def render_faults(fig: dict[str, Any]) -> tuple[list[str], dict[str, bool]]:
    """One row per bench/faults.py scenario; the goal is nothing acknowledged lost, no corrupt store."""
    lines = []
    ok_all = True
    for i, r in enumerate(fig["rows"]):
        ok = r["lost"] == 0 and r["corrupt"] == 0 and r["failed_reads"] == 0
        ok_all &= ok
        healed = "" if r["reads_until_healed"] is None else f", healed by read {r['reads_until_healed']}"
        head = "faults (bench/faults.py): " if i == 0 else ""
        trials = f"{r['trials']} trial{'' if r['trials'] == 1 else 's'}"
        lines.append(f"| {head}{r['scenario']}, {trials} | acknowledged / on disk / lost; "
                     f"failed reads; corrupt stores | **{r['acknowledged']} / {r['on_disk']} / {r['lost']}; "
                     f"{r['failed_reads']}; {r['corrupt']}**{healed} | | 0 lost, 0 failed, 0 corrupt {_mark(ok)} |")
    return lines, {"faults": ok_all}


def render(fig: dict[str, Any], stamp: str, sizes: str = "") -> str:
    """The table (Markdown), with the command, the code it was measured on and the machine's load."""
    lines = [f"Measured {stamp}, with", "", f"    {COMMAND}", ""]
    if sizes:
        lines += [sizes, ""]
    if "quality" in fig:
        lines += ["The shipped defaults; LoCoMo and identifiers through `memstore.read` over real stores, GitBugs",
                  "through `memstore.read.ranking.rank` (which can leave the query's own report out).", ""]
    lines += ["| benchmark | metric | memstore | beside it, same run | goal |", "|---|---|---|---|---|"]
    met: dict[str, bool] = {}
    for part, fn in (("quality", render_quality), ("speed", render_speed), ("faults", render_faults)):
        if part in fig:
            rows, ok = fn(fig[part])
            lines += rows
            met.update(ok)
    lines += ["", "Goals met: " + ", ".join(f"{k} {_mark(v)}" for k, v in met.items()) + "."]
    return "\n".join(lines) + "\n"


def replace_between(text: str, table: str) -> str:
    """``text`` with the part between the headline markers replaced by ``table``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise MarkerError(f"expected one {BEGIN} followed by one {END}")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def load() -> str:
    """The machine's 1-minute load average and its CPU count: on a shared machine they matter."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "unknown"


def stamp(load_before: str = "") -> str:
    """When, on which code, and (given the load at the start) under what load the table was measured."""
    day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    where = f"; load average {load_before} at the start, {load()} at the end, {os.cpu_count()} CPUs" if load_before \
        else ""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "memstore"],
                               cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{day}{where}"
    return f"{day} (code at {commit}{', with uncommitted changes to memstore/' if dirty else ''}){where}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "eval",
                    help="the evaluation data: locomo/, gitbugs/, identifiers/ (default ../shared/eval)")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--write", action="store_true", help="rewrite the table between the markers of --results")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--skip", nargs="+", choices=PARTS, default=[], help="parts not to measure")
    ap.add_argument("--speed-size", type=int, default=1000, help="memories in perf.py's store (goals are at 10k)")
    ap.add_argument("--speed-reps", type=int, default=16, help="reads per figure in perf.py")
    ap.add_argument("--no-cold", action="store_true", help="skip perf.py cold (the first read after a clone)")
    ap.add_argument("--fault-trials", type=int, default=3, help="faults.py --trials (its own default: 50)")
    ap.add_argument("--fault-writers", type=int, default=4, help="faults.py --writers (its own default: 8)")
    ap.add_argument("--fault-writes", type=int, default=10, help="faults.py --writes (its own default: 200)")
    ap.add_argument("--fault-only", default="", help="faults.py --only (default: every scenario)")
    args = ap.parse_args(argv)
    parts = [p for p in PARTS if p not in args.skip]
    if not parts:
        ap.error("--skip leaves nothing to measure")
    if args.write:
        # Checked before minutes of measuring: a file the table cannot go into is refused now.
        try:
            replace_between(args.results.read_text(), "")
        except (OSError, MarkerError) as exc:
            print(f"headline: cannot write {args.results}: {exc}", file=sys.stderr)
            return 2
    load_before = load()
    fig: dict[str, Any] = {}
    sizes = []
    if "quality" in parts:
        fig["quality"] = measure_quality(args.data_dir, args.cache_dir)
    if "speed" in parts:
        fig["speed"] = measure_speed(args.speed_size, args.speed_reps, cold=not args.no_cold)
        sizes.append(f"speed at {args.speed_size:,} memories, {args.speed_reps} reads per figure"
                     + ("" if args.no_cold else ", the cold run's first read in one clone"))
    if "faults" in parts:
        fig["faults"] = measure_faults(args.fault_trials, args.fault_writers, args.fault_writes, args.fault_only)
        sizes.append(f"faults at {args.fault_trials} trials, {args.fault_writers} writers x {args.fault_writes} "
                     "writes (`python bench/faults.py` alone: 50 trials, 8 x 200)")
    skipped = [p for p in PARTS if p not in parts]
    note = "; ".join(sizes)
    if skipped:
        note += ("; " if note else "") + f"not measured in this run: {', '.join(skipped)}"
    table = render(fig, stamp(load_before), f"Sizes: {note}." if note else "")
    print(table, end="")
    if args.write:
        args.results.write_text(replace_between(args.results.read_text(), table))
        log(f"headline: wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
