"""The warm CLI read through the daemon beside `python -c pass`, side by side.

A daemon serves bench/perf.py's generated store (N memories, index built once and kept); then,
for each round in rotating order, `python -c pass` and one `memstore read` through each console
script. Two scripts by default: the venv's own (what its pip wrote: pip < 25 imports `re`
first) and the four lines pip >= 25 writes, on the same interpreter. `--fresh` makes every query
one the daemon has not met (its neighbour lists are filled during the read); otherwise each query
was met once before the rounds. Prints p50/p95 wall time, the gap over `python -c pass` and the
client's CPU.

    python bench/warm_gap.py --n 10000 --rounds 60 [--fresh]
    python bench/warm_gap.py --store bench/.cache/perf/store-100000-noisy --rounds 60 [--fresh]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perf

from memstore.surfaces import client

MODERN_SCRIPT = """#!{python}
import sys
from memstore.surfaces.entry import main
if __name__ == '__main__':
    sys.exit(main())
"""


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU milliseconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, check=False)
    wall = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr[-400:]!r}")
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return wall, cpu


def query(i: int, fresh: bool) -> list[str]:
    qs = perf.QUERIES
    words = qs[i % len(qs)].split()
    if fresh:  # a query no round asked before: two words of another query and the round number
        words += [*qs[(i * 7 + 3) % len(qs)].split()[:2], str(i)]
    return words


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--store", type=Path, help="an indexed store (perf.py noisy's 100k) instead of store-N")
    args = ap.parse_args()

    root = args.store.resolve() if args.store else perf.CACHE / f"store-{args.n}"
    if args.store is None and not (root / ".index" / "meta.json").exists():
        root, _ = perf.prepare(args.n, perf.CACHE / "embeddings")
    tmp = Path(tempfile.mkdtemp(prefix="msgap-", dir="/tmp"))
    modern = tmp / "memstore"
    modern.write_text(MODERN_SCRIPT.format(python=sys.executable))
    modern.chmod(0o755)
    scripts = {"venv's console script": [*perf.CLI], "pip >= 25 console script": [str(modern)]}
    # A client that compiles its modules on every call (PYTHONDONTWRITEBYTECODE, no __pycache__)
    # would add that to the gap: an installed package has its bytecode.
    import compileall

    compileall.compile_dir(str(Path(client.__file__).parent.parent), quiet=1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(
        {
            "MEMSTORE_STORE": str(root),
            "MEMSTORE_HOME": str(perf.CACHE / "global"),
            "MEMSTORE_RUNTIME_DIR": str(tmp),
            "MEMSTORE_DAEMON": "1",
            "MEMSTORE_GIT_STAGE": "0",
            "MEMSTORE_CODE_VERSION": client.code_version(),
        }
    )
    with open(tmp / "serve.out", "ab") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "memstore", "serve", "--idle", "600"],
            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )
    try:
        if not client.wait_until_up(120, env=env):
            raise RuntimeError("the daemon did not start")
        warm = [query(i, False) for i in range(len(perf.QUERIES))] if not args.fresh else [["warm", "up"]]
        for words in warm:
            timed([*perf.CLI, "read", *words], env, root)
        time.sleep(2)  # the daemon's idle work after the first reads
        variants = {"python -c pass": [sys.executable, "-c", "pass"], **scripts}
        res: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        for i in range(args.rounds):
            names = list(variants)
            names = names[i % len(names):] + names[: i % len(names)]
            for name in names:
                cmd = variants[name] if name == "python -c pass" else [*variants[name], "read", *query(i, args.fresh)]
                res[name].append(timed(cmd, env, root))
    finally:
        daemon.terminate()
        daemon.wait(10)
    base = statistics.median(w for w, _ in res["python -c pass"])
    print(f"# {root.name}, {args.rounds} rounds, {'fresh' if args.fresh else 'met-before'} queries, "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| variant | wall p50 ms | p95 | p50 over `python -c pass` | client CPU p50 ms |")
    print("|---|---|---|---|---|")
    for name, rows in res.items():
        wall = sorted(w for w, _ in rows)
        p50 = statistics.median(wall)
        p95 = wall[round(0.95 * (len(wall) - 1))]
        cpu = statistics.median(c for _, c in rows)
        print(f"| {name} | {p50:.1f} | {p95:.1f} | {p50 - base:+.1f} | {cpu:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
