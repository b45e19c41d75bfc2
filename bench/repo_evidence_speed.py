"""What checking ``repo:`` evidence against a configured checkout costs a read, beside the
``file:`` staleness check every read already runs on the same citations.

Run (from the repo root, venv active):

    python bench/repo_evidence_speed.py              # 10 memories, as a read shows
    python bench/repo_evidence_speed.py --memories 50

One git repository ``svc`` with ``--memories`` files of 60 lines; as many memories, each citing
lines 3-4 of one file, twice: committed in svc's own ``.memory/`` as ``file:src/mN.py#L3-L4``
(the baseline, ``git/stale.StaleChecker``) and as ``repo:svc@SHA:src/mN.py#L3-L4`` read from
elsewhere with ``repos: {svc: PATH}`` (``git/stale.check_repo_refs``). Each is timed cold (no
cache: the first read after a commit in the checkout) and warm (the cache of the previous call),
the median of ``--runs``. No model is loaded: only the staleness check is timed.
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
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memstore.git.stale import CACHE_NAME, REPO_CACHE_PREFIX, StaleChecker, check_repo_refs
from memstore.store.model import Memory
from memstore.store.workspace import open_workspace
from memstore.verbs import api


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def median_ms(call: Callable[[], object], before: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        before()
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--memories", type=int, default=10)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="memstore-repo-evidence-") as tmp:
        base = Path(tmp)
        env = {**os.environ, "HOME": str(base / "home"), "MEMSTORE_HOME": str(base / "home" / ".memory"),
               "MEMSTORE_DAEMON": "0", "GIT_CONFIG_GLOBAL": str(base / "gitconfig"), "GIT_CONFIG_NOSYSTEM": "1",
               "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b",
               "GIT_COMMITTER_EMAIL": "b@x"}
        os.environ.update(env)
        (base / "gitconfig").write_text("")
        svc = base / "svc"
        (svc / "src").mkdir(parents=True)
        git(svc, "init", "-q", "-b", "main")
        for i in range(args.memories):
            (svc / "src" / f"m{i}.py").write_text("".join(f"line_{n} = {n}\n" for n in range(60)))
        git(svc, "add", "-A")
        git(svc, "commit", "-q", "-m", "code")
        sha = git(svc, "rev-parse", "HEAD").strip()
        ws = open_workspace(cwd=svc)
        api.init(ws)
        for i in range(args.memories):
            api.write(ws, {"op": "write", "allow_duplicate": True, "memory": {
                "kind": "fact", "scope": "repo", "text": f"Module m{i} keeps line 3 and 4 in step ({i}).",
                "evidence_refs": [f"file:src/m{i}.py#L3-L4"]}})
        git(svc, "add", "-A")
        git(svc, "commit", "-q", "-m", "memories")
        ws = open_workspace(cwd=svc)
        assert ws.repo is not None
        own = list(ws.catalog("repo").memories.values())
        elsewhere = [Memory(id=m.id, kind=m.kind, text=m.text, scope="shared:org",
                            evidence=[f"repo:svc@{sha}:src/m{i}.py#L3-L4"]) for i, m in enumerate(own)]
        cache_dir = base / "cache"
        cache_dir.mkdir()
        repo_cache = cache_dir / f"{REPO_CACHE_PREFIX}svc.json"
        file_cache = ws.repo.index_dir / CACHE_NAME

        def file_check() -> object:
            sc = StaleChecker(ws.repo)
            found = sc.check_many(own)
            sc.save()
            return found

        def repo_check() -> object:
            return check_repo_refs(elsewhere, {"svc": svc}, cache_dir)

        def nothing() -> None:
            return None

        rows = {
            "file: (baseline), cold": median_ms(file_check, lambda: file_cache.unlink(missing_ok=True), args.runs),
            "file: (baseline), warm": median_ms(file_check, nothing, args.runs),
            "repo: checkout, cold": median_ms(repo_check, lambda: repo_cache.unlink(missing_ok=True), args.runs),
            "repo: checkout, warm": median_ms(repo_check, nothing, args.runs),
            "repo: no checkout configured": median_ms(lambda: check_repo_refs(elsewhere, {}, cache_dir), nothing,
                                                      args.runs),
        }
        assert all(not c.unverified and c.stale is None for c in check_repo_refs(elsewhere, {"svc": svc},
                                                                                 cache_dir).values())
        for name, ms in rows.items():
            print(f"{name:32} {ms:8.1f} ms  ({args.memories} memories, median of {args.runs})")
        figures = {k: round(v, 2) for k, v in rows.items()}
        print(json.dumps({"memories": args.memories, "runs": args.runs, "ms": figures}))


if __name__ == "__main__":
    main()
