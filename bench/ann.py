"""The approximate vector index against the flat one: recall@10 on real texts, speed at scale.

Run (from the repo root, venv active):

    python bench/ann.py                          # recall on real texts, speed at 100k
    python bench/ann.py --sizes 100000 1000000   # and at 1M (~1.5 GB per copy of the rows)
    python bench/ann.py --real 1000 --queries 200 --sizes 100000 --hnsw-max 100000

(a) Recall: ``--real`` texts (half LoCoMo turns, half Hadoop bug reports, from the shared eval
sets, ``--eval-dir``: ``../shared/eval`` by default) embedded with the real model (cached in
``bench/.cache``), and ``--queries`` queries (LoCoMo questions and other bug reports). Each
approximate index is asked for the 10 nearest rows of each query; recall@10 is the share of the
flat index's 10 it returns. ``VectorIndex`` itself is measured with its threshold set to 0, so
the approximate path is the one taken.

(b) Speed: ``--sizes`` rows drawn around the real vectors (a real row plus Gaussian noise,
renormalised: the same directions and cluster structure, ``--noise`` chosen so that a query's
nearest similarity is close to the real one; both are printed), queries likewise. Per index:
build (train + add) seconds, the RSS it adds, search p50/p95 of one query, recall@10 against
flat on those rows. Flat is ``VectorIndex``'s own search (one matrix product). BLAS and faiss
run on one thread, as in the daemon.

The candidates: IVF-Flat, IVF-SQ8 (8-bit codes; the candidates then scored exactly on the flat
rows, as ``VectorIndex`` does), HNSW32 (up to ``--hnsw-max`` rows: its build is the slowest).

``--judge STORE``: a write's duplicate judgment on an indexed store (``perf.py noisy`` makes
one of 100k), flat against approximate, alternating.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import faiss  # noqa: E402

from memstore.index import vectors as vecmod  # noqa: E402
from memstore.index.terms import top_k  # noqa: E402
from memstore.index.vectors import VectorIndex, ann_lists  # noqa: E402

EVAL_DIR = ROOT.parent / "shared" / "eval"
K = 10

Searcher = Callable[[np.ndarray], list[int]]  # a query -> the rows it returns, best first


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def real_texts(n: int, nq: int, eval_dir: Path) -> tuple[list[str], list[str]]:
    """``n`` corpus texts (half turns, half reports) and ``nq`` queries (half LoCoMo questions,
    half reports not in the corpus), sampled with a fixed seed."""
    rng = random.Random(11)
    convs = json.loads((eval_dir / "locomo" / "locomo_dev.json").read_text())
    turns = [t["text"] for c in convs for key, s in c["conversation"].items()
             if key.startswith("session_") and isinstance(s, list) for t in s if t.get("text")]
    questions = [q["question"] for c in convs for q in c["qa"] if q.get("question")]
    reports = []
    with (eval_dir / "gitbugs" / "hadoop_corpus.jsonl").open() as fh:
        for line in fh:
            doc = json.loads(line)
            reports.append(f"{doc.get('title', '')}\n{doc.get('body', '')}".strip()[:4000])
    for pool in (turns, questions, reports):
        rng.shuffle(pool)
    half, qhalf = n // 2, nq // 2
    corpus = turns[:n - half] + reports[:half]
    queries = questions[:nq - qhalf] + reports[half:half + qhalf]
    return corpus, queries


def embed(texts: list[str]) -> np.ndarray:
    from eval_common import EmbeddingCache

    return EmbeddingCache().embed(texts)


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def around(base: np.ndarray, n: int, noise: float, seed: int) -> np.ndarray:
    """``n`` unit rows, each a row of ``base`` plus Gaussian noise of norm ~``noise``."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, base.shape[1]), dtype=np.float32)
    for lo in range(0, n, 100_000):  # in slices: the noise at 1M would be another 1.5 GB
        hi = min(n, lo + 100_000)
        pick = base[rng.integers(0, len(base), hi - lo)]
        out[lo:hi] = unit(pick + rng.normal(0, noise / math.sqrt(base.shape[1]), pick.shape).astype(np.float32))
    return out


def flat_truth(x: np.ndarray, q: np.ndarray) -> list[list[int]]:
    out = []
    for lo in range(0, len(q), 64):
        sims = q[lo:lo + 64] @ x.T
        out += [[i for i, _ in top_k(row, K)] for row in sims]
    return out


def recall(truth: list[list[int]], got: list[list[int]]) -> float:
    return sum(len(set(t) & set(g)) for t, g in zip(truth, got, strict=True)) / (K * len(truth))


Built = tuple[object, dict[str, Searcher]]  # what to keep alive, and a searcher per setting


def vector_index(x: np.ndarray, approx_rows: int, probes: tuple[int, ...] = (), cands: tuple[int, ...] = ()) -> Built:
    vi = VectorIndex(x.shape[1], approx_rows=approx_rows)
    vi.add([str(i) for i in range(len(x))], x)
    if approx_rows > len(x):
        return vi, {"": lambda q: [int(m) for m, _ in vi.search(q, K)]}
    vi.approx()  # trained here, so the build is timed as one

    def searcher(p: int, c: int) -> Searcher:
        def search(q: np.ndarray) -> list[int]:
            vecmod.NPROBE, vecmod.CANDIDATES = p, c
            return [int(m) for m, _ in vi.search(q, K)]
        return search

    return vi, {f"nprobe={p} candidates={c}k": searcher(p, c) for p in probes for c in cands}


def ivf_flat(x: np.ndarray, probes: list[int]) -> Built:
    ix = faiss.index_factory(x.shape[1], f"IVF{ann_lists(len(x))},Flat", faiss.METRIC_INNER_PRODUCT)
    ix.cp.max_points_per_centroid = vecmod.TRAIN_PER_LIST
    ix.cp.niter = vecmod.TRAIN_ITERATIONS
    ix.train(x)
    ix.add(x)

    def searcher(p: int) -> Searcher:
        def search(q: np.ndarray) -> list[int]:
            ix.nprobe = p
            return [int(i) for i in ix.search(q.reshape(1, -1), K)[1][0] if i >= 0]
        return search

    return ix, {f"nprobe={p}": searcher(p) for p in probes}


def hnsw(x: np.ndarray, efs: list[int]) -> Built:
    ix = faiss.IndexHNSWFlat(x.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    ix.add(x)

    def searcher(ef: int) -> Searcher:
        def search(q: np.ndarray) -> list[int]:
            ix.hnsw.efSearch = ef
            return [int(i) for i in ix.search(q.reshape(1, -1), K)[1][0] if i >= 0]
        return search

    return ix, {f"efSearch={ef}": searcher(ef) for ef in efs}


def measure(name: str, build: Callable[[], Built], q: np.ndarray, truth: list[list[int]]) -> list[dict[str, object]]:
    """One row per search setting; the build time and RSS are the structure's, on each row."""
    gc.collect()
    before = rss_mb()
    t0 = time.perf_counter()
    keep, searchers = build()
    built = time.perf_counter() - t0
    added = rss_mb() - before
    rows: list[dict[str, object]] = []
    for setting, search in searchers.items():
        search(q[0])  # a first call pays for lazy set-up
        got, times = [], []
        for v in q:
            t0 = time.perf_counter()
            got.append(search(v))
            times.append(time.perf_counter() - t0)
        rows.append({"index": f"{name} {setting}".strip(), "recall@10": round(recall(truth, got), 4),
                     "p50_ms": round(pct(times, 50) * 1000, 2), "p95_ms": round(pct(times, 95) * 1000, 2),
                     "build_s": round(built, 2), "rss_added_mb": round(added)})
    del keep
    return rows


def structures(x: np.ndarray, a: argparse.Namespace, with_hnsw: bool) -> list[tuple[str, Callable[[], Built]]]:
    nlist = ann_lists(len(x))
    out: list[tuple[str, Callable[[], Built]]] = [
        (f"IVF{nlist},Flat", lambda: ivf_flat(x, a.nprobe)),
        (f"VectorIndex IVF{nlist},SQ8 + exact scores",
         lambda: vector_index(x, 0, tuple(a.nprobe), tuple(a.candidates))),
    ]
    if with_hnsw:
        out.append(("HNSW32,Flat", lambda: hnsw(x, a.ef)))
    return out


def table(rows: list[dict[str, object]]) -> None:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")


def judge(store: Path, rounds: int = 3) -> int:
    """A write's duplicate judgment (``read/indexes.semantic_neighbours``: the text's vector, the
    store's 50 nearest over 0.6) on an indexed store, flat and approximate alternating in one
    process: p50 / p95 of each, and whether they found the same neighbours."""
    from perf import QUERIES, ms, pct

    from memstore.read import indexes
    from memstore.read.tuning import params_from_config
    from memstore.store.model import Memory
    from memstore.store.workspace import open_workspace

    store = store.resolve()
    ws = open_workspace(cwd=store, env={"MEMSTORE_STORE": str(store), "MEMSTORE_HOME": str(store.parent / "global")})
    ws.watch()
    mems = [Memory(id=f"01J0000000000000000000{i:04d}", kind="fact", text=q, scope="repo",
                   created="2026-01-01T00:00:00Z", author="bench", confidence=0.5, rationale="", links={},
                   evidence=["user:bench"], tags=[]) for i, q in enumerate(QUERIES)]
    si = indexes.store_index(ws, "repo", params_from_config(ws.config))
    indexes.semantic_neighbours(ws, mems[0], ["repo"], 0.6)  # loads the store, trains if over the threshold
    assert si.vectors is not None
    times: dict[str, list[float]] = {"flat": [], "approx": []}
    found: dict[str, list[object]] = {"flat": [], "approx": []}
    for r in range(rounds):
        for mem in mems:
            for name, rows in (("flat", 2**62), ("approx", 0)):
                si.vectors.approx_rows = rows
                t0 = time.perf_counter()
                near = indexes.semantic_neighbours(ws, mem, ["repo"], 0.6)
                times[name].append(time.perf_counter() - t0)
                if r == 0:
                    found[name].append([(d["id"], d["similarity"]) for d in near])
    print(f"# {store.name}: {len(si.vectors)} rows, {len(mems)} texts x {rounds}, load {os.getloadavg()[0]:.1f}")
    for name, v in times.items():
        print(f"{name}: p50 {ms(pct(v, 50))} ms, p95 {ms(pct(v, 95))} ms")
    print(f"same neighbours: {found['flat'] == found['approx']} "
          f"({sum(len(f) for f in found['flat'])} found)")  # type: ignore[arg-type]
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--real", type=int, default=2000, help="real texts embedded for (a) and as (b)'s centres")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--sizes", type=int, nargs="*", default=[100_000])
    ap.add_argument("--speed-queries", type=int, default=100, help="(b)'s queries (flat at 1M is slow)")
    ap.add_argument("--noise", type=float, default=0.8, help="(b): the noise's norm against a unit row")
    ap.add_argument("--nprobe", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--candidates", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--ef", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--hnsw-max", type=int, default=100_000, help="HNSW only up to this many rows")
    ap.add_argument("--eval-dir", type=Path, default=EVAL_DIR)
    ap.add_argument("--judge", type=Path, metavar="STORE",
                    help="instead: a write's duplicate judgment on this indexed store, flat against approximate")
    a = ap.parse_args()
    # As the daemon runs (surfaces/daemon_work.one_blas_thread): BLAS on one thread, and faiss
    # too; a build then gets one core, as the daemon's save would.
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")
    faiss.omp_set_num_threads(1)
    if a.judge:
        return judge(a.judge)
    corpus, queries = real_texts(a.real, a.queries, a.eval_dir)
    x, q = embed(corpus), embed(queries)
    print(f"# load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cpus; real: n={len(x)} texts, {len(q)} queries",
          flush=True)
    truth = flat_truth(x, q)
    rows = [r for name, build in structures(x, a, True) for r in measure(name, build, q, truth)]
    print("\n## (a) recall@10 against flat, real texts\n")
    table(rows)
    real_top1 = float(np.mean([(x @ v).max() for v in q]))
    for n in a.sizes:
        sx = around(x, n, a.noise, seed=n)
        sq = around(q[:a.speed_queries], min(len(q), a.speed_queries), a.noise / 2, seed=n + 1)
        truth = flat_truth(sx, sq)
        top1 = float(np.mean([(sx @ v).max() for v in sq[:50]]))
        print(f"\n## (b) n={n} rows around the real ones, noise {a.noise}: mean nearest similarity "
              f"{top1:.3f} (real texts: {real_top1:.3f}); load {os.getloadavg()[0]:.1f}\n", flush=True)
        rows = measure("flat (VectorIndex)", lambda sx=sx, n=n: vector_index(sx, n + 1), sq, truth)
        for name, build in structures(sx, a, n <= a.hnsw_max):
            rows += measure(name, build, sq, truth)
            print(f"# {rows[-1]}", flush=True)
        table(rows)
        del sx
    return 0


if __name__ == "__main__":
    sys.exit(main())
