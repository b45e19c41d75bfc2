"""What ``read --explain`` costs, beside the plain read it must leave as it was.

Run (from the repo root, venv active):

    python bench/explain_speed.py                  # 1k memories, 30 reads each way
    python bench/explain_speed.py --sizes 1000 10000 --reps 20
    python bench/explain_speed.py --plain-only     # a memstore without --explain: its plain reads

The store is ``bench/perf.py``'s (generated once under ``bench/.cache/perf/``, its embeddings
cached). Reads go through the library in one process with a watcher, as a daemon answers them,
alternating plain and explained so load on a shared machine falls on both alike; each line
prints the plain read's p50 / p90 beside the explained one's, in wall time and in this process's
CPU time (steadier on a loaded machine: it leaves out the time spent waiting for a core). To
compare a plain read before and after a change, run ``--plain-only`` from a checkout of each
(the store is regenerated per checkout).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from perf import CACHE, QUERIES, pct, prepare  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--plain-only", action="store_true", help="time plain reads alone")
    a = ap.parse_args()
    from memstore.read import retrieve
    from memstore.store.workspace import open_workspace

    CACHE.mkdir(parents=True, exist_ok=True)
    print(f"# load average {os.getloadavg()[0]:.2f}; {a.reps} reads each; ms")
    print(f"{'n':>7}  {'plain p50':>9}  {'plain p90':>9}  {'explain p50':>11}  {'explain p90':>11}"
          f"  {'plain cpu p50':>13}  {'explain cpu p50':>15}")
    for n in a.sizes:
        root, _ = prepare(n, CACHE / "embeddings")
        ws = open_workspace(cwd=root, env={"MEMSTORE_STORE": str(root), "MEMSTORE_HOME": str(CACHE / "global")})
        ws.watch()
        for q in QUERIES[:3]:
            retrieve.read(ws, {"query": q}, log_episode=False)
        plain: list[float] = []
        explained: list[float] = []
        cpu: dict[str, list[float]] = {"plain": [], "explain": []}
        for i in range(a.reps):
            q = QUERIES[i % len(QUERIES)]
            t0, c0 = time.perf_counter(), time.process_time()
            retrieve.read(ws, {"query": q}, log_episode=False)
            plain.append(time.perf_counter() - t0)
            cpu["plain"].append(time.process_time() - c0)
            if not a.plain_only:
                t0, c0 = time.perf_counter(), time.process_time()
                retrieve.read(ws, {"query": q, "explain": True}, log_episode=False)
                explained.append(time.perf_counter() - t0)
                cpu["explain"].append(time.process_time() - c0)
        ws.close()
        shown = [f"{pct(plain, p) * 1000:9.1f}" for p in (50, 90)]
        shown += [f"{pct(explained, p) * 1000:11.1f}" if explained else f"{'-':>11}" for p in (50, 90)]
        shown.append(f"{pct(cpu['plain'], 50) * 1000:13.1f}")
        shown.append(f"{pct(cpu['explain'], 50) * 1000:15.1f}" if cpu["explain"] else f"{'-':>15}")
        print(f"{n:>7}  {'  '.join(shown)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
