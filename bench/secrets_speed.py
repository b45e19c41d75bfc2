"""The secret scanner beside an older version of itself: what each flags and how long a text takes.

Every write and every pre-commit hook runs the scanner over each text, so its cost per text and
what it refuses on ordinary prose are measured on the same texts for both versions, in one run:

  * `corpus`: tests/data/secrets_corpus.jsonl (fake secrets and their look-alikes), positives
    caught and look-alikes flagged;
  * `example`: the whole text of every file git carries in .memory-example/ (memories, events,
    episodes, config.yaml);
  * with `--eval DIR` (the shared evaluation data: gitbugs/, identifiers/, locomo/): GitBugs
    report titles and bodies, requests commit messages and LoCoMo turns, up to `--sample` each.
    Texts written by no one here: what is flagged there is listed by id, to be read (of the
    2,503 GitBugs reports, two hold real-looking credentials, and one a Jira atl_token).

    python bench/secrets_speed.py                                  # against the commit in --baseline
    python bench/secrets_speed.py --eval ../shared/eval --sample 1000

The baseline is memstore/store/secrets.py as committed at `--baseline` (read with `git show`),
loaded beside the working tree's module.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memstore.store import secrets as current  # noqa: E402

# The scanner before NFKC normalisation, split keys, encoded tokens and command-line passwords.
DEFAULT_BASELINE = "7253b91"


def load_baseline(rev: str) -> ModuleType:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:memstore/store/secrets.py"],
                            capture_output=True, text=True, check=True).stdout
    module = ModuleType("secrets_baseline")
    sys.modules[module.__name__] = module  # dataclasses look their module up by name
    exec(compile(source, f"{rev}:memstore/store/secrets.py", "exec"), module.__dict__)
    return module


def corpus_texts() -> list[tuple[str, str, bool]]:
    rows = [json.loads(line) for line in (ROOT / "tests" / "data" / "secrets_corpus.jsonl")
            .read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(r["id"], "".join(r["parts"]) if "parts" in r else r["text"], bool(r["secret"])) for r in rows]


def example_texts() -> list[tuple[str, str, bool]]:
    base = ROOT / ".memory-example"
    # What git carries: .index/ and .local/ are per-machine projections (binary, never committed).
    return [(str(p.relative_to(base)), p.read_text(encoding="utf-8"), False) for p in sorted(base.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(base).parts)]


def eval_texts(root: Path, sample: int) -> dict[str, list[tuple[str, str, bool]]]:
    rng = random.Random(0)
    out: dict[str, list[tuple[str, str, bool]]] = {}
    gitbugs = [json.loads(line) for line in (root / "gitbugs" / "hadoop_corpus.jsonl").open(encoding="utf-8")]
    out["gitbugs"] = [(r["id"], f"{r.get('title', '')}\n{r.get('body', '')}", False) for r in gitbugs]
    requests = [json.loads(line) for line in (root / "identifiers" / "requests_corpus.jsonl").open(encoding="utf-8")]
    out["requests"] = [(r["id"], r["text"], False) for r in requests]
    turns = []
    for conv in json.loads((root / "locomo" / "locomo_dev.json").read_text(encoding="utf-8")):
        for key, session in conv["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                turns.extend((t["dia_id"], t["text"], False) for t in session)
    out["locomo"] = turns
    return {name: rng.sample(rows, sample) if len(rows) > sample else rows for name, rows in out.items()}


def measure(scan: Callable[[str], list], texts: list[tuple[str, str, bool]], repeats: int
            ) -> tuple[set[str], float, float]:
    """(ids flagged, p50 µs per text, p95 µs per text): each text timed as the best of ``repeats``."""
    flagged: set[str] = set()
    times: list[float] = []
    for rid, text, _ in texts:
        if scan(text):
            flagged.add(rid)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            scan(text)
            best = min(best, time.perf_counter() - t0)
        times.append(best * 1e6)
    times.sort()
    return flagged, statistics.median(times), times[int(0.95 * (len(times) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git revision of the scanner to compare with")
    ap.add_argument("--eval", type=Path, help="the shared evaluation data folder (gitbugs/, identifiers/, locomo/)")
    ap.add_argument("--sample", type=int, default=500, help="texts per evaluation set, drawn with a fixed seed")
    ap.add_argument("--repeats", type=int, default=5, help="timed scans per text (the best is kept)")
    args = ap.parse_args()

    old = load_baseline(args.baseline)
    sets = {"corpus": corpus_texts(), "example": example_texts()}
    if args.eval:
        sets.update(eval_texts(args.eval, args.sample))
    print("| texts | n | scanner | flagged | secrets caught | flagged, not a corpus secret | p50 µs/text | "
          "p95 µs/text |")
    print("|---|---|---|---|---|---|---|---|")
    listed: dict[str, list[str]] = {}
    for name, texts in sets.items():
        secret_ids = {rid for rid, _, is_secret in texts if is_secret}
        for label, module in ((f"baseline {args.baseline}", old), ("now", current)):
            flagged, p50, p95 = measure(module.find_secrets, texts, args.repeats)
            false = sorted(flagged - secret_ids)
            caught = f"{len(flagged & secret_ids)}/{len(secret_ids)}" if secret_ids else "-"
            print(f"| {name} | {len(texts)} | {label} | {len(flagged)} | {caught} | {len(false)} | {p50:.0f} | "
                  f"{p95:.0f} |")
            if false:
                listed[f"{name} ({label})"] = false
    for where, ids in listed.items():
        print(f"flagged, {where}: {', '.join(ids)}")


if __name__ == "__main__":
    main()
