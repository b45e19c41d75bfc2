"""Speed of ``memstore review`` in CI: a fresh clone, no daemon, 10k memories.

Run (from the repo root, venv active):

    python bench/review_speed.py                 # 10k memories
    python bench/review_speed.py --size 1000

The store is bench/perf.py's generated one (``git_origin``), with a code base added beside it:
``--files`` Python files of 200 lines, and one memory in five rewritten to cite 10 lines of one
of them (``file:src/mNN.py#La-Lb``). Branch ``pr`` changes three of the files. Each run clones
that repo afresh (``git clone``, as actions/checkout does), checks out ``pr``, and times, from
before the clone to the comment on stdout:

- ``review, empty model cache``: ``memstore review --base origin/main`` with an empty
  ``XDG_CACHE_HOME`` (the embedding model is exported first, as on a CI runner's first run);
- ``review, model cached``: the same in a new clone with the cache of the first run (what every
  later run sees, the workflow caching ``~/.cache/memstore/onnx``);
- beside them, ``memstore read`` cold in a new clone with the model cached, and ``git clone``
  alone. No daemon runs (``MEMSTORE_DAEMON=0``): CI has none.

Goal: <= 5 s with the model cached. Each command's CPU time (user + system, its child
processes included) is printed beside its wall time: on a shared machine the wall time is
mostly waiting for a core. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import perf  # noqa: E402

LINES = 200


def origin_with_code(n: int, files: int) -> Path:
    """perf's origin of ``n`` memories plus src/ and line citations, with branch ``pr`` (made once)."""
    base = perf.git_origin(n)
    origin = perf.CACHE / f"review2-{n}-{files}"
    if (origin / ".complete").exists():
        return origin
    shutil.rmtree(origin, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(base), str(origin)], check=True)
    (origin / ".complete").unlink(missing_ok=True)
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    src = origin / "src"
    src.mkdir()
    for f in range(files):
        (src / f"m{f:02d}.py").write_text("".join(f"def f{f}_{i}(x):\n    return x + {i}\n" for i in range(LINES // 2)))
    subprocess.run([*git, "add", "src"], cwd=origin, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "code"], cwd=origin, check=True)
    code = subprocess.run(["git", "rev-parse", "HEAD"], cwd=origin, check=True, capture_output=True,
                          text=True).stdout.strip()[:12]
    # The citations name the commit whose lines they mean (the memory files were committed before
    # the code existed). Rewriting committed memories is what memstore forbids; this is a fixture.
    mems = sorted((origin / ".memory").glob("*/*.md"))
    for i, path in enumerate(mems[::5]):
        a = 1 + (i * 7) % (LINES - 10)
        ref = f"file:src/m{i % files:02d}.py@{code}#L{a}-L{a + 9}"
        text, hit = re.subn(r"^evidence: \[(.*)\]$", lambda m, r=ref: f"evidence: [{m.group(1)}, '{r}']",
                            path.read_text(encoding="utf-8"), count=1, flags=re.M)
        if not hit:
            raise RuntimeError(f"{path}: no evidence line in the form perf.py writes")
        path.write_text(text, encoding="utf-8")
    subprocess.run([*git, "add", "-A"], cwd=origin, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "citations"], cwd=origin, check=True)
    subprocess.run([*git, "checkout", "-q", "-b", "pr"], cwd=origin, check=True)
    for f in range(3):
        p = src / f"m{f:02d}.py"
        p.write_text(re.sub(r"return x \+ (1\d)\n", r"return x - \1\n", p.read_text()))
    subprocess.run([*git, "commit", "-q", "-am", "subtract instead"], cwd=origin, check=True)
    subprocess.run([*git, "checkout", "-q", "main"], cwd=origin, check=True)
    (origin / ".complete").write_text(str(n))
    return origin


def _env(work: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    env.update({"HOME": str(work / "home"), "MEMSTORE_HOME": str(work / "home" / ".memory"),
                "MEMSTORE_DAEMON": "0", "XDG_CACHE_HOME": str(cache)})
    (work / "home").mkdir(parents=True, exist_ok=True)
    return env


def clone_and_run(origin: Path, cache: Path, args: list[str]) -> dict[str, float | int]:
    work = Path(tempfile.mkdtemp(prefix="msreview-", dir="/tmp"))
    try:
        env = _env(work, cache)
        clone = work / "clone"
        t0 = time.perf_counter()
        subprocess.run(["git", "clone", "-q", "--no-local", str(origin), str(clone)], check=True, env=env)
        subprocess.run(["git", "checkout", "-q", "pr"], cwd=clone, check=True, env=env)
        t_clone = time.perf_counter() - t0
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([*perf.CLI, *args], cwd=clone, env=env, capture_output=True, text=True, check=False)
        total = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise RuntimeError(f"memstore {' '.join(args)} failed: {proc.stderr[-800:]}")
        return {"clone_s": round(t_clone, 2), "total_s": round(total, 2), "command_s": round(total - t_clone, 2),
                "command_cpu_s": round(cpu, 2),
                "output_chars": len(proc.stdout)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=10000)
    ap.add_argument("--files", type=int, default=40)
    a = ap.parse_args()
    origin = origin_with_code(a.size, a.files)
    cache = Path(tempfile.mkdtemp(prefix="msreview-cache-", dir="/tmp"))
    review = ["review", "--base", "origin/main", "--title", "subtract instead of add in the first modules"]
    try:
        out = {"size": a.size, "load": os.getloadavg()[0]}
        out["review_empty_model_cache"] = clone_and_run(origin, cache, review)
        out["review_model_cached"] = clone_and_run(origin, cache, review)
        out["review_model_cached_again"] = clone_and_run(origin, cache, review)
        out["read_cold_model_cached"] = clone_and_run(origin, cache, ["read", "billing", "worker", "timeout"])
        out["review_json_model_cached"] = clone_and_run(origin, cache, [*review, "--format", "json"])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"# {a.size} memories, fresh clone each, no daemon; load {out['load']:.2f}")
    for k, v in out.items():
        if isinstance(v, dict):
            print(f"{k:30s} total {v['total_s']:6.2f} s  (clone {v['clone_s']:.2f} s, command {v['command_s']:.2f} s"
                  f" wall, {v['command_cpu_s']:.2f} s CPU; {v['output_chars']} chars out)")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
