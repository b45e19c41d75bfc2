"""How old is what a vote speaks of when the same problem comes back? Duplicate bug reports of
Apache Hadoop (the shared GitBugs set): for each pair of duplicates, the days from the first
report's resolution (when its fix was known, and a vote on it could be cast) to the second
report (when that vote would be read again). Prints the gaps' quantiles and, for each candidate
half-life of global utility, the mean weight such a vote keeps and the share of recurrences it
still weighs at half or more.

    python bench/research/vote_age.py --data-dir ../shared/eval
"""

from __future__ import annotations

import argparse
import json
import statistics
from datetime import datetime
from pathlib import Path


def _time(s: str) -> datetime:
    return datetime.strptime(s, "%d/%b/%y %H:%M")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, required=True, help="the shared eval data (holding gitbugs/)")
    ap.add_argument("--half-lives", type=int, nargs="+", default=[30, 90, 180, 365, 730])
    args = ap.parse_args()
    folder = args.data_dir / "gitbugs"
    docs = {d["id"]: d for d in map(json.loads, (folder / "hadoop_corpus.jsonl").read_text().splitlines())}
    qrels = json.loads((folder / "hadoop_qrels.json").read_text())
    seen: set[frozenset[str]] = set()
    gaps: list[int] = []
    for qid, dups in qrels.items():
        for other in dups:
            pair = frozenset((qid, other))
            if qid not in docs or other not in docs or pair in seen:
                continue
            seen.add(pair)
            first, second = sorted((docs[qid], docs[other]), key=lambda d: _time(d["created"]))
            known = _time(first["resolved"]) if first.get("resolved") else _time(first["created"])
            gaps.append(max(0, (_time(second["created"]) - known).days))
    gaps.sort()
    n = len(gaps)
    print(f"{n} duplicate pairs; days from the first report's resolution to the second report: "
          f"p25 {gaps[n // 4]}, median {statistics.median(gaps):g}, p75 {gaps[3 * n // 4]}, "
          f"p90 {gaps[9 * n // 10]}, max {gaps[-1]}")
    print("| half-life days | mean weight at recurrence | recurrences weighed >= 1/2 | a 2-year-old vote weighs |")
    print("|---|---|---|---|")
    for h in args.half_lives:
        mean = statistics.mean(0.5 ** (g / h) for g in gaps)
        share = sum(1 for g in gaps if g <= h) / n
        print(f"| {h} | {mean:.2f} | {share:.2f} | {0.5 ** (730 / h):.3f} |")


if __name__ == "__main__":
    main()
