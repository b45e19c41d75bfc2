"""Off-topic coding questions against small coding stores: how often a read answers at all.

The stores are the hand-written ones of tests/data/precision_cases.yaml (4-10 memories each,
built as tests/test_precision.py builds them: real files in git, read through
``memstore.read``); the questions below were written afterwards, about other projects and
stacks. A few touch a store's subject after all ("pandas read_csv is slow" and the ETL
store's chunked reads, "docker" and the deploy store), so the count of answered reads is an
upper bound on false answers; what a setting adds to it is what matters. This is
the coding-store check the LoCoMo calibration of the small-store bar cannot give: LoCoMo's
mismatched questions mostly name people the other store never mentions, a coding question
rarely names anything new. Each setting of ``small_store_slope`` / ``small_store_holders`` is
read in the same run.

    python bench/research/offtopic_small.py            # ~1 min

The last stdout line is one JSON object.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

QUESTIONS = [
    "how do I configure nginx as a reverse proxy for websockets",
    "kubernetes pod stuck in CrashLoopBackOff after deploy",
    "webpack build fails with Module not found: Error: Can't resolve 'fs'",
    "how to center a div with flexbox",
    "React useEffect runs twice in development",
    "the Go binary panics with nil pointer dereference in the HTTP handler",
    "how should I name git branches",
    "java.lang.OutOfMemoryError: Java heap space in the gradle daemon",
    "terraform state lock could not be acquired",
    "how do we rotate the AWS access keys",
    "redis connection refused on port 6379",
    "the iOS app crashes on launch after upgrading Xcode",
    "which logging library should the service use",
    "the cron job runs twice at daylight saving time change",
    "CORS error when the frontend calls the API",
    "how to write a unit test for a Rust async function",
    "eslint complains about unused variables in the test files",
    "what is the release process for the mobile app",
    "the Celery worker silently drops tasks",
    "how do I profile memory usage of the Python process",
    "pandas read_csv is slow on a 2 GB file",
    "the TLS certificate expired on the staging server",
    "GraphQL query returns null for nested fields",
    "where is the feature flag configuration",
    "the Android build fails with duplicate class kotlin.collections",
    "how do I run the linter",
    "migrations",
    "the database",
    "what does the team prefer",
    "docker",
]


def main() -> dict[str, Any]:
    home = tempfile.mkdtemp(prefix="memstore-offtopic-")
    os.environ.update({"MEMSTORE_HOME": str(Path(home) / "global"), "MEMSTORE_DAEMON": "0"})
    for var in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        os.environ.setdefault(var, "memstore bench")
    for var in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        os.environ.setdefault(var, "bench@memstore.invalid")
    import test_precision as tp  # the cases' own store builder

    from memstore.read import ranking, retrieve
    from memstore.store.workspace import open_workspace

    base = ranking.RankingParams()
    settings = {
        "no size rule": dataclasses.replace(base, small_store_slope={"targeted": 0.0, "ambient": 0.0}),
        "size rule, specific queries": dataclasses.replace(base, small_store_holders=False),
        "size rule, rare-word holders (shipped)": base,
    }
    answered = {name: 0 for name in settings}
    changed: list[dict[str, Any]] = []
    reads = 0
    for store in tp.STORES:
        repo, ids = tp.build(store, Path(home))
        key_of = {v: k for k, v in ids.items()}
        ws = open_workspace(cwd=repo)
        for q in QUESTIONS:
            got = {}
            for name, params in settings.items():
                answer = retrieve.read(ws, {"query": q, "include_global": False},
                                       params=retrieve.ReadParams(ranking=params), log_episode=False)
                got[name] = [key_of.get(r["id"], r["id"]) for r in answer["results"]]
                answered[name] += bool(got[name])
            reads += 1
            if len({bool(v) for v in got.values()}) > 1:
                changed.append({"store": store, "question": q, **got})
    for row in changed:
        print(f"{row['store']:12s} {row['question'][:58]:58s} "
              + " | ".join(f"{len(row[name])}" for name in settings), file=sys.stderr)
    report = {"reads": reads, "answered": answered, "changed": changed}
    print("answered of " + str(reads) + ": " + ", ".join(f"{k} {v}" for k, v in answered.items()), file=sys.stderr)
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
