"""How close the first answer after a clone is to a warm index's answer: perf.py's queries, each
read in a fresh clone of ``perf.py cold``'s origin by a workspace set up as the daemon's (saves
deferred, the read's wait bounded, the keyword build left to the background), against the same
queries on a clone whose every memory has a vector.

    python bench/research/first_answer.py 10000 --candidates 0 20   # probe only, then the shipped 20
    python bench/research/first_answer.py 10000 --candidates 20 --eager-chars 1000000 1000000000
                                         # the scan lane analysing as queries need / everything

Prints, per setting, the mean top-10 overlap with the warm answer and how often the first
answer is empty where the warm one is not. The warm clone takes perf.py's shared embedding
cache when a perf.py run has made it, and embeds the store otherwise (minutes at 10k).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from perf import CACHE, QUERIES, git_origin  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("--candidates", type=int, nargs="+", default=[0, 10],
                    help="values of retrieve.CANDIDATES_FIRST to compare (0: the probe alone)")
    ap.add_argument("--eager-chars", type=int, nargs="+", default=[None],
                    help="values of scanlane.EAGER_CHARS to compare (a store with more text is analysed as "
                         "queries need it)")
    a = ap.parse_args()
    from memstore.index import keyword_build, scanlane
    from memstore.index.embedder import get_embedder
    from memstore.read import retrieve
    from memstore.store.workspace import open_workspace

    # The daemon starts the keyword build after the read has answered; here nothing would.
    keyword_build.KeywordBuild.start = lambda self: None  # type: ignore[method-assign]
    get_embedder().encode(["warm up"])
    origin = git_origin(a.n)
    work = Path(tempfile.mkdtemp(prefix="msfirstans-", dir="/tmp"))
    try:
        warm = work / "warm"
        subprocess.run(["git", "clone", "-q", str(origin), str(warm)], check=True)
        if (CACHE / "embeddings").is_dir():
            shutil.copytree(CACHE / "embeddings", warm / ".memory" / ".index" / "embeddings")
        ws = open_workspace(cwd=warm)
        want = {q: [r["id"] for r in retrieve.read(ws, {"query": q}, log_episode=False)["results"]]
                for q in QUERIES}
        print(f"{a.n} memories, {len(QUERIES)} queries; the warm index answers {sum(map(bool, want.values()))}")
        for k, eager in [(k, e) for k in a.candidates for e in a.eager_chars]:
            retrieve.CANDIDATES_FIRST = k
            if eager is not None:
                scanlane.EAGER_CHARS = eager
            overlap: list[float] = []
            empty = 0
            for q in QUERIES:
                clone = work / "cold"
                subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
                cold = open_workspace(cwd=clone)
                cold.defer_saves = True
                cold.embed_wait = cold.config.read_wait
                got = [r["id"] for r in retrieve.read(cold, {"query": q}, log_episode=False)["results"]]
                if want[q]:
                    overlap.append(len(set(got) & set(want[q])) / len(want[q]))
                    empty += not got
                shutil.rmtree(clone)
            setting = f"candidates first {k:3d}" + ("" if eager is None else f", eager chars {eager}")
            print(f"{setting}: top-10 overlap with the warm answer {sum(overlap) / len(overlap):.3f}, "
                  f"empty where warm answers {empty}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
