"""Where a clone's first read goes, in one process standing in for the daemon (model loaded,
saves deferred, the read's wait bounded): a fresh clone of ``perf.py cold``'s origin, then one
read under cProfile (or timed by phase with ``--phases``).

    python bench/research/first_read_profile.py 10000            # the 40 costliest functions, cumulative
    python bench/research/first_read_profile.py 10000 --phases   # catalog / index sync / the read, ms
    python bench/research/first_read_profile.py 100000 --breakdown   # each step of the load, ms (cProfile)
    python bench/research/first_read_profile.py 100000 --phases --clone /tmp/c100k   # cloned once, reused

``--clone DIR`` clones into DIR once and later runs reuse it with its ``.memory/.index/`` removed:
what a fresh clone's first read finds (the files just written, no projection), without paying
for a clone of 100k files and its removal (minutes on a loaded machine) on every run.

The cyclic GC is paused, as the daemon pauses it for a workspace's first request. No step waits
for or starts the store's full embedding: the read embeds only its probe and candidates.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from perf import QUERIES, git_origin  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("--phases", action="store_true")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--breakdown", action="store_true",
                    help="the cumulative ms of each step of the load (under cProfile: ~1.3x slower)")
    ap.add_argument("--corpus", choices=("templates", "mixed"), default="templates",
                    help="as perf.py cold's (mixed: made by a perf.py cold --corpus mixed run first)")
    ap.add_argument("--clone", type=Path, help="clone here once; later runs reuse it without its .index/")
    a = ap.parse_args()
    from memstore.index.embedder import get_embedder
    from memstore.read.retrieve import read
    from memstore.read.scope import open_scope
    from memstore.read.tuning import params_from_config
    from memstore.store.workspace import open_workspace

    get_embedder().encode(["warm up"])
    gc.disable()  # as the daemon runs a workspace's first request (docs/decisions/gc-during-first-read.md)
    work = Path(tempfile.mkdtemp(prefix="msprof-", dir="/tmp"))
    try:
        clone = a.clone.resolve() if a.clone else work / "clone"
        if (clone / ".git").is_dir():
            shutil.rmtree(clone / ".memory" / ".index", ignore_errors=True)
        else:
            subprocess.run(["git", "clone", "-q", str(git_origin(a.n, a.corpus)), str(clone)], check=True)
        ws = open_workspace(cwd=clone)
        ws.defer_saves = True  # as the daemon opens a workspace
        ws.embed_wait = ws.config.read_wait
        if a.phases:
            from memstore.index import keyword_build

            # The daemon starts the keyword build after the read has answered (its embedding
            # thread's next refresh); a second read here would start it mid-read.
            keyword_build.KeywordBuild.start = lambda self: None  # type: ignore[method-assign]
            # CPU seconds beside wall seconds: on a shared machine the wall time of a phase
            # moves with the load, its CPU time far less.
            marks = [(time.perf_counter(), time.process_time())]
            ws.catalog("repo")
            marks.append((time.perf_counter(), time.process_time()))
            open_scope(ws, False, params_from_config(ws.config))
            marks.append((time.perf_counter(), time.process_time()))
            read(ws, {"query": QUERIES[0]})
            marks.append((time.perf_counter(), time.process_time()))
            spans = [("catalog", *marks[0:2]), ("index sync", *marks[1:3]), ("read", *marks[2:4]),
                     ("total", marks[0], marks[3])]
            print(", ".join(f"{name} {1000 * (b[0] - a[0]):.0f} ms (cpu {1000 * (b[1] - a[1]):.0f})"
                            for name, a, b in spans))
            return 0
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        read(ws, {"query": QUERIES[0]})
        prof.disable()
        print(f"first read in-process: {1000 * (time.perf_counter() - t0):.0f} ms (under cProfile)")
        stats = pstats.Stats(prof)
        if a.breakdown:
            print_breakdown(stats)
        else:
            stats.sort_stats("cumulative").print_stats(a.top)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


# The steps of a first read, by the function that does each (file, function name); cumulative,
# so a step's figure includes the steps it calls.
STEPS = [
    ("catalog: the whole refresh", "store/catalog.py", "refresh"),
    ("catalog: walk (scandir + lstat)", "store/disk.py", "_walk"),
    ("catalog: parse one file (read + frontmatter + Memory)", "store/catalog.py", "_parse"),
    ("  read the file", "store/disk.py", "read_file"),
    ("  read the file (one read, from the walk's lstat)", "store/files.py", "read_walked"),
    ("  frontmatter (parse_markdown)", "store/files.py", "parse_markdown"),
    ("  Memory from the fields", "store/disk.py", "memory_from_file"),
    ("catalog: views (ids, conflicts)", "store/catalog.py", "_rebuild_views"),
    ("index sync (StoreIndex.refresh)", "index/store_index.py", "refresh"),
    ("  plan (doc and text keys)", "index/store_index.py", "_plan"),
    ("  keyword build planned / scan lane", "index/keyword_build.py", "later"),
    ("  scan lane: set_docs", "index/scanlane.py", "set_docs"),
    ("  embed (probe)", "index/embedding.py", "embed"),
    ("scope: merged view", "read/scopeview.py", "scope_view"),
    ("read: answer_in", "read/retrieve.py", "answer_in"),
    ("  candidates embedded first", "read/retrieve.py", "_embed_candidates"),
    ("  scan lane: hits", "index/scanlane.py", "hits"),
    ("  scan lane: analyse", "index/scanlane.py", "_analyse_at"),
    ("  scan lane: files holding a term", "index/scanlane.py", "_holding"),
    ("  rows", "read/retrieve.py", "scoped_rows"),
    ("  rows waiting for vectors", "read/rowspace.py", "partial_rows"),
    ("  ranking", "read/ranking.py", "rank"),
    ("read (all)", "read/retrieve.py", "read"),
]


def print_breakdown(stats: pstats.Stats) -> None:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for label, file, name in STEPS:
        hits = [v for (f, _, fn), v in raw.items() if fn == name and f.endswith(file)]
        if hits:
            calls = sum(v[1] for v in hits)
            print(f"{label:55s} {1000 * sum(v[3] for v in hits):8.0f} ms  ({calls} calls)")


if __name__ == "__main__":
    sys.exit(main())
