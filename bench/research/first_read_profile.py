"""Where a clone's first read goes, in one process standing in for the daemon (model loaded,
saves deferred, the read's wait bounded): a fresh clone of ``perf.py cold``'s origin, then one
read under cProfile (or timed by phase with ``--phases``).

    python bench/research/first_read_profile.py 10000            # the 40 costliest functions, cumulative
    python bench/research/first_read_profile.py 10000 --phases   # catalog / index sync / the read, ms
    python bench/research/first_read_profile.py 100000 --breakdown   # each step of the load, ms (cProfile)
    python bench/research/first_read_profile.py 100000 --phases --clone /tmp/c100k   # cloned once, reused
    python bench/research/first_read_profile.py 100000 --overlap --clone /tmp/c100k  # partial against full

``--phases`` loads the store as a daemon's first read does: the files that may hold the query's
rarer words parsed, the others left unread (``Catalog.refresh``, ``wanted``) while more than
``MEMSTORE_FIRST_PARSE`` wait; ``MEMSTORE_FIRST_PARSE=1000000000`` parses every file first, as
before. ``--overlap``: for each of perf.py's queries, the first answer of a partial load beside
the first answer of a full one (both embedding only their probe and candidates), as top-10 overlap.

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
import os
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
    ap.add_argument("--overlap", action="store_true", help="top-10 of a partial first answer against a full one")
    ap.add_argument("--queries", type=int, default=len(QUERIES), help="--overlap: the first N of perf.py's queries")
    a = ap.parse_args()
    from memstore.index.embedder import get_embedder
    from memstore.index.store_index import StoreIndex
    from memstore.read.retrieve import read
    from memstore.store.catalog import Catalog
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
        if a.overlap:
            return overlap(clone, QUERIES[:a.queries])
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
            # One read, as the daemon's first request: the catalog's and the index's refreshes
            # timed inside it (a second look at a partial catalog would complete it).
            spent = {"catalog": [0.0, 0.0], "index sync": [0.0, 0.0]}
            timed(Catalog, "refresh", spent["catalog"])
            timed(StoreIndex, "refresh", spent["index sync"])
            t0, c0 = time.perf_counter(), time.process_time()
            answer = read(ws, {"query": QUERIES[0]})
            total = [time.perf_counter() - t0, time.process_time() - c0]
            spans = [*spent.items(), ("read", [total[0] - sum(v[0] for v in spent.values()),
                                               total[1] - sum(v[1] for v in spent.values())]), ("total", total)]
            cat = ws.catalog("repo", refresh=False) if "partial" not in answer or "unread" not in answer["partial"] \
                else None
            parsed = (f"every memory file parsed ({len(cat.memories)} served)" if cat is not None
                      else f"{answer['partial']['unread']} memory files left unread")
            print(", ".join(f"{name} {1000 * v[0]:.0f} ms (cpu {1000 * v[1]:.0f})" for name, v in spans)
                  + f"; {parsed}; {len(answer['results'])} results")
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


def timed(cls: Any, name: str, into: list[float]) -> None:
    """Add the wall and CPU seconds of every call of ``cls.name`` to ``into`` (outermost calls)."""
    inner = getattr(cls, name)
    depth = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            depth[0] -= 1
            if not depth[0]:
                into[0] += time.perf_counter() - t0
                into[1] += time.process_time() - c0

    setattr(cls, name, wrapper)


def overlap(clone: Path, queries: list[str]) -> int:
    """Each query's first answer from a partial load against the same first read with every
    file parsed first: the share of the full answer's top 10 the partial one holds."""
    from memstore.read.retrieve import read
    from memstore.store import catalog
    from memstore.store.workspace import open_workspace

    gc.enable()  # two loads per query: what one leaves is collected before the next
    shares = []
    for query in queries:
        got = {}
        for label, first_parse in (("partial", catalog.FIRST_PARSE), ("full", 10**9)):
            shutil.rmtree(clone / ".memory" / ".index", ignore_errors=True)
            os.environ[catalog.FIRST_PARSE_ENV] = str(first_parse)
            ws = open_workspace(cwd=clone)
            ws.defer_saves = True
            ws.embed_wait = ws.config.read_wait
            t0 = time.perf_counter()
            answer = read(ws, {"query": query}, log_episode=False)
            got[label] = ([r["id"] for r in answer["results"]][:10], time.perf_counter() - t0,
                          answer.get("partial", {}).get("unread", 0))
            ws.close()
            del ws
            gc.collect()
        full = got["full"][0]
        share = len(set(got["partial"][0]) & set(full)) / len(full) if full else float(not got["partial"][0])
        shares.append(share)
        print(f"{query[:50]:50s} overlap {share:.2f}  partial {got['partial'][1]:.1f} s "
              f"({got['partial'][2]} unread, {len(got['partial'][0])} results)  full {got['full'][1]:.1f} s "
              f"({len(full)} results)", flush=True)
    print(f"mean top-10 overlap {sum(shares) / len(shares):.3f} over {len(shares)} queries")
    return 0


# The steps of a first read, by the function that does each (file, function name); cumulative,
# so a step's figure includes the steps it calls.
STEPS = [
    ("catalog: the whole refresh", "store/catalog.py", "refresh"),
    ("catalog: walk (scandir + lstat)", "store/disk.py", "_walk"),
    ("catalog: parse one file (read + frontmatter + Memory)", "store/catalog.py", "_parse"),
    ("catalog: a partial load (read, scan, parse some)", "store/catalog.py", "_read_partly"),
    ("  read the bytes (judged by the walk's lstat)", "store/files.py", "read_walked_bytes"),
    ("  read the bytes (the folder's entry, open, fstat, read)", "store/files.py", "read_found"),
    ("  strict scan of the id and tags", "store/files.py", "scan_memory"),
    ("  the wanted strings found in the scanned files", "store/catalog.py", "find"),
    ("  parse from the bytes read", "store/catalog.py", "_parse_data"),
    ("  read the file", "store/disk.py", "read_file"),
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
