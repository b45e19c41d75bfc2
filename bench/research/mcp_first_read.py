"""The MCP server's first read after a clone, answered in-process before any daemon runs, with
the cyclic GC paused for the load (shipped) and as it was before (collector on), in alternating
rounds; each round a fresh process, a fresh clone of ``perf.py cold``'s origin, and its own
runtime directory (the daemon the read starts is killed before the next round).

    python bench/research/mcp_first_read.py 10000 --rounds 4
    python bench/research/mcp_first_read.py 10000 --corpus mixed --eval-dir ../shared/eval --rounds 3

Prints each round (wall time of the call, time spent in collections during it, full
collections) and the medians per variant.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

QUERY = "flaky pytest fixture timeout"


def one(variant: str, clone: Path, query: str) -> dict[str, float]:
    """Runs in the child process: one read through ``mcp_server.Backend`` in ``clone``."""
    import contextlib
    import gc

    from memstore.surfaces import loadgc, mcp_server

    if variant == "collector-on":
        loadgc.LoadGC.transient = lambda self, after=0.0: contextlib.nullcontext()  # type: ignore[method-assign]
    spent = {"gc_ms": 0.0, "full": 0, "t": 0.0}

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            spent["t"] = time.perf_counter()
        else:
            spent["gc_ms"] += 1000 * (time.perf_counter() - spent["t"])
            spent["full"] += info["generation"] == 2

    os.chdir(clone)
    backend = mcp_server.Backend()
    gc.callbacks.append(timed)
    t0 = time.perf_counter()
    answer = backend.verb("read", {"query": query})
    wall = 1000 * (time.perf_counter() - t0)
    gc.callbacks.remove(timed)
    return {"wall_ms": wall, "gc_ms": spent["gc_ms"], "full": spent["full"], "results": len(answer["results"])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--corpus", choices=("templates", "mixed"), default="templates")
    ap.add_argument("--eval-dir", type=Path, default=None)
    ap.add_argument("--query", default=QUERY)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one(a.child[0], Path(a.child[1]), a.query)))
        return 0
    import perf

    if a.eval_dir:
        perf.EVAL_DIR[0] = a.eval_dir
    origin = perf.git_origin(a.n, a.corpus)
    got: dict[str, list[dict[str, float]]] = {"shipped": [], "collector-on": []}
    for r in range(a.rounds):
        for variant in (("collector-on", "shipped") if r % 2 else ("shipped", "collector-on")):
            work = Path(tempfile.mkdtemp(prefix="msmcp-", dir="/tmp"))
            try:
                subprocess.run(["git", "clone", "-q", str(origin), str(work / "c")], check=True)
                env = {**os.environ, "MEMSTORE_RUNTIME_DIR": str(work / "run"), "MEMSTORE_DAEMON": "1"}
                out = subprocess.run([sys.executable, __file__, str(a.n), "--query", a.query,
                                      "--child", variant, str(work / "c")],
                                     env=env, capture_output=True, text=True, check=True)
                row = json.loads(out.stdout.strip().splitlines()[-1])
                got[variant].append(row)
                print(f"round {r + 1} {variant:13s} {row['wall_ms']:7.0f} ms, in collections {row['gc_ms']:5.0f} ms "
                      f"({row['full']} full), {row['results']} results", flush=True)
            finally:
                for _ in range(50):  # the daemon the read started, gone before the next round
                    if subprocess.run(["pkill", "-f", f"memstore serve.*{work}"]).returncode == 0:
                        break
                    time.sleep(0.1)
                time.sleep(1)
                subprocess.run(["rm", "-rf", str(work)], check=False)
    for variant, rows in got.items():
        print(f"{variant:13s} p50 {statistics.median(r['wall_ms'] for r in rows):7.0f} ms, in collections "
              f"{statistics.median(r['gc_ms'] for r in rows):5.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
