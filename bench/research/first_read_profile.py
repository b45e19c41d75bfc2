"""Where a clone's first read goes, in one process standing in for the daemon (model loaded,
saves deferred, the read's wait bounded): a fresh clone of ``perf.py cold``'s origin, then one
read under cProfile (or timed by phase with ``--phases``).

    python bench/research/first_read_profile.py 10000            # the 40 costliest functions, cumulative
    python bench/research/first_read_profile.py 10000 --phases   # catalog / index sync / the read, ms
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from perf import QUERIES, git_origin  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("--phases", action="store_true")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--corpus", choices=("templates", "mixed"), default="templates",
                    help="as perf.py cold's (mixed: made by a perf.py cold --corpus mixed run first)")
    a = ap.parse_args()
    from memstore.index.embedder import get_embedder
    from memstore.read.retrieve import read
    from memstore.read.scope import open_scope
    from memstore.read.tuning import params_from_config
    from memstore.store.workspace import open_workspace

    get_embedder().encode(["warm up"])
    work = Path(tempfile.mkdtemp(prefix="msprof-", dir="/tmp"))
    try:
        clone = work / "clone"
        subprocess.run(["git", "clone", "-q", str(git_origin(a.n, a.corpus)), str(clone)], check=True)
        ws = open_workspace(cwd=clone)
        ws.defer_saves = True  # as the daemon opens a workspace
        ws.embed_wait = ws.config.read_wait
        if a.phases:
            from memstore.index import keyword_build

            # The daemon starts the keyword build after the read has answered (its embedding
            # thread's next refresh); a second read here would start it mid-read.
            keyword_build.KeywordBuild.start = lambda self: None  # type: ignore[method-assign]
            t0 = time.perf_counter()
            ws.catalog("repo")
            t1 = time.perf_counter()
            open_scope(ws, False, params_from_config(ws.config))
            t2 = time.perf_counter()
            read(ws, {"query": QUERIES[0]})
            t3 = time.perf_counter()
            print(f"catalog {1000 * (t1 - t0):.0f} ms, index sync {1000 * (t2 - t1):.0f} ms, "
                  f"read {1000 * (t3 - t2):.0f} ms, total {1000 * (t3 - t0):.0f} ms")
            return 0
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        read(ws, {"query": QUERIES[0]})
        prof.disable()
        print(f"first read in-process: {1000 * (time.perf_counter() - t0):.0f} ms (under cProfile)")
        pstats.Stats(prof).sort_stats("cumulative").print_stats(a.top)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
