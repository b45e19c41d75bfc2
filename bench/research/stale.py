"""Staleness after a commit: the first read after HEAD moves works out `stale` for its results
with git (the cache is keyed by HEAD). Prints the time of that first annotate and of a cached
one for N results citing files, with the git runs counted, beside one `git rev-parse` run.

    python bench/research/stale.py --results 10 --reps 5
    python bench/research/stale.py --results 10 --reps 5 --lines   # citations of L10-L20

With ``--lines`` each memory cites lines 10-20 of a 50-line file; a third of the files change
inside those lines, a third above them (not stale when lines are carried through the diff).

Before/after a change, run this checkout's script against the other code with
``PYTHONPATH=<that checkout>`` (the path given first wins over the one inserted here).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from memstore import gitops  # noqa: E402
from memstore.git import stale  # noqa: E402
from memstore.store.workspace import open_workspace  # noqa: E402
from memstore.verbs import api  # noqa: E402

_runs = [0]
_run = gitops.run


def _counting(*args, **kwargs):  # type: ignore[no-untyped-def]
    _runs[0] += 1
    return _run(*args, **kwargs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--lines", action="store_true", help="cite lines 10-20 instead of whole files")
    args = ap.parse_args()
    gitops.run = _counting  # type: ignore[assignment]
    root = Path(tempfile.mkdtemp(prefix="memstore-stale-"))

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=root, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("config", "user.email", "bench@example.com")
    git("config", "user.name", "bench")
    (root / "src").mkdir()
    n = args.results
    body = lambda i, at=0: "".join(f"X{k} = {i if k != at else 99}\n" for k in range(1, 51))  # noqa: E731
    for i in range(n):
        (root / "src" / f"m{i}.py").write_text(body(i) if args.lines else f"X = {i}\n")
    git("add", ".")
    git("commit", "-qm", "code")
    api.init(open_workspace(cwd=root))
    ids = [api.write(open_workspace(cwd=root), {"memory": {
        "kind": "fact", "scope": "repo", "text": f"Module m{i} sets X to {i} on the billing path {i}.",
        "evidence_refs": [f"file:src/m{i}.py" + ("#L10-L20" if args.lines else ""), "user:bench"]},
        "allow_duplicate": True})["id"] for i in range(n)]
    git("add", "-A")
    git("commit", "-qm", "memories")
    for i in range(0, n, 3):
        (root / "src" / f"m{i}.py").write_text(body(i, 15) if args.lines else "X = 99\n")
        if args.lines and i + 1 < n:
            (root / "src" / f"m{i + 1}.py").write_text(body(i + 1, 2))
    git("commit", "-qam", "change a third")
    ws = open_workspace(cwd=root)
    memories = ws.catalog("repo").memories
    first, cached, floor, runs = [], [], [], 0
    for rep in range(args.reps):
        (root / "NOTES").write_text(str(rep))
        git("add", "NOTES")
        git("commit", "-qm", f"move HEAD {rep}")
        results = [{"id": i, "scope": "repo"} for i in ids]
        _runs[0] = 0
        t = time.perf_counter()
        stale.annotate(ws.repo, results, memories)
        first.append(time.perf_counter() - t)
        runs = _runs[0]
        t = time.perf_counter()
        stale.annotate(ws.repo, results, memories)
        cached.append(time.perf_counter() - t)
        t = time.perf_counter()
        git("rev-parse", "HEAD")
        floor.append(time.perf_counter() - t)
    ms = lambda xs: f"{statistics.median(xs) * 1000:.1f}"  # noqa: E731
    n_stale = sum(1 for r in results if r.get("stale"))
    print("| results | stale | first after a commit p50 ms | git runs | cached p50 ms | one git run p50 ms |")
    print("|---|---|---|---|---|---|")
    print(f"| {n} | {n_stale} | {ms(first)} | {runs} | {ms(cached)} | {ms(floor)} |")


if __name__ == "__main__":
    main()
