"""Where a warm process's resident memory goes at 100k memories, step by step.

Run (from the repo root, venv active), on an indexed store such as ``perf.py noisy``'s:

    python bench/rss.py library --store bench/.cache/perf/store-100000-noisy
    python bench/rss.py daemon --store bench/.cache/perf/store-100000-noisy
    python bench/rss.py catalog --store bench/.cache/perf/store-100000-noisy

``library``: one process, its RSS (VmRSS) and peak (VmHWM) after each step: the imports, the
model, the catalog, the first read (the indexes loaded), three more reads, five writes through
the library, five hand edits each followed by a read; then what ``malloc_trim(0)`` hands back.
``daemon``: the same steps through a daemon (``memstore serve``, the CLI for reads and writes),
its ``daemon status`` figures after each. ``catalog``: what the catalog's objects hold per part
(each object counted once, by ``sys.getsizeof``), per memory.

``library --phases`` adds, after the steps, the RSS and its peak inside each phase of the loads
(the catalog's, meta.json's, the keyword index's open, the vectors' load, the model's): the
peak of each is VmHWM after the kernel's own counter was reset as the phase began (``5`` written
to ``/proc/self/clear_refs``, Linux 4.0 on), so a phase's transient shows even when it is given
back before the step ends.

The store is written to (the writes and the hand-written notes stay in it): use a copy.
The machine's load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CACHE = ROOT / "bench" / ".cache" / "perf"
from perf import daemon_env, start_daemon  # noqa: E402

QUERIES = [
    "sqlite migration fails with duplicate column name",
    "auth service timeout connecting to db-primary",
    "Too many open files in the websocket hub",
    "how do we configure the billing worker",
]


def vm() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line[:5]] = int(line.split()[1]) / 1024
    return out["VmRSS"], out["VmHWM"]


class Steps:
    """Prints one row per step: RSS now, its growth over the last step, the peak so far."""

    def __init__(self, measure: Callable[[], tuple[float, float]]) -> None:
        self.measure = measure
        self.last = 0.0
        self.rows: list[dict[str, Any]] = []
        print("| step | RSS MB | added MB | peak MB | s |\n|---|---|---|---|---|", flush=True)

    def run(self, name: str, work: Callable[[], object]) -> None:
        t0 = time.perf_counter()
        work()
        took = time.perf_counter() - t0
        rss, peak = self.measure()
        print(f"| {name} | {rss:.1f} | {rss - self.last:+.1f} | {peak:.1f} | {took:.1f} |", flush=True)
        self.rows.append({"step": name, "rss_mb": round(rss, 1), "peak_rss_mb": round(peak, 1), "s": round(took, 2)})
        self.last = rss


# Words none of perf.py's templates use: each write is new, never a refused duplicate.
WORDS = [
    "quartz", "vellum", "harbor", "copper", "lantern", "meadow", "orbit", "saffron", "tundra", "walnut",
    "zephyr", "bramble", "cinder", "dune", "ember", "fjord", "garnet", "hollow", "ivory", "juniper",
    "kestrel", "lagoon", "marble", "nectar", "opal", "pepper", "quiver", "rust", "sable", "thistle", "umber",
    "velvet", "willow", "yarrow",
]


def write_request(i: int) -> dict[str, Any]:
    # Unlike every generated memory and each other: a refused duplicate would take a cheaper path.
    rnd = random.Random(time.time_ns())
    words = " ".join(rnd.sample(WORDS, 12))
    return {
        "op": "write",
        "memory": {
            "kind": "fact",
            "scope": "repo",
            "evidence_refs": ["user:bench"],
            "text": f"RSS probe {i}: {words} ({rnd.randrange(10**9)})",
        },
    }


def hand_edit(root: Path, i: int) -> str:
    marker = f"zq{time.time_ns() % 10**9}x{i}"
    (root / "facts" / f"hand-{marker}.md").write_text(f"---\nkind: fact\n---\nHand written note {marker}\n")
    return marker


class Phases:
    """RSS at the start and end of each call of the wrapped functions, and the peak within it
    (VmHWM, reset when the call begins; a call inside another folds its peak into the outer's)."""

    def __init__(self) -> None:
        self.open: list[list[Any]] = []  # [name, rss at entry, peak so far]
        self.rows: list[dict[str, Any]] = []
        self.peak = 0.0  # the process's peak before the last reset of VmHWM

    def _fold(self) -> None:
        peak = vm()[1]
        self.peak = max(self.peak, peak)
        for frame in self.open:
            frame[2] = max(frame[2], peak)

    def measure(self) -> tuple[float, float]:
        """(VmRSS, the process's peak across the resets)."""
        rss, peak = vm()
        return rss, max(peak, self.peak)

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        fn = getattr(owner, attr)

        def probe(*args: Any, **kwargs: Any) -> Any:
            if any(r["phase"] == name for r in self.rows):  # a later call (the model's, idempotent)
                return fn(*args, **kwargs)
            self._fold()
            Path("/proc/self/clear_refs").write_text("5")
            rss = vm()[0]
            frame = [name, rss, rss]
            self.open.append(frame)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._fold()
                self.open.pop()
                end = vm()[0]
                self.rows.append({"phase": name, "rss_in_mb": round(rss, 1), "rss_out_mb": round(end, 1),
                                  "peak_mb": round(frame[2], 1), "s": round(time.perf_counter() - t0, 2)})
                Path("/proc/self/clear_refs").write_text("5")
                if self.open:  # the outer call's peak is kept in its frame; VmHWM restarts here
                    self.open[-1][2] = max(self.open[-1][2], frame[2])

        # A classmethod was fetched bound to its class: the probe must not be bound again.
        bound = isinstance(owner, type) and isinstance(owner.__dict__[attr], classmethod)
        setattr(owner, attr, staticmethod(probe) if bound else probe)

    def install(self) -> None:
        from memstore.index import embedder, index_files, vectors
        from memstore.store import catalog

        self.wrap(embedder.Embedder, "load", "the model's load")
        self.wrap(catalog.Catalog, "_load_cache", "catalog.json's load")
        self.wrap(index_files.IndexFiles, "read_meta", "meta.json's read")
        self.wrap(index_files.IndexFiles, "open_keyword", "the keyword index's open (meta.json in it)")
        self.wrap(vectors.VectorIndex, "load", "the vectors' load")
        self.wrap(vectors, "_read_ann", "the approximate index's read")
        self.wrap(catalog.Catalog, "_save_cache", "catalog.json's save (first write)")
        self.wrap(vectors.VectorIndex, "save", "the vectors' save (first write)")
        self.wrap(index_files.IndexFiles, "snapshot", "meta.json's snapshot (first write)")
        self.wrap(index_files.IndexFiles, "write_meta", "meta.json's save (first write)")

    def print(self) -> None:
        print("| phase | RSS in MB | RSS out MB | peak within MB | over RSS in | s |\n|---|---|---|---|---|---|")
        for r in self.rows:
            print(f"| {r['phase']} | {r['rss_in_mb']} | {r['rss_out_mb']} | {r['peak_mb']} | "
                  f"{r['peak_mb'] - r['rss_in_mb']:+.1f} | {r['s']} |")


def library_main(a: argparse.Namespace) -> None:
    root = a.store.resolve()
    env = {
        "MEMSTORE_STORE": str(root),
        "MEMSTORE_HOME": str(CACHE / "global"),
        "MEMSTORE_DAEMON": "0",
        "MEMSTORE_GIT_STAGE": "0",
        "MEMSTORE_AUTHOR": "bench",
    }
    phases = Phases() if a.phases else None
    steps = Steps(phases.measure if phases is not None else vm)
    held: dict[str, Any] = {}

    def imports() -> None:
        from threadpoolctl import threadpool_limits

        import memstore
        from memstore.read import retrieve  # noqa: F401

        threadpool_limits(1, user_api="blas")  # as the daemon runs its reads
        held["memstore"] = memstore
        if phases is not None:
            phases.install()

    def model() -> None:
        from memstore.index.embedder import get_embedder

        get_embedder().encode(["warm up"])

    def catalog() -> None:
        from memstore.store.workspace import open_workspace

        held["ws"] = ws = open_workspace(cwd=root, env=env)
        ws.watch()
        ws.catalog("repo")

    def read(i: int = 0) -> Callable[[], None]:
        from memstore.read import retrieve

        return lambda: retrieve.read(held["ws"], {"query": QUERIES[i % len(QUERIES)]}, log_episode=False)

    def writes() -> None:
        from memstore.verbs import api

        for i in range(5):
            api.write(held["ws"], write_request(i))

    def edits() -> None:
        for i in range(5):
            hand_edit(root, i)
            time.sleep(0.2)  # the watcher's report
            read(i)()

    steps.run("interpreter and imports", imports)
    steps.run("the model (one encode)", model)
    steps.run("the catalog", catalog)
    steps.run("first read (indexes loaded)", read())
    steps.run("three more reads", lambda: [read(i)() for i in range(1, 4)])
    steps.run("five writes", writes)
    steps.run("five hand edits, a read after each", edits)
    steps.run("malloc_trim(0)", lambda: ctypes.CDLL("libc.so.6").malloc_trim(0))
    if phases is not None:
        phases.print()
    summary(steps, a, phases.rows if phases is not None else None)


def daemon_main(a: argparse.Namespace) -> None:
    from memstore.surfaces import client

    root = a.store.resolve()
    rdir = Path(tempfile.mkdtemp(prefix="msrss-", dir="/tmp"))
    env = {**daemon_env(root, rdir), "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "memstore"]

    def run(*args: str, stdin: str | None = None) -> str:
        return subprocess.run(
            [*cli, *args], env=env, cwd=root, input=stdin, capture_output=True, text=True, check=True, timeout=600
        ).stdout

    def measure() -> tuple[float, float]:
        st = client.status(env)
        return st["rss_mb"], st["peak_rss_mb"]

    proc = start_daemon(rdir, env)
    try:
        steps = Steps(measure)

        def edits() -> None:
            for i in range(5):
                marker = hand_edit(root, i)
                time.sleep(0.2)
                run("read", "Hand", "written", "note", marker)

        steps.run("started (model loaded)", lambda: time.sleep(5))
        steps.run("first read (catalog and indexes loaded)", lambda: run("read", *QUERIES[0].split()))
        steps.run("three more reads", lambda: [run("read", *q.split()) for q in QUERIES[1:4]])
        steps.run("five context calls", lambda: [run("context", "--task", QUERIES[i % 4]) for i in range(5)])
        steps.run(
            "five writes", lambda: [run("write", "--json", "-", stdin=json.dumps(write_request(i))) for i in range(5)]
        )
        steps.run("five hand edits, a read after each", edits)
        steps.run(f"idle {a.settle:.0f} s (background work, saves)", lambda: time.sleep(a.settle))
        steps.run("twenty more reads", lambda: [run("read", *QUERIES[i % 4].split()) for i in range(20)])
        summary(steps, a)
    finally:
        with contextlib.suppress(Exception):
            client.call({"verb": "stop", "version": client.code_version()}, env=env, timeout=10)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def catalog_main(a: argparse.Namespace) -> None:
    """Each part of the catalog's objects, counted once (by identity) in the part that first
    reaches it, in the order below; then the bytes per memory."""
    from memstore.store.workspace import open_workspace

    root = a.store.resolve()
    ws = open_workspace(
        cwd=root, env={"MEMSTORE_STORE": str(root), "MEMSTORE_HOME": str(CACHE / "global"), "MEMSTORE_DAEMON": "0"}
    )
    before = vm()[0]
    cat = ws.catalog("repo")
    after = vm()[0]
    seen: set[int] = set()

    def size(obj: object) -> int:
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        return sys.getsizeof(obj)

    def deep(obj: object) -> int:
        """The object and what it holds (str, numbers, lists, tuples, dicts), each once."""
        total = size(obj)
        if isinstance(obj, dict):
            total += sum(deep(k) + deep(v) for k, v in obj.items())
        elif isinstance(obj, list | tuple | set):
            total += sum(deep(v) for v in obj)
        return total

    mems = list(cat.memories.values())
    parts: dict[str, int] = {}
    parts["catalog dicts (memories, _entries, events: tables)"] = sum(
        size(d) for d in (cat.memories, cat._entries, cat.events)
    )
    parts["path keys of _entries"] = sum(deep(rel) for rel in cat._entries)
    parts["_Entry objects (and their __dict__)"] = sum(
        size(e) + (size(e.__dict__) if hasattr(e, "__dict__") else 0) for e in cat._entries.values()
    )
    parts["Memory objects (and their __dict__)"] = sum(
        size(m) + (size(m.__dict__) if hasattr(m, "__dict__") else 0) for m in mems
    )
    for name in (
        "text",
        "id",
        "path",
        "kind",
        "scope",
        "created",
        "author",
        "rationale",
        "confidence",
        "links",
        "evidence",
        "tags",
    ):
        parts[f"Memory.{name}"] = sum(deep(getattr(m, name)) for m in mems)
    parts["events (their objects and fields)"] = sum(
        size(e) + deep(getattr(e, "__dict__", {})) for e in cat.events.values()
    )
    total = sum(parts.values())
    n = len(mems)
    print(f"{n} memories, {len(cat.events)} events; RSS added by the catalog's load: {after - before:.1f} MB")
    print("| part | MB | bytes per memory |\n|---|---|---|")
    for name, b in parts.items():
        print(f"| {name} | {b / 2**20:.1f} | {b / max(n, 1):.0f} |")
    print(f"| total counted | {total / 2**20:.1f} | {total / max(n, 1):.0f} |")
    print(
        json.dumps(
            {
                "load_avg": os.getloadavg()[0],
                "n": n,
                "rss_added_mb": round(after - before, 1),
                "parts_mb": {k: round(v / 2**20, 1) for k, v in parts.items()},
            }
        )
    )


def summary(steps: Steps, a: argparse.Namespace, phases: list[dict[str, Any]] | None = None) -> None:
    out: dict[str, Any] = {"mode": a.mode, "store": a.store.name, "load_avg": os.getloadavg()[0], "steps": steps.rows}
    if phases is not None:
        out["phases"] = phases
    print(json.dumps(out, separators=(",", ":")))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rss.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("library", "daemon", "catalog"))
    ap.add_argument("--store", type=Path, default=CACHE / "store-100000-noisy")
    ap.add_argument("--settle", type=float, default=30.0,
                    help="seconds the daemon is left idle: its flush and neighbour fill (daemon mode)")
    ap.add_argument("--phases", action="store_true",
                    help="RSS and its peak within each phase of the loads (library mode)")
    a = ap.parse_args(argv)
    {"library": library_main, "daemon": daemon_main, "catalog": catalog_main}[a.mode](a)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
