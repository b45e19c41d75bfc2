"""The recall hooks (docs/recall.md): what they cost an agent, how often they stay silent, and
whether what they inject is what the question needs.

- latency: each hook call as the agent makes it (``python -m memstore integrate claude --hook
  prompt|file`` with the hook's JSON on stdin) through a warm daemon over a store of N memories
  in a git repo, beside ``python -c pass`` in the same run (p50/p95);
- silence: the prompt hook on off-topic coding prompts (bench/research/offtopic_small.py) against the
  hand-written stores of tests/data/precision_cases.yaml, and on LoCoMo's mismatched questions
  (conversation i's questions against conversation i+1's store): share of calls injecting nothing;
- relevance: on the precision cases that expect an answer, share whose injected set holds an
  expected memory;
- the absolute bar (``verbs.recall.PROMPT_BAR``): chosen leave-one-store-out over the precision
  stores, the most relevance among the bars that keep 95 % of the off-topic prompts of the other
  stores and of LoCoMo's mismatched questions silent; the precision figures are out of fold (and
  without the LoCoMo constraint beside them), the shipped bar's in-sample figures too;
- file: the file hook on the bundled example store (.memory-example): a cited file surfaces its
  memories, an uncited one injects nothing;
- file hook on a real history (``--file-repo PATH``, any git repository or bundle; alone with
  ``--file-only``): PATH is cloned and bench/eval_review.py's builder turns every fix commit of
  its whole history into a problem memory citing the lines it left (``file:PATH@SHA#La-Lb``);
  the memories are indexed, a daemon is started, and the file hook runs as the agent runs it
  (``python -m memstore integrate claude --hook file``, PreToolUse JSON on stdin, a new
  ``session_id`` for every call, so no call hides memories an earlier one showed). Files: up to
  ``--file-sample`` (default 40) of the files tracked at HEAD that some memory cites, and as many
  that none cites, each evenly spaced over the sorted list. Per cited file: a Read of the whole
  file, an Edit, a Read of one cited range (``offset``/``limit`` = the lines of the first
  citation of the file, in evidence order), and, when the file has one, a Read of a
  20-line window that no citation of the file overlaps; per uncited file: a Read. The truth
  comes from each memory's evidence read here with a regex of its own (``file:PATH[@REV][#La[-Lb]]``).
  Reported: for the whole-file Reads and the Edits, the share of calls that inject at least one
  memory citing the file (goal: all, as the hook injects at most 5 and every cited file has
  one) and the precision (injected memories that cite the file; goal 1.0); for the ranged
  Reads, the share with a hit and the share of injected memories with a citation of the file
  that overlaps the range (goal 1.0), and the share of uncited windows left silent; for
  uncited files, the share left silent (goal: all); p50/p95 of every call beside
  ``python -c pass`` run between them.

    python bench/hooks.py --data-dir ../shared/eval              # all (~10 min at 10k)
    python bench/hooks.py --sizes 1000 --skip-locomo             # quicker
    python bench/hooks.py --file-repo ../shared/eval/review/requests.bundle --file-only  # ~1 min

The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "research"))  # offtopic_small: the off-topic prompts
sys.path.insert(0, str(ROOT / "tests"))

BARS = [round(0.30 + 0.01 * i, 2) for i in range(51)]
SILENCE_GOAL = 0.95


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    env.update({"MEMSTORE_HOME": str(home / "global"), "MEMSTORE_DAEMON": "0", "HOME": str(home),
                "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@memstore.invalid",
                "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@memstore.invalid"})
    return env


def pct(values: list[float], p: float) -> float:
    vals = sorted(values)
    return vals[min(len(vals) - 1, max(0, round(p / 100 * (len(vals) - 1))))] if vals else float("nan")


# -- latency -------------------------------------------------------------------------------------------
PROMPTS = ["why does the nightly job run out of memory", "fix the flaky retry test", "how do we deploy the service",
           "the login page is slow", "add a CSV export to the reports page", "upgrade the database driver"]


def eval_texts(data_dir: Path) -> list[str]:
    """The LoCoMo turns and GitBugs reports the headline benchmarks embed (their vectors are in
    bench/.cache already): real prose and real bug reports, 5,263 texts."""
    from eval_gitbugs import load
    from eval_locomo import load_conversations

    convs, _ = load_conversations(data_dir / "locomo" / "locomo_dev.json", "turns")
    reports, _ = load(data_dir / "gitbugs" / "hadoop_corpus.jsonl", data_dir / "gitbugs" / "hadoop_qrels.json")
    return [t.strip() for c in convs for t in c.texts] + [r.memory_text for r in reports]


def write_store(repo: Path, n: int, data_dir: Path) -> None:
    """``n`` memories in ``repo``/.memory from ``eval_texts`` (cycled past 5,263: the same text
    twice is two memories, two rows of each index), their vectors seeded from the bench cache
    as bench/eval_common.PipelineStores seeds them; 20 more that cite src/app.py by lines."""
    from eval_common import DEFAULT_CACHE, EmbeddingCache, get_embedder

    from memstore.index.embcache import EmbeddingCache as StoreCache
    from memstore.index.embcache import text_key
    from memstore.store import ids
    from memstore.store.config import Config
    from memstore.store.disk import Store as MemStore
    from memstore.store.files import atomic_write
    from memstore.store.model import Memory
    from memstore.store.userkey import projection_key

    base = eval_texts(data_dir)
    texts = [base[i % len(base)] for i in range(n)]
    kinds = ["fact", "problem", "fact", "preference", "problem"]
    ms = MemStore(root=repo / ".memory", scope="repo", config=Config())
    ms.init()
    for i, text in enumerate(texts):
        mem = Memory(id=ids.derived_id(f"hooks:{i}"), kind=kinds[i % len(kinds)], text=text,
                     created="2026-01-01T00:00:00Z", author="bench", evidence=["user:benchmark data"])
        atomic_write(ms.memory_path(mem), ms.render_memory(mem))
    for i in range(20):
        text = f"Note {i} about src/app.py: the handler near line {i * 10} caches its answer per request."
        mem = Memory(id=ids.derived_id(f"hooks:file:{i}"), kind="fact", text=text, created="2026-01-02T00:00:00Z",
                     author="bench", evidence=[f"file:src/app.py#L{i * 10 + 1}-L{i * 10 + 5}"])
        atomic_write(ms.memory_path(mem), ms.render_memory(mem))
        texts.append(text)
    emb = get_embedder()
    unique = list(dict.fromkeys(texts))
    seed = StoreCache(repo / ".memory" / ".index" / "embeddings", emb.model_id, emb.dim, secret=projection_key())
    seed.put_many([text_key(t) for t in unique], EmbeddingCache(DEFAULT_CACHE).embed(unique))


def latency(n: int, reps: int, data_dir: Path) -> dict[str, Any]:
    from memstore.read import indexes
    from memstore.store.workspace import open_workspace
    from memstore.surfaces import client

    work = Path(tempfile.mkdtemp(prefix="mshooks-", dir="/tmp"))
    env = _env(work)
    repo = work / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True, env=env)
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("\n".join(f"line {i}" for i in range(200)) + "\n")
    subprocess.run(["git", "add", "src"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=repo, check=True, env=env)
    os.environ.update({k: env[k] for k in ("MEMSTORE_HOME", "MEMSTORE_DAEMON")})
    write_store(repo, n, data_dir)
    ws = open_workspace(cwd=repo, env=env)
    t0 = time.perf_counter()
    indexes.reindex(ws)
    print(f"# {n} memories indexed in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    out: dict[str, Any] = {"memories": n}
    with warm_daemon(repo, env, work) as denv:

        def hook(event: str, payload: dict[str, Any]) -> tuple[float, str]:
            return run_hook(event, payload, denv, repo)

        def bare() -> float:
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            return time.perf_counter() - t

        def in_daemon(event: str, payload: dict[str, Any]) -> float:
            """The daemon's share of a hook call: the same message over the socket, no interpreter."""
            msg = {"verb": "recall", "version": denv["MEMSTORE_CODE_VERSION"], "cwd": str(repo), "store": None,
                   "env": {}, "args": {"event": event, "payload": payload, "agent": "claude"}}
            t = time.perf_counter()
            answer = client.call(msg, timeout=30, env=denv)
            if answer.get("exit_code"):
                raise RuntimeError(str(answer))
            return time.perf_counter() - t

        for q in PROMPTS:  # warm: the workspace opens, the index loads
            hook("prompt", {"session_id": "warm", "cwd": str(repo), "prompt": q})
        socket_prompt = [in_daemon("prompt", {"session_id": f"d{i}", "cwd": str(repo), "prompt": PROMPTS[i % 6]})
                         for i in range(reps)]
        socket_file = [in_daemon("file", {"session_id": f"d{i}", "cwd": str(repo), "tool_name": "Read",
                                          "tool_input": {"file_path": str(repo / "src" / "app.py")}})
                       for i in range(reps)]
        socket_tool = [in_daemon("tool", {"session_id": f"d{i}", "cwd": str(repo), "hook_event_name": "PostToolUse",
                                          "tool_name": "Bash", "tool_input": {"command": "pytest -q"},
                                          "tool_response": {"stdout": "3 passed", "stderr": ""}})
                       for i in range(reps)]
        base, prompt_t, file_t, tool_t, start_t = [], [], [], [], []
        injected = 0
        for i in range(reps):
            base.append(bare())
            # a session's first call opens its episode (verbs/sessions.py): session-start does it here
            dt, _ = hook("session-start", {"session_id": f"s{i}", "cwd": str(repo), "hook_event_name": "SessionStart",
                                           "source": "startup"})
            start_t.append(dt)
            dt, text = hook("prompt", {"session_id": f"s{i}", "cwd": str(repo), "hook_event_name": "UserPromptSubmit",
                                       "prompt": PROMPTS[i % len(PROMPTS)]})
            prompt_t.append(dt)
            dt, text = hook("file", {"session_id": f"s{i}", "cwd": str(repo), "hook_event_name": "PreToolUse",
                                     "tool_name": "Read", "tool_input": {"file_path": str(repo / "src" / "app.py"),
                                                                          "offset": 1 + (i % 20) * 10, "limit": 5}})
            file_t.append(dt)
            injected += bool(text.strip())
            dt, _ = hook("tool", {"session_id": f"s{i}", "cwd": str(repo), "hook_event_name": "PostToolUse",
                                  "tool_name": "Bash", "tool_input": {"command": "pytest -q tests/test_app.py"},
                                  "tool_response": {"stdout": "3 passed in 0.10s", "stderr": "",
                                                    "interrupted": False}})
            tool_t.append(dt)
        ms = lambda xs, p: round(pct(xs, p) * 1000, 1)  # noqa: E731
        out.update({
            "python_c_pass_ms": {"p50": ms(base, 50), "p95": ms(base, 95)},
            "prompt_hook_ms": {"p50": ms(prompt_t, 50), "p95": ms(prompt_t, 95)},
            "file_hook_ms": {"p50": ms(file_t, 50), "p95": ms(file_t, 95)},
            "tool_hook_ms": {"p50": ms(tool_t, 50), "p95": ms(tool_t, 95)},
            "session_start_hook_ms": {"p50": ms(start_t, 50), "p95": ms(start_t, 95)},
            "file_hook_injected": f"{injected}/{reps}",
            "in_daemon_ms": {"prompt": {"p50": ms(socket_prompt, 50), "p95": ms(socket_prompt, 95)},
                             "file": {"p50": ms(socket_file, 50), "p95": ms(socket_file, 95)},
                             "tool": {"p50": ms(socket_tool, 50), "p95": ms(socket_tool, 95)}},
            "reps": reps,
        })
        out["prompt_p95_over_python_ms"] = round(out["prompt_hook_ms"]["p95"] - out["python_c_pass_ms"]["p95"], 1)
        out["file_p95_over_python_ms"] = round(out["file_hook_ms"]["p95"] - out["python_c_pass_ms"]["p95"], 1)
        out["tool_p95_over_python_ms"] = round(out["tool_hook_ms"]["p95"] - out["python_c_pass_ms"]["p95"], 1)
        out["session_start_p95_over_python_ms"] = round(out["session_start_hook_ms"]["p95"]
                                                        - out["python_c_pass_ms"]["p95"], 1)
    shutil.rmtree(work, ignore_errors=True)
    return out


def run_hook(event: str, payload: dict[str, Any], env: dict[str, str], repo: Path) -> tuple[float, str]:
    """One Claude Code hook call as the agent makes it (a new interpreter): (seconds, stdout)."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "memstore", "integrate", "claude", "--hook", event],
                       input=json.dumps(payload), capture_output=True, text=True, env=env, cwd=repo, check=False)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    return dt, p.stdout


@contextlib.contextmanager
def warm_daemon(repo: Path, env: dict[str, str], work: Path) -> Iterator[dict[str, str]]:
    """A daemon serving ``repo`` for the length of the block; yields the env the hooks run with."""
    from memstore.surfaces import client

    denv = {**env, "MEMSTORE_DAEMON": "1", "MEMSTORE_RUNTIME_DIR": str(work / "run"),
            "MEMSTORE_CODE_VERSION": client.code_version(), "MEMSTORE_GIT_STAGE": "0"}
    log = open(work / "serve.out", "ab")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "memstore", "serve", "--idle", "900"], env=denv, cwd=repo,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    try:
        if not client.wait_until_up(180, env=denv):
            raise RuntimeError("daemon did not start")
        yield denv
    finally:
        client.stop(env=denv)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


# -- silence and relevance on the precision stores --------------------------------------------------------
def precision_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(case rows, off-topic rows): each row the store, and the (id-key, score) the prompt hook's
    read answers before the bar."""
    import offtopic_small
    import test_precision as tp

    from memstore.store.workspace import open_workspace
    from memstore.verbs.recall import prompt_candidates

    base = Path(tempfile.mkdtemp(prefix="mshooks-prec-"))
    cases, off = [], []
    for name in tp.STORES:
        repo, ids = tp.build(name, base)
        key_of = {v: k for k, v in ids.items()}
        ws = open_workspace(cwd=repo)
        for case in (c for c in tp.CASES if c["store"] == name):
            got = [(key_of.get(r["id"], r["id"]), float(r["score"])) for r in prompt_candidates(ws, case["query"])]
            cases.append({"store": name, "id": case["id"], "expect": case.get("expect", []),
                          "empty": bool(case.get("empty")), "got": got})
        for q in offtopic_small.QUESTIONS:
            got = [(key_of.get(r["id"], r["id"]), float(r["score"])) for r in prompt_candidates(ws, q)]
            off.append({"store": name, "query": q, "got": got})
    shutil.rmtree(base, ignore_errors=True)
    return cases, off


def figures(cases: list[dict[str, Any]], off: list[dict[str, Any]], bar: float) -> dict[str, Any]:
    def injected(row: dict[str, Any]) -> list[str]:
        return [k for k, s in row["got"] if s >= bar]

    answerable = [c for c in cases if c["expect"]]
    silent_rows = off + [c for c in cases if c["empty"]]
    hit = sum(any(k in injected(c) for k in c["expect"]) for c in answerable)
    all_hit = sum(all(k in injected(c) for k in c["expect"]) for c in answerable)
    quiet = sum(not injected(r) for r in silent_rows)
    n = max(1, len(answerable))
    return {"relevance": round(hit / n, 3), "all_expected": round(all_hit / n, 3),
            "silence": round(quiet / max(1, len(silent_rows)), 3), "answerable": len(answerable),
            "off_topic": len(silent_rows)}


def choose_bar(cases: list[dict[str, Any]], off: list[dict[str, Any]], tops: list[float] | None = None) -> float:
    """The bar with the most relevance among those that keep SILENCE_GOAL of the off-topic
    prompts silent, and of LoCoMo's mismatched questions when ``tops`` (their best scores) are
    given (the lowest such bar on ties); none: the most silent."""
    scored = [(b, figures(cases, off, b), locomo_figure(tops, b)) for b in BARS]
    ok = [(f["relevance"], -b) for b, f, lo in scored if f["silence"] >= SILENCE_GOAL and lo >= SILENCE_GOAL]
    if ok:
        return -max(ok)[1]
    return max(scored, key=lambda bf: (min(bf[1]["silence"], bf[2]), -bf[0]))[0]


def locomo_figure(tops: list[float] | None, bar: float) -> float:
    """Share of LoCoMo's mismatched questions the prompt hook leaves silent at ``bar``."""
    if not tops:
        return 1.0
    return sum(t < bar or t == 0.0 for t in tops) / len(tops)


def cross_validated(cases: list[dict[str, Any]], off: list[dict[str, Any]],
                    tops: list[float] | None = None) -> dict[str, Any]:
    stores = sorted({c["store"] for c in cases})
    held_cases, held_off, bars = [], [], {}
    for s in stores:
        bar = choose_bar([c for c in cases if c["store"] != s], [o for o in off if o["store"] != s], tops)
        bars[s] = bar
        held_cases += [{**c, "got": [(k, sc) for k, sc in c["got"] if sc >= bar]} for c in cases if c["store"] == s]
        held_off += [{**o, "got": [(k, sc) for k, sc in o["got"] if sc >= bar]} for o in off if o["store"] == s]
    return {"bars_per_fold": bars, **figures(held_cases, held_off, 0.0)}


# -- LoCoMo's mismatched questions ------------------------------------------------------------------------
def locomo_tops(data_dir: Path) -> list[float]:
    """The prompt hook's best score (0: nothing answered) on each of LoCoMo's mismatched
    questions: conversation i's questions of the headline categories against conversation
    i+1's store, as bench/eval_locomo.py counts abstention."""
    import numpy as np
    from eval_common import DEFAULT_CACHE, EmbeddingCache, PipelineStores, build_store
    from eval_locomo import HEADLINE_CATEGORIES, load_conversations

    from memstore.verbs.recall import prompt_candidates

    convs, _ = load_conversations(data_dir / "locomo" / "locomo_dev.json", "turns")
    cache = EmbeddingCache(DEFAULT_CACHE)
    stores = [build_store(c.name, c.texts, ["fact"] * len(c.texts), cache) for c in convs]
    pipeline = PipelineStores(cache)
    tops: list[float] = []
    try:
        for i, conv in enumerate(convs):
            other = stores[(i + 1) % len(stores)]
            pipeline.retriever()(other, "warm up", np.zeros(1))
            ws = pipeline._open(other)[0]
            for q in conv.questions:
                if q.category in HEADLINE_CATEGORIES:
                    tops.append(max((float(r["score"]) for r in prompt_candidates(ws, q.text)), default=0.0))
    finally:
        pipeline.close()
    return tops


# -- the file hook on the example store ---------------------------------------------------------------------
def example_files() -> dict[str, Any]:
    from memstore.git.stale import file_refs
    from memstore.store.workspace import open_workspace
    from memstore.verbs.api import combined_graph

    work = Path(tempfile.mkdtemp(prefix="mshooks-example-"))
    env = _env(work)
    repo = work / "repo"
    shutil.copytree(ROOT / ".memory-example", repo / ".memory")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True, env=env)
    ws = open_workspace(cwd=repo, env=env)
    memories, graph = combined_graph(ws)
    cited: dict[str, set[str]] = {}
    for m in memories.values():
        if m.id in graph.archived or m.id in graph.superseded_by:
            continue
        for path, _ in file_refs(m):
            cited.setdefault(path, set()).add(m.id)
    rows = []
    for path, want in [*sorted(cited.items()), ("src/nobody_cites_this.py", set())]:
        payload = {"session_id": f"example-{path}", "cwd": str(repo), "hook_event_name": "PreToolUse",
                   "tool_name": "Read", "tool_input": {"file_path": str(repo / path)}}
        p = subprocess.run([sys.executable, "-m", "memstore", "integrate", "claude", "--hook", "file"],
                           input=json.dumps(payload), capture_output=True, text=True, env=env, cwd=repo, check=False)
        text = json.loads(p.stdout)["hookSpecificOutput"]["additionalContext"] if p.stdout.strip() else ""
        shown = {mid for mid in want if mid in text}
        rows.append({"file": path, "cited_by": len(want), "injected": len(shown), "exit": p.returncode,
                     "silent": not p.stdout.strip()})
    shutil.rmtree(work, ignore_errors=True)
    ok = all(r["exit"] == 0 and (r["injected"] == min(r["cited_by"], 5) if r["cited_by"] else r["silent"])
             for r in rows)
    return {"files": rows, "as_expected": ok}


# -- the file hook on a store built from a real history ------------------------------------------------------
CITE = re.compile(r"^file:([^@#]+)(?:@[^#]*)?(?:#L(\d+)(?:-L(\d+))?)?$")
INJECTED = re.compile(r"^\[[a-z_]+ ([^\] ]+)\]", re.M)


def _cites(evidence: list[str]) -> dict[str, list[tuple[int, int] | None]]:
    """path -> cited line ranges (None: the whole file), read from the evidence strings here, not
    through memstore's parser."""
    out: dict[str, list[tuple[int, int] | None]] = {}
    for raw in evidence:
        m = CITE.match(raw)
        if m:
            a = int(m[2]) if m[2] else None
            out.setdefault(os.path.normpath(m[1]), []).append(None if a is None else (a, int(m[3] or a)))
    return out


def _spaced(items: list[str], k: int) -> list[str]:
    return items if len(items) <= k else [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]


def file_history(repo_arg: Path, sample: int) -> dict[str, Any]:
    import eval_review

    from memstore.read import indexes
    from memstore.store.workspace import open_workspace

    work = Path(tempfile.mkdtemp(prefix="mshooks-hist-", dir="/tmp"))
    try:
        env = _env(work)
        repo = work / "repo"
        subprocess.run(["git", "clone", "-q", str(repo_arg.resolve()), str(repo)], check=True, env=env)
        t0 = time.perf_counter()
        fixes = eval_review.fix_commits(repo, int(time.time()) + 86400)
        made = eval_review.build_memories(repo, fixes)
        os.environ.update({k: env[k] for k in ("MEMSTORE_HOME", "MEMSTORE_DAEMON")})
        ws = open_workspace(cwd=repo, env=env)
        indexes.reindex(ws)
        print(f"# {len(fixes)} fix commits, {made} memories, indexed in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
        cites = {m.id: _cites(m.evidence) for m in ws.catalog("repo").memories.values()}
        by_file: dict[str, list[tuple[str, tuple[int, int] | None]]] = {}
        for mid, per in cites.items():
            for path, ranges in per.items():
                by_file.setdefault(path, []).extend((mid, r) for r in ranges)
        tracked = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True, check=True).stdout
        at_head = sorted(f for f in tracked.split("\n") if f and not f.startswith(".memory/"))
        cited = _spaced([f for f in at_head if f in by_file], sample)
        uncited = _spaced([f for f in at_head if f not in by_file], sample)

        def overlaps(path: str, mid: str, rng: tuple[int, int]) -> bool:
            return any(c is None or (c[0] <= rng[1] and rng[0] <= c[1]) for c in cites[mid].get(path, []))

        calls: list[dict[str, Any]] = []  # kind, file, range, injected ids
        for path in cited:
            ranges = [r for _, r in by_file[path] if r is not None]
            calls.append({"kind": "read", "file": path, "tool": "Read", "input": {}})
            calls.append({"kind": "edit", "file": path, "tool": "Edit",
                          "input": {"old_string": "x", "new_string": "y"}})
            if ranges:
                a, b = ranges[0]
                calls.append({"kind": "range", "file": path, "tool": "Read", "range": (a, b),
                              "input": {"offset": a, "limit": b - a + 1}})
                n_lines = len((repo / path).read_text(errors="replace").split("\n"))
                free = next((s for s in range(1, max(1, n_lines - 19), 20)
                             if not any(r[0] <= s + 19 and s <= r[1] for r in ranges)), None)
                if free is not None and all(r is not None for _, r in by_file[path]):
                    calls.append({"kind": "free_range", "file": path, "tool": "Read", "range": (free, free + 19),
                                  "input": {"offset": free, "limit": 20}})
        calls += [{"kind": "uncited", "file": path, "tool": "Read", "input": {}} for path in uncited]

        base, times = [], []
        with warm_daemon(repo, env, work) as denv:
            def run(i: int, call: dict[str, Any]) -> tuple[float, str]:
                payload = {"session_id": f"hist-{i}", "cwd": str(repo), "hook_event_name": "PreToolUse",
                           "tool_name": call["tool"],
                           "tool_input": {"file_path": str(repo / call["file"]), **call["input"]}}
                return run_hook("file", payload, denv, repo)

            run(-1, calls[0])  # warm: the workspace opens in the daemon
            for i, call in enumerate(calls):
                t = time.perf_counter()
                subprocess.run([sys.executable, "-c", "pass"], check=True)
                base.append(time.perf_counter() - t)
                dt, out = run(i, call)
                times.append(dt)
                text = json.loads(out)["hookSpecificOutput"]["additionalContext"] if out.strip() else ""
                call["injected"] = INJECTED.findall(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def share(xs: list[bool]) -> float | None:
        return round(sum(xs) / len(xs), 3) if xs else None

    def cites_file(c: dict[str, Any], mid: str) -> bool:
        return c["file"] in cites.get(mid, {})

    out: dict[str, Any] = {"repo": repo_arg.name, "fix_commits": len(fixes), "memories": made,
                           "files_cited_at_head": sum(f in by_file for f in at_head),
                           "files_uncited_at_head": sum(f not in by_file for f in at_head),
                           "sampled": {"cited": len(cited), "uncited": len(uncited)}, "calls": len(calls)}
    for kind in ("read", "edit"):
        rows = [c for c in calls if c["kind"] == kind]
        inj = [(c, m) for c in rows for m in c["injected"]]
        out[f"{kind}_whole_file"] = {
            "calls": len(rows), "with_a_hit": share([any(cites_file(c, m) for m in c["injected"]) for c in rows]),
            "injected": len(inj), "precision": share([cites_file(c, m) for c, m in inj])}
    rows = [c for c in calls if c["kind"] == "range"]
    inj = [(c, m) for c in rows for m in c["injected"]]
    out["read_cited_range"] = {
        "calls": len(rows), "with_a_hit": share([any(overlaps(c["file"], m, c["range"]) for m in c["injected"])
                                                 for c in rows]),
        "injected": len(inj), "overlapping": share([overlaps(c["file"], m, c["range"]) for c, m in inj])}
    rows = [c for c in calls if c["kind"] == "free_range"]
    out["read_uncited_range"] = {"calls": len(rows), "silent": share([not c["injected"] for c in rows])}
    rows = [c for c in calls if c["kind"] == "uncited"]
    out["uncited_file"] = {"calls": len(rows), "silent": share([not c["injected"] for c in rows])}
    ms = lambda xs, p: round(pct(xs, p) * 1000, 1)  # noqa: E731
    out["file_hook_ms"] = {"p50": ms(times, 50), "p95": ms(times, 95)}
    out["python_c_pass_ms"] = {"p50": ms(base, 50), "p95": ms(base, 95)}
    out["p95_over_python_ms"] = round(out["file_hook_ms"]["p95"] - out["python_c_pass_ms"]["p95"], 1)
    return out


def main() -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "eval")
    ap.add_argument("--skip-locomo", action="store_true")
    ap.add_argument("--latency-only", action="store_true", help="only the latency through the daemon")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--file-repo", type=Path, metavar="PATH",
                    help="also the file hook on memories built from this repository's (or bundle's) history")
    ap.add_argument("--file-sample", type=int, default=40, help="cited (and uncited) files sampled (default 40)")
    ap.add_argument("--file-only", action="store_true", help="only the --file-repo section")
    args = ap.parse_args()
    if args.file_only and not args.file_repo:
        ap.error("--file-only needs --file-repo PATH")
    home = Path(tempfile.mkdtemp(prefix="mshooks-home-"))
    os.environ.update({"MEMSTORE_HOME": str(home / "global"), "MEMSTORE_DAEMON": "0"})
    mail = "bench@memstore.invalid"
    for var, value in (("GIT_AUTHOR_NAME", "bench"), ("GIT_COMMITTER_NAME", "bench"),
                       ("GIT_AUTHOR_EMAIL", mail), ("GIT_COMMITTER_EMAIL", mail)):
        os.environ.setdefault(var, value)
    from memstore.verbs.recall import PROMPT_BAR

    result: dict[str, Any] = {"prompt_bar": PROMPT_BAR}
    if args.file_repo is not None:
        result["file_history"] = file_history(args.file_repo, args.file_sample)
        print(json.dumps(result["file_history"], indent=1), file=sys.stderr)
        if args.file_only:
            return result
    if args.latency_only:
        result["latency"] = [latency(n, args.reps, args.data_dir) for n in args.sizes]
        return result
    cases, off = precision_rows()
    tops = [] if args.skip_locomo else locomo_tops(args.data_dir)
    result["precision_out_of_fold"] = cross_validated(cases, off, tops or None)
    result["precision_out_of_fold_without_locomo"] = cross_validated(cases, off)
    result["precision_shipped_bar"] = figures(cases, off, PROMPT_BAR)
    result["precision_no_bar"] = figures(cases, off, 0.0)
    if tops:
        result["locomo_mismatched"] = {"silence": round(locomo_figure(tops, PROMPT_BAR), 3), "questions": len(tops),
                                       "silence_no_bar": round(locomo_figure(tops, 1e-9), 3),
                                       "silence_by_bar": {b: round(locomo_figure(tops, b), 3) for b in BARS[::5]}}
    result["precision_by_bar"] = {b: figures(cases, off, b) for b in BARS[::5]}
    print(json.dumps(result, indent=1), file=sys.stderr)
    result["example_file_hook"] = example_files()
    if not args.skip_latency:
        result["latency"] = [latency(n, args.reps, args.data_dir) for n in args.sizes]
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
