"""Speed of the daemon, the CLI and the library at 1k / 10k / 100k memories (SPEC §6).

Run (from the repo root, venv active):

    python bench/perf.py                       # 1k, 10k and 100k (first 100k run embeds ~7+ min)
    python bench/perf.py --sizes 1000 10000    # skip 100k
    python bench/perf.py --reps 50 --json-out bench/.cache/perf.json

Stores are generated deterministically from templates (problems, solutions, failed tactics,
facts, preferences, changes; with links and votes), written through ``Store.create_memory``
outside any git repo, and kept under ``bench/.cache/perf/`` (gitignored) together with one shared
embedding cache, so only the first run pays for embedding. Each run rebuilds every index from
that cache, measures, and prints one table; the last line is one JSON object.

"cold" rebuild (no embedding cache) is measured at 1k only and extrapolated linearly.
The machine's load average is printed with the results: on a shared 2-core box it matters.

    python bench/perf.py cold                  # a teammate's first read after `git clone`, 1k and 10k
    python bench/perf.py cold --sizes 100000   # the same at 100k (embeds for minutes)
    python bench/perf.py cold --sizes 10000 --workers 1 2   # in-process encoder beside 2 workers
    python bench/perf.py cold --sizes 10000 --workers 1 2 --corpus mixed --eval-dir ../shared/eval
    python bench/perf.py firstread --clone /tmp/c100k --base /tmp/base --rounds 3   # first read, reused
                                               # clones, this checkout beside a base one
    python bench/perf.py cold --firsts 5       # and the first read p50 of 5 clones, each
                                               # against a daemon of its own (model loaded)
    python bench/perf.py profile --sizes 10000 # cProfile of 50 warm library reads
    python bench/perf.py shared --size 10000  # a read across repo + shared (10k) + global against
                                               # one store of the same memories, library and daemon
    python bench/perf.py noisy --sizes 100000  # store-100000-noisy: vectors without the model
    python bench/perf.py profile --sizes 100000 --store bench/.cache/perf/store-100000-noisy
    python bench/perf.py store --store bench/.cache/perf/store-100000-noisy   # warm, daemon, RSS
    python bench/perf.py project --store bench/.cache/perf/store-100000-noisy --reads  # postings projection
    python bench/perf.py grow --store bench/.cache/perf/store-100000-noisy --sizes 1000000

``cold`` commits each generated store as ``.memory/`` of a git repo (kept under
``bench/.cache/perf/``), starts a daemon (model loaded, as on a machine that used memstore
before), clones the repo, and times: the first CLI read in the clone, the time until every
memory has a vector (``daemon status``), the daemon's peak RSS; then the same first read in a
fresh clone with no daemon running (answered in-process; it starts the daemon); and beside
them, in the same run, ``python -c pass``, warm CLI reads of the clone and the encoder alone.
While the daemon embeds, a CLI read every ~second shows what a read costs meanwhile (p50 and
the worst). ``--workers`` runs it all once per ``MEMSTORE_EMBED_WORKERS`` value (1: in-process).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "bench" / ".cache" / "perf"
sys.path.insert(0, str(ROOT))

from memstore.surfaces import client  # noqa: E402

# -- the corpus -----------------------------------------------------------------------------------
COMPONENTS = [
    "auth service",
    "billing worker",
    "search indexer",
    "CI pipeline",
    "migration runner",
    "API gateway",
    "websocket hub",
    "cache layer",
    "job scheduler",
    "image resizer",
    "payment webhook",
    "ORM layer",
    "feature flag client",
    "metrics exporter",
    "rate limiter",
    "session store",
    "PDF renderer",
    "email sender",
    "GraphQL resolver",
    "Kafka consumer",
    "S3 uploader",
    "config loader",
    "CLI parser",
]
ERRORS = [
    "sqlite3.OperationalError: duplicate column name: {col}",
    "KeyError: '{col}'",
    "TimeoutError: connection to {host} timed out after 30s",
    "ModuleNotFoundError: No module named '{mod}'",
    'psycopg2.errors.UniqueViolation: duplicate key value violates unique constraint "{col}_key"',
    "RecursionError: maximum recursion depth exceeded in comparison",
    "ssl.SSLCertVerificationError: certificate verify failed for {host}",
    "OSError: [Errno 24] Too many open files",
    "MemoryError while decoding {mod} payload",
    "AssertionError: expected 200, got 502 from {host}",
    "TypeError: 'NoneType' object is not subscriptable",
    "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0",
    "redis.exceptions.ConnectionError: Error 111 connecting to {host}:6379",
    "jinja2.exceptions.UndefinedError: '{col}' is undefined",
    "ValueError: invalid literal for int(): '{col}'",
]
COLS = [
    "user_id",
    "created_at",
    "tenant",
    "email",
    "status",
    "retry_count",
    "amount_cents",
    "locale",
    "slug",
    "parent_id",
    "expires_at",
    "checksum",
    "region",
    "plan",
    "api_key_hash",
]
HOSTS = [
    "db-primary",
    "redis-cache",
    "auth.internal",
    "api.stripe.com",
    "s3.amazonaws.com",
    "kafka-0",
    "ldap",
    "smtp-relay",
    "vault.internal",
    "es-cluster",
]
MODS = ["yaml", "orjson", "pydantic.v1", "numpy.core", "grpc", "boto3", "lxml.etree", "cryptography.hazmat"]
FILES = [
    "src/{c}/handlers.py",
    "db/migrations/2026{n:04d}_add_{col}.sql",
    "tests/{c}/test_api.py",
    "config/{c}.toml",
    "src/{c}/client.py",
    ".github/workflows/ci.yml",
    "docker/{c}.Dockerfile",
    "Makefile",
]
CAUSES = [
    "the retry loop reused a closed connection",
    "the migration ran twice on a re-deployed pod",
    "a stale lock file survived the container restart",
    "the fixture leaked state between tests",
    "the env var was read at import time before it was set",
    "two workers raced on the same row",
    "the cache key ignored the tenant",
    "the timezone was naive and compared with an aware datetime",
    "the pool size was smaller than the number of threads",
    "the dependency was pinned to a yanked release",
]
FIXES = [
    "wrap the call in a transaction and check {col} first",
    "set the pool size from the worker count",
    "move the env lookup into the function body",
    "add a unique index on {col} and upsert",
    "pin {mod} to the previous minor release",
    "use a per-test tmp dir and reset the singleton",
    "add jittered exponential backoff with a cap",
    "compare timezone-aware UTC datetimes everywhere",
    "make the migration idempotent with IF NOT EXISTS",
    "read the certificate bundle from certifi",
]
BAD = [
    "increasing the timeout to 120s only hid the problem",
    "deleting the row from schema_versions broke prod",
    "disabling the test in CI let the regression ship",
    "catching Exception swallowed the real error",
    "restarting the pod cleared it for an hour, then it came back",
    "bumping {mod} to latest broke the build",
]
PREFS = [
    "prefer pytest fixtures over unittest setUp",
    "keep functions under 40 lines",
    "use ruff, not flake8",
    "write migrations by hand, never autogenerate",
    "log with structlog key-value pairs",
    "prefer dataclasses over dicts for records",
    "review every SQL change with EXPLAIN first",
]
TAGS = ["sqlite", "postgres", "ci", "auth", "perf", "flaky", "deploy", "python", "kafka", "cache", "security"]


def _fill(rng: random.Random, template: str, comp: str) -> str:
    return template.format(
        col=rng.choice(COLS),
        host=rng.choice(HOSTS),
        mod=rng.choice(MODS),
        c=comp.replace(" ", "_"),
        n=rng.randrange(10000),
    )


def _text(rng: random.Random, kind: str, i: int) -> str:
    comp = rng.choice(COMPONENTS)
    err = _fill(rng, rng.choice(ERRORS), comp)
    path = _fill(rng, rng.choice(FILES), comp)
    cause = rng.choice(CAUSES)
    fix = _fill(rng, rng.choice(FIXES), comp)
    if kind == "problem":
        body = (
            f"The {comp} fails with `{err}` when {cause.split(' ', 1)[1]}. Seen in {path} during "
            f"{rng.choice(['deploys', 'nightly runs', 'load tests', 'local dev', 'CI on main'])}."
        )
    elif kind == "solution":
        body = f"Fixed the {comp} failure (`{err}`): {fix}. The root cause was that {cause}. Change made in {path}."
    elif kind == "failed_tactic":
        body = f"For `{err}` in the {comp}: {_fill(rng, rng.choice(BAD), comp)}. The real cause was that {cause}."
    elif kind == "fact":
        body = (
            f"The {comp} reads its settings from {path}; {rng.choice(COLS)} is required and "
            f"{rng.choice(HOSTS)} is the upstream it talks to in production."
        )
    elif kind == "preference":
        body = f"In the {comp}, {rng.choice(PREFS)}; also {rng.choice(PREFS)}."
    else:
        body = f"Changed the {comp}: {fix} (see {path}). This affects how {rng.choice(COLS)} is handled."
    return f"{body} [case {i}]"


KIND_MIX = [("problem", 25), ("solution", 20), ("failed_tactic", 15), ("fact", 20), ("preference", 10), ("change", 10)]


EVAL_DIR = [ROOT.parent / "shared" / "eval"]  # --eval-dir of `cold`


def mixed_texts(n: int) -> list[str]:
    """bench/embed_speed.py's mixed set: half LoCoMo turns, half Hadoop bug reports (<= 4000
    characters, a memory's cap; the model reads the first 256 tokens anyway)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from embed_speed import load_texts

    return [t[:4000] for t in load_texts(n, EVAL_DIR[0])[1]]


def generate_store(root: Path, n: int, corpus: str = "templates", scope: str = "repo") -> None:
    """``n`` memories + votes, deterministic text (ids are fresh ULIDs; the cache keys on text);
    ``corpus="mixed"``: the texts are ``mixed_texts``; ``scope="global"``: a global store's."""
    given = mixed_texts(n) if corpus == "mixed" else None
    from memstore.store import ids as idmod
    from memstore.store.config import Config
    from memstore.store.disk import Store
    from memstore.store.model import Event, Memory

    rng = random.Random(n)
    config = Config().with_overrides({"git": {"stage": False, "commit": False}})
    store = Store(root=root, scope=scope, config=config, worktree=None)
    store.init()
    kinds = [k for k, w in KIND_MIX for _ in range(w)]
    problems: list[str] = []
    facts: list[str] = []
    all_ids: list[str] = []
    for i in range(n):
        kind = "problem" if i < 3 else rng.choice(kinds)
        links: dict[str, Any] = {}
        if kind in ("solution", "failed_tactic"):
            links["problem"] = rng.choice(problems)
        elif kind == "change":
            links["change_targets"] = [rng.choice(facts or problems)]
        if all_ids and rng.random() < 0.1:
            links["related"] = [rng.choice(all_ids)]
        mem = Memory(
            id=idmod.new_id(),
            kind=kind,
            text=_text(rng, kind, i) if given is None else given[i],
            scope=scope,
            created=f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}T10:00:00Z",
            author="bench",
            confidence=round(rng.uniform(0.5, 0.95), 2),
            rationale="generated for bench/perf.py",
            links=links,
            evidence=["user:bench"],
            tags=rng.sample(TAGS, 2),
        )
        store.create_memory(mem)
        all_ids.append(mem.id)
        (problems if kind == "problem" else facts if kind == "fact" else []).append(mem.id)
        if rng.random() < 0.05:
            ev = Event(
                id=idmod.new_id(),
                type="utility_vote",
                created="2026-06-01T00:00:00Z",
                author="bench",
                memory=mem.id,
                vote=rng.choice([1.0, 0.5, -0.5]),
                problem=rng.choice(problems),
            )
            store.create_event(ev)
    (root / ".complete").write_text(str(n))


QUERIES = [
    "sqlite migration fails with duplicate column name",
    "auth service timeout connecting to db-primary",
    "Too many open files in the websocket hub",
    "how do we configure the billing worker",
    "flaky test because fixture leaked state",
    "certificate verify failed for api.stripe.com",
    "KeyError tenant in cache layer",
    "what did we try for the Kafka consumer retry loop",
    "rate limiter race on the same row",
    "preferences for writing migrations",
    "redis ConnectionError Error 111 in session store",
    "GraphQL resolver NoneType not subscriptable",
    "timezone naive datetime comparison bug",
    "ModuleNotFoundError pydantic.v1 in CI pipeline",
    "job scheduler pool size smaller than threads",
    "PDF renderer UnicodeDecodeError byte 0xff",
]


# -- measuring --------------------------------------------------------------------------------------
def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    vals = sorted(values)
    k = min(len(vals) - 1, max(0, round(p / 100 * (len(vals) - 1))))
    return vals[k]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


# What an agent runs: the installed console script (it imports `re`, then memstore.surfaces.entry).
SCRIPT = Path(sys.executable).parent / "memstore"
CLI = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "memstore"]


def timed_cli(args: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*CLI, *args],
        env=env,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"memstore {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-500:]}")
    return dt, proc.stdout


def prepare(n: int, shared_emb: Path, *, cold: bool = False) -> tuple[Path, float]:
    """The store for ``n`` (generated once), its .index/ wiped, then a full rebuild timed."""
    from memstore.read import indexes
    from memstore.store.workspace import open_workspace

    root = CACHE / f"store-{n}"
    if not (root / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        t0 = time.perf_counter()
        generate_store(root, n)
        print(f"# generated {n} memories in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    shutil.rmtree(root / ".index", ignore_errors=True)
    (root / ".index").mkdir()
    # memstore replaces any link inside .index/ (a clone could plant one), so the shared
    # embedding cache is copied in before the timed rebuild and back out after it; a cold
    # rebuild starts with none.
    cache = root / ".index" / "embeddings"
    if not cold and shared_emb.is_dir():
        shutil.copytree(shared_emb, cache)
    env = {"MEMSTORE_STORE": str(root), "MEMSTORE_HOME": str(CACHE / "global"), "MEMSTORE_DAEMON": "0"}
    t0 = time.perf_counter()
    ws = open_workspace(cwd=root, env=env)
    indexes.reindex(ws)
    dt = time.perf_counter() - t0
    if not cold and cache.is_dir():
        shutil.rmtree(shared_emb, ignore_errors=True)
        shutil.copytree(cache, shared_emb)
    return root, dt


def library_reads(root: Path, reps: int) -> tuple[dict[str, list[float]], Any]:
    """Reads through the library API in one process: with a watcher vouching for the files
    (``Workspace.watch()``, what a long-lived program uses), the same with the association
    chain's kept neighbours dropped before each read (every hop reads the matrix: a query
    unlike any before), and without a watcher (each call walks the store's files)."""
    from memstore.read import retrieve
    from memstore.store.workspace import open_workspace

    env = {"MEMSTORE_STORE": str(root), "MEMSTORE_HOME": str(CACHE / "global")}
    ws = open_workspace(cwd=root, env=env)
    ws.watch()
    for q in QUERIES[:3]:
        retrieve.read(ws, {"query": q}, log_episode=False)
    out: dict[str, list[float]] = {"watched": [], "cold_lists": [], "walk": []}
    for i in range(reps):
        t0 = time.perf_counter()
        retrieve.read(ws, {"query": QUERIES[i % len(QUERIES)]}, log_episode=False)
        out["watched"].append(time.perf_counter() - t0)
    for i in range(reps):
        ws.read_cache.pop("near", None)
        t0 = time.perf_counter()
        retrieve.read(ws, {"query": QUERIES[i % len(QUERIES)]}, log_episode=False)
        out["cold_lists"].append(time.perf_counter() - t0)
    ws.close()
    for i in range(min(reps, 10)):
        t0 = time.perf_counter()
        retrieve.read(ws, {"query": QUERIES[i % len(QUERIES)]}, log_episode=False)
        out["walk"].append(time.perf_counter() - t0)
    return out, ws


def floor(ws: Any, reps: int) -> dict[str, float]:
    from memstore.index.embedder import get_embedder

    si = ws.indexes["repo"]
    qv = get_embedder().encode(QUERIES[: reps % len(QUERIES) or len(QUERIES)])
    fa, wh, enc = [], [], []
    for i in range(reps):
        q = QUERIES[i % len(QUERIES)]
        t0 = time.perf_counter()
        si.vectors.search(qv[i % len(qv)], 50)
        fa.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        si.keyword.search(q, 5)
        wh.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        get_embedder().encode([q])
        enc.append(time.perf_counter() - t0)
    starts = []
    for _ in range(10):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        starts.append(time.perf_counter() - t0)
    return {
        "faiss_p50_ms": ms(pct(fa, 50)),
        "whoosh_p50_ms": ms(pct(wh, 50)),
        "encode_p50_ms": ms(pct(enc, 50)),
        "python_start_p50_ms": ms(pct(starts, 50)),
    }


def reads_beside_raw(ws: Any, reps: int) -> dict[str, list[float]]:
    """Warm library reads, each query met before, each beside the raw searches a read makes
    for the same query (the nearest 50 vectors, Whoosh's 50 best, the query's encoding), in
    alternating order: the ratio of the two is read within one moment of the machine's load."""
    from memstore.index.embedder import get_embedder
    from memstore.read import retrieve

    si = ws.indexes["repo"]
    ws.watch()  # as library_reads' watched reads (it closes the watcher at its end)
    for q in QUERIES:
        retrieve.read(ws, {"query": q}, log_episode=False)
    out: dict[str, list[float]] = {"read": [], "raw": []}

    def read(q: str) -> None:
        t0 = time.perf_counter()
        retrieve.read(ws, {"query": q}, log_episode=False)
        out["read"].append(time.perf_counter() - t0)

    def raw(q: str) -> None:
        t0 = time.perf_counter()
        qv = get_embedder().encode([q])[0]
        si.vectors.search(qv, 50)
        si.keyword.search(q, 50)
        out["raw"].append(time.perf_counter() - t0)

    for i in range(reps):
        q = QUERIES[i % len(QUERIES)]
        for run in (read, raw)[:: 1 if i % 2 else -1]:
            run(q)
    ws.close()
    return out


def client_alone(reps: int) -> dict[str, float]:
    """The CLI's own cost: the console script reading through a stand-in daemon that answers at
    once (the same trust checks pass: a 0700 runtime dir, our socket, our uid), each run next to
    a `python -c pass`. The gap is what the client adds to an interpreter start (issue #14)."""
    import threading

    rdir = Path(tempfile.mkdtemp(prefix="msclient-", dir="/tmp"))
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(rdir / client.SOCKET_NAME))
    server.listen(8)
    reply = json.dumps({"stdout": "{}\n", "stderr": "", "exit_code": 0}).encode() + b"\n"

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                client._recv_line(conn)
                conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    env.update({"MEMSTORE_RUNTIME_DIR": str(rdir), "MEMSTORE_DAEMON": "1",
                "MEMSTORE_CODE_VERSION": client.code_version()})
    calls, starts = [], []
    try:
        for i in range(reps):
            t0 = time.perf_counter()
            subprocess.run([*CLI, "read", *QUERIES[i % len(QUERIES)].split()], env=env, capture_output=True,
                           check=True)
            calls.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            starts.append(time.perf_counter() - t0)
    finally:
        server.close()
        shutil.rmtree(rdir, ignore_errors=True)
    return {"client_alone_p50_ms": ms(pct(calls, 50)),
            "client_over_start_p50_ms": round(ms(pct(calls, 50)) - ms(pct(starts, 50)), 1)}


def write_text(n: int, i: int) -> str:
    """A new fact unlike the others (a near-duplicate would be refused, a cheaper path)."""
    rnd = random.Random(time.time_ns())
    words = rnd.sample([w for line in CAUSES + FIXES + ERRORS for w in line.split() if w.isalpha()], 10)
    return (f"Perf write {n}-{i}: the {rnd.choice(COMPONENTS)} on {rnd.choice(HOSTS)} "
            f"{' '.join(words)} (checked {rnd.randrange(10**6)})")


def daemon_env(root: Path, rdir: Path) -> dict[str, str]:
    """The environment of a bench daemon serving the store at ``root``, its socket in ``rdir``."""
    from memstore.surfaces import client

    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    env.update(
        {
            "MEMSTORE_STORE": str(root),
            "MEMSTORE_HOME": str(CACHE / "global"),
            "MEMSTORE_RUNTIME_DIR": str(rdir),
            "MEMSTORE_DAEMON": "1",
            "MEMSTORE_AUTHOR": "bench",
            # bench/.cache is inside this (ignored) checkout: never touch its git index
            "MEMSTORE_GIT_STAGE": "0",
            # a checkout being edited meanwhile must not make the daemon restart mid-run
            "MEMSTORE_CODE_VERSION": client.code_version(),
        }
    )
    return env


def daemon_runs(root: Path, reps: int, n: int) -> dict[str, Any]:
    rdir = Path(tempfile.mkdtemp(prefix="msperf-", dir="/tmp"))
    env = daemon_env(root, rdir)
    if "MEMSTORE_APPROX_ROWS" in os.environ:  # a run that sets the approximate threshold sets the daemon's
        env["MEMSTORE_APPROX_ROWS"] = os.environ["MEMSTORE_APPROX_ROWS"]
    os.environ["MEMSTORE_CODE_VERSION"] = env["MEMSTORE_CODE_VERSION"]
    out: dict[str, Any] = {}
    proc = start_daemon(rdir, env)
    try:
        cwd = root
        timed_cli(["read", "warm", "up"], env, cwd)  # opens the workspace and loads the index
        reads = [timed_cli(["read", *QUERIES[i % len(QUERIES)].split()], env, cwd)[0] for i in range(reps)]
        out["cli_read_daemon"] = reads
        # Every query met once now: the same reads again, each beside a `python -c pass`
        # (alternating which goes first), so the gap over an interpreter start is read within
        # one moment of the machine's load.
        met, starts = [], []
        for i in range(reps):
            pair = [lambda i=i: met.append(timed_cli(["read", *QUERIES[i % len(QUERIES)].split()], env, cwd)[0]),
                    lambda: starts.extend(python_start(1))]
            for run in pair[:: 1 if i % 2 else -1]:
                run()
        out["cli_read_daemon_met"], out["python_start_beside"] = met, starts
        inproc_env = {**env, "MEMSTORE_DAEMON": "0"}
        out["cli_read_inproc"] = [timed_cli(["read", *QUERIES[i].split()], inproc_env, cwd)[0] for i in range(3)]
        # the session-start call: the same ambient read plus preferences, facts and changes
        ctx = [["context", "--task", QUERIES[i % len(QUERIES)]] for i in range(reps)]
        out["cli_context_daemon"] = [timed_cli(args, env, cwd)[0] for args in ctx]
        out["cli_context_inproc"] = [timed_cli(args, inproc_env, cwd)[0] for args in ctx[:3]]
        # writes: through the socket (what the daemon costs) and through the CLI (what an agent sees)
        msg_base = {
            "verb": "write",
            "version": client.code_version(),
            "cwd": str(cwd),
            "store": None,
            "env": client.forwarded_env(env),
        }
        sock_w, cli_w = [], []
        for i in range(max(10, reps // 2)):
            req = {
                "op": "write",
                "memory": {
                    "kind": "fact",
                    "scope": "repo",
                    "evidence_refs": ["user:bench"],
                    "text": write_text(n, i),
                },
            }
            t0 = time.perf_counter()
            ans = client.call({**msg_base, "version": client.code_version(), "request": req}, env=env, timeout=120)
            sock_w.append(time.perf_counter() - t0)
            assert ans.get("exit_code") == 0, ans  # a refused duplicate would time a cheaper path
            req["memory"]["text"] = write_text(n, i) + " (cli)"
            cli_w.append(timed_cli(["write", "--json", "-"], env, cwd, stdin=json.dumps(req))[0])
        out["write_socket"], out["write_cli"] = sock_w, cli_w
        # change -> visible: a file written by hand, reads polled over the socket
        vis = []
        for i in range(5):
            marker = f"zq{n}x{i}x{time.time_ns() % 10**9}"
            path = root / "facts" / f"hand-{marker}.md"
            note = f"Hand written note {marker} about the {COMPONENTS[i]}"
            path.write_text(f"---\nkind: fact\n---\n{note}\n")
            t0 = time.perf_counter()
            # the note's own words: the read must find it once indexed, whatever the gate thinks
            # of a bare marker
            read_msg = {
                **msg_base,
                "verb": "read",
                "version": client.code_version(),
                "request": {"op": "read", "query": note},
            }
            while time.perf_counter() - t0 < 10:
                ans = client.call(read_msg, env=env)
                if any(marker in r["text"] for r in ans["answer"]["results"]):
                    break
                time.sleep(0.01)
            vis.append(time.perf_counter() - t0)
            if vis[-1] > 1.0:  # keep what the daemon saw, for a look later
                keep = CACHE / f"slow-visible-{n}-{marker}.log"
                shutil.copy(rdir / "daemon.log", keep)
                print(f"# slow change->visible at {n}: {vis[-1]:.1f} s, gate {ans['answer']['stats'].get('gate')}, "
                      f"log kept in {keep}", file=sys.stderr)
            path.unlink()
            time.sleep(0.3)
        out["visible"] = vis
        st = client.status(env=env)
        out["daemon_peak_rss_mb"] = st.get("peak_rss_mb")
        out["daemon_rss_mb"] = st.get("rss_mb")
        # the socket round trip alone
        pings = []
        for _ in range(20):
            t0 = time.perf_counter()
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(rdir / "sock"))
            s.sendall(b'{"verb":"ping"}\n')
            client._recv_line(s)
            s.close()
            pings.append(time.perf_counter() - t0)
        out["ping"] = pings
    finally:
        client.stop(env=env)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(rdir, ignore_errors=True)
    # the memories written above are removed so the next run starts from the same store
    for p in list((root / "facts").glob("*-perf-write-*.md")):
        p.unlink()
    return out


# -- cold: the first read after a clone -------------------------------------------------------------
def _corpus_name(n: int, corpus: str) -> str:
    return f"{n}" if corpus == "templates" else f"{corpus}-{n}"


def git_origin(n: int, corpus: str = "templates") -> Path:
    """A git repo whose committed ``.memory/`` holds the generated store of ``n`` (made once)."""
    origin = CACHE / f"origin-{_corpus_name(n, corpus)}"
    if (origin / ".complete").exists():
        return origin
    store = CACHE / f"store-{_corpus_name(n, corpus)}"
    if not (store / ".complete").exists():
        shutil.rmtree(store, ignore_errors=True)
        t0 = time.perf_counter()
        generate_store(store, n, corpus)
        print(f"# generated {n} memories in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    shutil.rmtree(origin, ignore_errors=True)
    origin.mkdir(parents=True)
    shutil.copytree(store, origin / ".memory", ignore=shutil.ignore_patterns(".index", ".complete"))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=origin, check=True)
    subprocess.run([*git, "add", "-A"], cwd=origin, check=True)
    subprocess.run([*git, "commit", "-q", "-m", f"{n} memories"], cwd=origin, check=True)
    (origin / ".complete").write_text(str(n))  # untracked: not part of any clone
    return origin


def python_start(reps: int = 10) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        out.append(time.perf_counter() - t0)
    return out


def encode_rate(origin: Path, workers: int, count: int = 1000) -> float:
    """Texts/s of the embedder alone on this store's texts, in this process (with ``workers``
    worker processes, as the daemon would use them): the floor beside the daemon's rate of
    embedding a clone (on a shared machine both move with the load)."""
    from memstore.index.embedder import Embedder
    from memstore.store.files import parse_markdown

    paths = sorted((origin / ".memory").glob("*/*.md"))
    step = max(1, len(paths) // count)
    texts = [parse_markdown(p.read_text(encoding="utf-8"))[1].strip() for p in paths[::step][:count]]
    emb = Embedder(workers=workers)
    for _ in emb.encode_parts(texts):  # the model loaded and the workers started: not timed
        pass
    t0 = time.perf_counter()
    for _ in emb.encode_parts(texts):
        pass
    rate = len(texts) / (time.perf_counter() - t0)
    emb.close()
    return rate


def store_texts(origin: Path) -> list[str]:
    """Every memory's text in the origin's store, once each: what the daemon's background
    embedding of a clone sends to the encoder (text keys the embedding cache lacks)."""
    from memstore.store.config import Config
    from memstore.store.disk import Store

    store = Store(root=origin / ".memory", scope="repo", config=Config(), worktree=None)
    return list(dict.fromkeys(store.load_memory(rel).text for rel, _ in store.memory_files()))


def pool_alone_s(texts: list[str], workers: int) -> tuple[float, float | None]:
    """Seconds the encoder pool takes for ``texts`` alone (the embedder's ``encode_parts``, as
    the daemon calls it, with ``workers`` worker processes; 1: in-process), encoding only: the
    model loaded and the workers started first, untimed. The floor of the whole background
    embedding of a clone, which encodes these same texts. Also the CPU seconds it took (this
    process and its workers; None without /proc)."""
    import resource

    from memstore.index.embedder import POOL_START_TEXTS, Embedder

    emb = Embedder(workers=workers)
    for _ in emb.encode_parts(texts[:POOL_START_TEXTS]):
        pass
    pids = emb.worker_pids()

    def cpu() -> float | None:
        own = resource.getrusage(resource.RUSAGE_SELF)
        theirs = [proc_cpu(pid) for pid in pids]
        return None if None in theirs else own.ru_utime + own.ru_stime + sum(t for t in theirs if t is not None)

    c0 = cpu()
    t0 = time.perf_counter()
    for _ in emb.encode_parts(texts):
        pass
    took = time.perf_counter() - t0
    c1 = cpu()
    emb.close()
    return took, (None if c0 is None or c1 is None else c1 - c0)


def proc_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used, every thread's, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def daemon_cpu(pid: int) -> float | None:
    """CPU seconds of the daemon ``pid`` and its live embedding workers: the whole's cost in CPU,
    which a busy machine's share does not move (the wall-clock ratio moves with the load)."""
    own = proc_cpu(pid)
    if own is None:
        return None
    workers = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid and b"memstore.index.encoder_pool" in cmd:
                workers += proc_cpu(int(entry.name)) or 0.0
    return own + workers


def cold_env(work: Path, workers: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    env.update({"MEMSTORE_HOME": str(work / "global"), "MEMSTORE_RUNTIME_DIR": str(work / "run"),
                "MEMSTORE_DAEMON": "1", "MEMSTORE_CODE_VERSION": client.code_version(),
                "MEMSTORE_EMBED_WORKERS": str(workers)})
    return env


def start_daemon(work: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A daemon for ``env``, returned once it answers (its model is loaded before it binds)."""
    log = open(work / "serve.out", "ab")  # noqa: SIM115
    # Started in ``work``: ``-m`` puts the folder it starts in first on the path, so started in
    # a checkout it would import that checkout's memstore over a base's on PYTHONPATH.
    proc = subprocess.Popen([sys.executable, "-m", "memstore", "serve", "--idle", "900"], env=env, cwd=work,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    if not client.wait_until_up(120, env=env):
        log_path = Path(env["MEMSTORE_RUNTIME_DIR"]) / "daemon.log"
        raise RuntimeError(f"daemon did not start: {log_path.read_text()[-2000:]}")
    return proc


def stop_daemon(proc: subprocess.Popen[bytes], env: dict[str, str]) -> None:
    client.stop(env=env)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def first_read_once(origin: Path, workers: int) -> float:
    """Seconds of the first CLI read in a fresh clone, against a daemon of its own that has
    loaded the model and has seen no other clone (nothing else embeds meanwhile)."""
    work = Path(tempfile.mkdtemp(prefix="msfirst-", dir="/tmp"))
    env = cold_env(work, workers)
    proc = start_daemon(work, env)
    try:
        clone = work / "clone"
        subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
        return timed_cli(["read", *QUERIES[0].split()], env, clone)[0]
    finally:
        stop_daemon(proc, env)
        shutil.rmtree(work, ignore_errors=True)


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_read_reused(clone: Path, workers: int, tree: Path | None = None) -> tuple[float, float, dict[str, Any]]:
    """Seconds, the daemon's CPU seconds and the answer of the first CLI read in ``clone`` with
    its ``.memory/.index/`` removed (what a fresh clone's first read finds, without a clone of
    100k files per run), against a daemon of its own that has loaded the model; ``tree``: the
    memstore package of that checkout is imported instead (on ``PYTHONPATH``; the daemon starts
    in ``work``), to measure a base commit beside this one."""
    work = Path(tempfile.mkdtemp(prefix="msreused-", dir="/tmp"))
    env = cold_env(work, workers)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
        env["MEMSTORE_CODE_VERSION"] = f"{client.code_version()}-base"
    shutil.rmtree(clone / ".memory" / ".index", ignore_errors=True)
    proc = start_daemon(work, env)
    try:
        cpu = process_cpu(proc.pid)
        took, out = timed_cli(["read", *QUERIES[0].split()], env, clone)
        return took, process_cpu(proc.pid) - cpu, json.loads(out)
    finally:
        stop_daemon(proc, env)
        shutil.rmtree(work, ignore_errors=True)


def firstread_main(argv: list[str]) -> int:
    """``perf.py firstread``: the first CLI read through a running daemon in reused clones, this
    checkout and a base checkout interleaved (the load moves both alike)."""
    ap = argparse.ArgumentParser(prog="perf.py firstread")
    ap.add_argument("--clone", type=Path, nargs="+", required=True, help="clones of perf.py's origins")
    ap.add_argument("--base", type=Path, help="a checkout of the base commit (its memstore/ is imported)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args(argv)
    trees: list[tuple[str, Path | None]] = [("this", None)] + ([("base", a.base.resolve())] if a.base else [])
    for clone in a.clone:
        got: dict[str, list[float]] = {name: [] for name, _ in trees}
        for _ in range(a.rounds):
            for name, tree in trees:
                load = os.getloadavg()[0]
                took, cpu, answer = first_read_reused(clone.resolve(), a.workers, tree)
                got[name].append(took)
                part = answer.get("partial", {})
                print(f"{clone.name} {name}: {ms(took)} ms, daemon cpu {ms(cpu)} ms (load {load:.1f}; "
                      f"{len(answer['results'])} results, "
                      f"unread {part.get('unread', 0)}, total {part.get('total', '-')})", flush=True)
        print(f"{clone.name}: " + ", ".join(f"{name} p50 {ms(pct(v, 50))} ms" for name, v in got.items()), flush=True)
    return 0


def cold_run(n: int, reps: int, workers: int, corpus: str = "templates", firsts: int = 1,
             firsts_only: bool = False, embed_only: bool = False, read_every: float = 1.0) -> dict[str, Any]:
    origin = git_origin(n, corpus)
    row: dict[str, Any] = {"n": n, "corpus": corpus, "workers": workers}
    if firsts > 1 or firsts_only:
        times = [first_read_once(origin, workers) for _ in range(firsts)]
        row["firsts"] = [ms(t) for t in times]
        row["first_read_p50_ms"] = ms(pct(times, 50))
        if firsts_only:
            return row
    row["load_avg_1m_start"] = round(os.getloadavg()[0], 2)
    work = Path(tempfile.mkdtemp(prefix=f"mscold-{n}-", dir="/tmp"))
    env = cold_env(work, workers)
    proc = start_daemon(work, env)
    try:
        t0 = time.perf_counter()
        clone = work / "clone"
        subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
        row["clone_s"] = round(time.perf_counter() - t0, 2)
        cpu0 = daemon_cpu(proc.pid)
        own0 = proc_cpu(proc.pid)
        kids0 = _children_cpu()
        t0 = time.perf_counter()
        first_s, out = timed_cli(["read", *QUERIES[0].split()], env, clone)
        first = json.loads(out)
        row["first_read_ms"] = ms(first_s)
        row["first_read_partial"] = first.get("partial")
        row["first_read_results"] = len(first["results"])
        during: list[float] = []
        during_cpu: list[float] = []
        polls: list[float] = []  # the bench's own ``daemon status`` calls: the daemon's CPU for them
        seconds_done = wait_all_vectors(env, t0, reads=(clone, during) if read_every else None, every=read_every,
                                        pid=proc.pid, cpus=during_cpu, polls=polls)
        row["read_every_s"] = read_every
        row["read_while_embedding_p50_ms"] = ms(pct(during, 50)) if during else None
        # What a read costs the daemon while it embeds: CPU the workers do not get.
        row["read_while_embedding_cpu_p50_ms"] = ms(pct(during_cpu, 50)) if during_cpu else None
        row["reads_while_embedding"] = len(during)
        row["read_while_embedding_max_ms"] = ms(max(during, default=float("nan")))
        cpu1 = daemon_cpu(proc.pid)
        own1 = proc_cpu(proc.pid)
        if cpu0 is not None and cpu1 is not None:
            row["all_vectors_cpu_s"] = round(cpu1 - cpu0, 1)
        # Where the CPU went: the daemon's own threads (its workers' is the rest), its reads
        # among them, and the bench's CLI clients (not the daemon's, but the same cores).
        if own0 is not None and own1 is not None:
            row["daemon_own_cpu_s"] = round(own1 - own0, 1)
        row["reads_daemon_cpu_s"] = round(sum(during_cpu), 1)
        row["status_polls"] = len(polls)
        row["status_polls_daemon_cpu_s"] = round(sum(polls), 1)
        row["clients_cpu_s"] = round(_children_cpu() - kids0, 1)
        row["all_vectors_s"] = round(seconds_done, 1) if seconds_done is not None else None
        row["embed_rate_per_s"] = round(n / seconds_done) if seconds_done else None
        row["daemon_peak_rss_mb"] = client.status(env=env).get("peak_rss_mb")
        # The same reads once every memory has its vector: what one during the embedding should cost.
        after_cpu = [request_cpu(proc.pid, lambda i=i: timed_cli(
            ["read", *QUERIES[i % len(QUERIES)].split()], env, clone))[1] for i in range(8)]
        got_cpu = [c for c in after_cpu if c is not None]
        row["read_after_embedding_cpu_p50_ms"] = ms(pct(got_cpu, 50)) if got_cpu else None
        if not embed_only:
            warm = [timed_cli(["read", *QUERIES[i % len(QUERIES)].split()], env, clone)[0] for i in range(reps)]
            last = json.loads(timed_cli(["read", *QUERIES[0].split()], env, clone)[1])
            row["after_partial"] = last.get("partial")
            row["warm_read_p50_ms"] = ms(pct(warm, 50))
            row["warm_read_p95_ms"] = ms(pct(warm, 95))
            row["python_start_p50_ms"] = ms(pct(python_start(), 50))
    finally:
        stop_daemon(proc, env)
        # The daemon's log (how long its background embedding took, and where) outlives the run.
        with contextlib.suppress(OSError):
            shutil.copy(work / "run" / "daemon.log", CACHE / f"daemon-{_corpus_name(n, corpus)}-w{workers}.log")
            shutil.copy(work / "serve.out", CACHE / f"serve-{_corpus_name(n, corpus)}-w{workers}.log")
            row["embedding_log"] = embedding_summary(work / "run" / "daemon.log")
        shutil.rmtree(work, ignore_errors=True)
    # With the daemon gone, nothing else embeds: the same texts through the same pool, encoding
    # only, right after the whole (both move with the machine's load).
    texts = store_texts(origin)
    row["texts"] = len(texts)
    took, cpu = pool_alone_s(texts, workers)
    row["pool_alone_s"] = round(took, 1)
    if cpu is not None:
        row["pool_alone_cpu_s"] = round(cpu, 1)
    if row.get("all_vectors_s"):
        row["whole_over_pool"] = round(row["all_vectors_s"] / row["pool_alone_s"], 2)
    if row.get("all_vectors_cpu_s") and row.get("pool_alone_cpu_s"):
        row["whole_over_pool_cpu"] = round(row["all_vectors_cpu_s"] / row["pool_alone_cpu_s"], 2)
    row["load_avg_1m"] = round(os.getloadavg()[0], 2)
    if embed_only:
        return row
    row.update(cold_without_daemon(n, origin, env["MEMSTORE_EMBED_WORKERS"]))
    row["encoder_alone_per_s"] = round(encode_rate(origin, workers))
    return row


def embedding_summary(log: Path) -> str | None:
    """The daemon's own account of its background embedding (when the first and last vectors
    came, the CPU of putting them in and of the encoding thread), from its log."""
    mark = "embedded the waiting memories in "
    lines = [line for line in log.read_text(errors="replace").splitlines() if mark in line]
    return lines[-1].split(mark, 1)[1] if lines else None


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each live thread of process ``pid`` (Linux ``/proc``; empty without it)."""
    out: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _children_cpu() -> float:
    """CPU seconds of this process's waited-for children (the CLI reads it ran)."""
    import resource

    got = resource.getrusage(resource.RUSAGE_CHILDREN)
    return got.ru_utime + got.ru_stime


def request_cpu(pid: int, call: Callable[[], Any]) -> tuple[Any, float | None]:
    """``call()``'s answer and the CPU seconds the daemon ``pid`` spent on it: the CPU of its
    threads that began and ended meanwhile (the daemon serves each connection on a thread of
    its own), i.e. the process's CPU less what its threads alive before and after used (its
    embedding threads among them). None without /proc."""
    before, own0 = thread_cpu(pid), proc_cpu(pid)
    got = call()
    after, own1 = thread_cpu(pid), proc_cpu(pid)
    if own0 is None or own1 is None or not before:
        return got, None
    lasting = sum(after[t] - before[t] for t in before.keys() & after.keys())
    # Not clamped at 0: the samples are not taken at one instant, so busy threads (the workers'
    # feeders) move either side a tick; summed over many calls the errors cancel.
    return got, own1 - own0 - lasting


def wait_all_vectors(env: dict[str, str], t0: float, reads: tuple[Path, list[float]] | None = None,
                     every: float = 1.0, pid: int | None = None, cpus: list[float] | None = None,
                     polls: list[float] | None = None) -> float | None:
    """Seconds from ``t0`` until ``daemon status`` shows every store's memories with a vector;
    with ``reads`` (a clone, a list), a CLI read in the clone every ``every`` seconds meanwhile,
    its seconds appended to the list (and, given the daemon's ``pid``, the daemon's CPU seconds
    for it to ``cpus``, and for each ``daemon status`` asked to ``polls``)."""
    last_read = time.perf_counter()
    while time.perf_counter() - t0 < 3600:
        if reads is not None and time.perf_counter() - last_read >= every:
            args = ["read", *QUERIES[len(reads[1]) % len(QUERIES)].split()]
            took, cpu = request_cpu(pid, lambda args=args: timed_cli(args, env, reads[0])[0]) if pid else (
                timed_cli(args, env, reads[0])[0], None)
            reads[1].append(took)
            if cpus is not None and cpu is not None:
                cpus.append(cpu)
            last_read = time.perf_counter()
        try:
            st, cpu = request_cpu(pid, lambda: client.status(env=env)) if pid else (client.status(env=env), None)
        except OSError:
            st, cpu = {}, None
        if polls is not None and cpu is not None:
            polls.append(cpu)
        stores = [s for w in st.get("workspaces", []) for s in w.get("stores", [])]
        if stores and all(s["embedded"] == s["total"] for s in stores):
            return time.perf_counter() - t0
        # Once per read (a read a second): each ``daemon status`` costs the daemon CPU its workers
        # then lack (384 polls, 6.7 s of its CPU, at four a second over a 10k clone's 128 s).
        time.sleep(min(1.0, max(0.05, every - (time.perf_counter() - last_read))) if reads is not None else 0.5)
    return None


def cold_without_daemon(n: int, origin: Path, workers: str) -> dict[str, Any]:
    """The same clone when no daemon runs: the first read is answered in-process (waiting as a
    daemon read would) and starts the daemon with ``--warm``, which embeds the rest."""
    work = Path(tempfile.mkdtemp(prefix=f"mscold-nd-{n}-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    env.update({"MEMSTORE_HOME": str(work / "global"), "MEMSTORE_RUNTIME_DIR": str(work / "run"),
                "MEMSTORE_DAEMON": "1", "MEMSTORE_CODE_VERSION": client.code_version(),
                "MEMSTORE_EMBED_WORKERS": workers})
    out: dict[str, Any] = {}
    try:
        clone = work / "clone"
        subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
        t0 = time.perf_counter()
        first_s, text = timed_cli(["read", *QUERIES[0].split()], env, clone)
        out["no_daemon_first_read_ms"] = ms(first_s)
        out["no_daemon_first_read_partial"] = json.loads(text).get("partial")
        client.wait_until_up(120, env=env)
        done = wait_all_vectors(env, t0)
        out["no_daemon_all_vectors_s"] = round(done, 1) if done is not None else None
    finally:
        client.stop(env=env)
        time.sleep(1)
        shutil.rmtree(work, ignore_errors=True)
    return out


def cold_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="perf.py cold", description="the first read after a git clone")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--workers", type=int, nargs="+", default=[1],
                    help="MEMSTORE_EMBED_WORKERS values, each a run of its own (1: the in-process encoder)")
    ap.add_argument("--corpus", choices=("templates", "mixed"), default="templates",
                    help="templates: ~21-word generated memories; mixed: bench/embed_speed.py's mixed set")
    ap.add_argument("--eval-dir", type=Path, default=EVAL_DIR[0], help="the shared eval data (for --corpus mixed)")
    ap.add_argument("--firsts", type=int, default=1,
                    help="time the first read in this many fresh clones (each with its own daemon) and "
                         "report their p50 beside the full run's single first read")
    ap.add_argument("--firsts-only", action="store_true", help="only the --firsts first reads")
    ap.add_argument("--read-every", type=float, default=1.0,
                    help="seconds between the CLI reads made while the daemon embeds (0: none, only the first)")
    ap.add_argument("--embed-only", action="store_true",
                    help="only the background embedding of the clone against the encoder pool alone "
                         "(no warm reads, no run without a daemon)")
    a = ap.parse_args(argv)
    EVAL_DIR[0] = a.eval_dir
    import compileall  # as main() does: measure an installed package, not bytecode compiling

    compileall.compile_dir(str(Path(client.__file__).parent), quiet=1)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    CACHE.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in a.sizes:
        for workers in a.workers:
            row = cold_run(n, a.reps, workers, a.corpus, a.firsts, a.firsts_only, a.embed_only, a.read_every)
            rows.append(row)
            print(f"# {json.dumps(row)}", file=sys.stderr, flush=True)
    cols = [("n", "memories"), ("corpus", "corpus"), ("workers", "workers"), ("clone_s", "git clone s"),
            ("first_read_ms", "first read ms"), ("first_read_p50_ms", f"first read p50 of {a.firsts} ms"),
            ("first_read_partial", "first read partial"), ("all_vectors_s", "all vectors s"),
            ("embed_rate_per_s", "memories/s"), ("pool_alone_s", "floor: pool alone, same texts s"),
            ("whole_over_pool", "whole / pool alone"), ("all_vectors_cpu_s", "all vectors: daemon CPU s"),
            ("pool_alone_cpu_s", "pool alone CPU s"), ("whole_over_pool_cpu", "CPU whole / pool"),
            ("encoder_alone_per_s", "floor: encoder alone texts/s"),
            ("daemon_peak_rss_mb", "daemon peak RSS MB"),
            ("no_daemon_first_read_ms", "no daemon: first read ms"), ("no_daemon_first_read_partial", "partial"),
            ("no_daemon_all_vectors_s", "all vectors s"),
            ("read_while_embedding_p50_ms", "read while embedding p50 ms"),
            ("read_while_embedding_max_ms", "max"),
            ("read_while_embedding_cpu_p50_ms", "its daemon CPU p50 ms"),
            ("read_after_embedding_cpu_p50_ms", "after: daemon CPU p50 ms"),
            ("daemon_own_cpu_s", "daemon's own CPU s (no workers)"), ("reads_daemon_cpu_s", "of it reads s"),
            ("clients_cpu_s", "bench clients CPU s"), ("status_polls_daemon_cpu_s", "its status polls s"),
            ("warm_read_p50_ms", "warm read p50 ms"), ("warm_read_p95_ms", "p95"),
            ("python_start_p50_ms", "floor python start ms")]
    print("| " + " | ".join(h for _, h in cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join("" if r.get(k) is None else str(r.get(k)) for k, _ in cols) + " |")
    summary = {"load_avg": os.getloadavg()[0], "cpus": os.cpu_count(), "rows": rows}
    if a.json_out:
        a.json_out.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, separators=(",", ":")))
    return 0


def profile_main(argv: list[str]) -> int:
    """Where a warm library read's time goes: the generated store (built as the main run builds
    it, its index reused when a run left one), a watched workspace, BLAS on one thread as in the
    daemon, one pass over the queries to
    warm it, then ``--reps`` reads timed without a profiler and again under cProfile; the top
    functions by cumulative and by own time."""
    import cProfile
    import io
    import pstats

    from memstore.read import retrieve
    from memstore.store.workspace import open_workspace

    ap = argparse.ArgumentParser(prog="perf.py profile", description=profile_main.__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--store", type=Path, help="profile this indexed store instead (--sizes is then its label)")
    ap.add_argument("--daemon", action="store_true",
                    help="profile the daemon's handling of a CLI read instead: the argv parsed, the workspace "
                         "looked up, the read, the output rendered and the reply encoded (in process, no socket)")
    a = ap.parse_args(argv)
    if a.daemon:
        return profile_daemon(a)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")  # as the daemon runs a read (surfaces/daemon_work.one_blas_thread)
    CACHE.mkdir(parents=True, exist_ok=True)
    for n in a.sizes:
        root = a.store.resolve() if a.store else CACHE / f"store-{n}"
        if a.store is None and not ((root / ".complete").exists() and (root / ".index" / "meta.json").exists()):
            root, _ = prepare(n, CACHE / "embeddings")
        ws = open_workspace(cwd=root, env={"MEMSTORE_STORE": str(root), "MEMSTORE_HOME": str(CACHE / "global")})
        ws.watch()
        for q in QUERIES:
            retrieve.read(ws, {"query": q}, log_episode=False)
        plain = []
        for i in range(a.reps):
            t0 = time.perf_counter()
            retrieve.read(ws, {"query": QUERIES[i % len(QUERIES)]}, log_episode=False)
            plain.append(time.perf_counter() - t0)
        prof = cProfile.Profile()
        prof.enable()
        for i in range(a.reps):
            retrieve.read(ws, {"query": QUERIES[i % len(QUERIES)]}, log_episode=False)
        prof.disable()
        ws.close()
        print(f"## n={n}: {a.reps} warm library reads, p50 {ms(pct(plain, 50))} ms, p95 {ms(pct(plain, 95))} ms "
              f"without the profiler; load {os.getloadavg()[0]:.1f}\n")
        for order in ("cumulative", "tottime"):
            out = io.StringIO()
            stats = pstats.Stats(prof, stream=out)
            stats.strip_dirs().sort_stats(order).print_stats(a.top)
            print(f"### by {order} (per read: divide by {a.reps})\n\n```")
            print(out.getvalue().split("\n\n", 2)[-1].strip())
            print("```\n", flush=True)
    return 0


def _print_profile(prof: Any, reps: int, top: int) -> None:
    import io
    import pstats

    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).strip_dirs().sort_stats(order).print_stats(top)
        print(f"### by {order} (per read: divide by {reps})\n\n```")
        print(out.getvalue().split("\n\n", 2)[-1].strip())
        print("```\n", flush=True)


def profile_daemon(a: argparse.Namespace) -> int:
    """``profile --daemon``: a daemon's request handling for ``memstore read ...`` from a client,
    as ``Daemon._serve_conn`` runs it after reading the line (``Daemon.handle``, then the reply
    encoded as JSON), on the daemon's warm workspace; each query met before."""
    import cProfile
    import gc

    from memstore.surfaces.daemon import Daemon
    from memstore.surfaces.daemon_work import replying

    for n in a.sizes:
        root = a.store.resolve() if a.store else CACHE / f"store-{n}"
        if a.store is None and not ((root / ".complete").exists() and (root / ".index" / "meta.json").exists()):
            root, _ = prepare(n, CACHE / "embeddings")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
        env.update({"MEMSTORE_STORE": str(root), "MEMSTORE_HOME": str(CACHE / "global"), "MEMSTORE_GIT_STAGE": "0"})
        os.environ.update(env)
        rdir = Path(tempfile.mkdtemp(prefix="msprof-", dir="/tmp"))
        daemon = Daemon(rdir, 600)
        daemon.warm_up()

        def one(q: str, daemon: Any = daemon, root: Path = root, env: dict[str, str] = env) -> bytes:
            msg = {"verb": "cli", "version": daemon.version, "cwd": str(root), "env": client.forwarded_env(env),
                   "argv": ["read", *q.split()], "stdin": None, "tty": False, "new_id": None, "color": False}
            with replying():
                reply = daemon.handle(msg)
            return json.dumps(reply, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"

        try:
            for q in QUERIES * 2:
                one(q)
            plain = []
            for i in range(a.reps):
                t0 = time.perf_counter()
                one(QUERIES[i % len(QUERIES)])
                plain.append(time.perf_counter() - t0)
            prof = cProfile.Profile()
            prof.enable()
            for i in range(a.reps):
                one(QUERIES[i % len(QUERIES)])
            prof.disable()
            print(f"## n={n}: {a.reps} CLI reads handled by the daemon, p50 {ms(pct(plain, 50))} ms, p95 "
                  f"{ms(pct(plain, 95))} ms without the profiler; collector on: {gc.isenabled()}, frozen "
                  f"objects {gc.get_freeze_count()}; load {os.getloadavg()[0]:.1f}\n")
            _print_profile(prof, a.reps, a.top)
        finally:
            daemon.watcher.stop()
            shutil.rmtree(rdir, ignore_errors=True)
    return 0


def noisy_main(argv: list[str]) -> int:
    """``store-<n>-noisy``: the generated store of ``n`` memories whose vectors are the real
    ones of the 10k store plus noise, put in its embedding cache and indexed, without the model:
    the per-memory work of a read does not depend on what the vectors are, and 100k texts take
    over an hour to embed on a busy 2-core machine."""
    import numpy as np

    from memstore.index.embcache import text_key
    from memstore.read import indexes
    from memstore.read.tuning import params_from_config
    from memstore.store.workspace import open_workspace

    ap = argparse.ArgumentParser(prog="perf.py noisy", description=noisy_main.__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100000])
    a = ap.parse_args(argv)
    CACHE.mkdir(parents=True, exist_ok=True)
    real, _ = prepare(10000, CACHE / "embeddings")
    env = {"MEMSTORE_HOME": str(CACHE / "global"), "MEMSTORE_DAEMON": "0"}
    rws = open_workspace(cwd=real, env={**env, "MEMSTORE_STORE": str(real)})
    indexes.reindex(rws)
    vecs = indexes.store_index(rws, "repo", params_from_config(rws.config)).vectors
    assert vecs is not None
    base = vecs.matrix().copy()
    for n in a.sizes:
        root = CACHE / f"store-{n}-noisy"
        if not (root / ".complete").exists():
            shutil.rmtree(root, ignore_errors=True)
            generate_store(root, n)
        ws = open_workspace(cwd=root, env={**env, "MEMSTORE_STORE": str(root)})
        texts = sorted({m.text for m in ws.catalog("repo").memories.values()})
        rng = np.random.default_rng(n)
        x = base[rng.integers(0, len(base), len(texts))]
        x = x + rng.normal(0, 0.3 / np.sqrt(x.shape[1]), x.shape).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        cache = indexes.store_index(ws, "repo", params_from_config(ws.config)).embedding_cache()
        cache.put_many([text_key(t) for t in texts], x.astype(np.float32))
        t0 = time.perf_counter()
        indexes.reindex(ws)
        print(f"{root}: {len(texts)} texts, indexed in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


# -- reading across stores --------------------------------------------------------------------------
def copy_store(src: Path, dest: Path, *, as_scope: str | None = None) -> None:
    """``src``'s memories and events copied into ``dest`` (its index is not: every store builds
    its own from the embedding cache; nor its settings: the defaults hold for every store);
    ``as_scope`` rewrites the files' ``scope:``."""
    from memstore.store.model import KIND_DIRS

    dest.mkdir(parents=True, exist_ok=True)
    for sub in [*KIND_DIRS.values(), "events"]:
        (dest / sub).mkdir(exist_ok=True)
        for path in (src / sub).iterdir():
            text = path.read_text()
            if as_scope is not None and path.suffix == ".md":
                text = text.replace("\nscope: global\n", f"\nscope: {as_scope}\n", 1)
            (dest / sub / path.name).write_text(text)


def across_stores(n: int, repo_n: int, global_n: int) -> tuple[dict[str, str], dict[str, str]]:
    """The two layouts read in ``shared``, built once under ``bench/.cache/perf/across-*``: repo
    (``repo_n``) + an attached shared store (``n``) + global (``global_n``), and one repo store
    holding the same memories (no global store). (split env, single env)"""
    from memstore.store.workspace import SHARED_DIRNAME

    base = CACHE / f"across-{repo_n}-{n}-{global_n}"
    split = {"MEMSTORE_STORE": str(base / "repo"), "MEMSTORE_HOME": str(base / "home")}
    single = {"MEMSTORE_STORE": str(base / "single"), "MEMSTORE_HOME": str(base / "nohome")}
    if (base / ".complete").exists():
        return split, single
    shutil.rmtree(base, ignore_errors=True)
    sources = {}
    for size in (repo_n, n):
        src = CACHE / f"store-{size}"
        if not (src / ".complete").exists():
            shutil.rmtree(src, ignore_errors=True)
            generate_store(src, size)
        sources[size] = src
    home = base / "home"
    generate_store(home, global_n, scope="global")
    copy_store(sources[repo_n], base / "repo")
    copy_store(sources[n], home / SHARED_DIRNAME / "org")
    for src in (sources[repo_n], sources[n]):
        copy_store(src, base / "single")
    copy_store(home, base / "single", as_scope="repo")
    (base / ".complete").write_text("")
    return split, single


def index_all(env: dict[str, str]) -> list[dict[str, Any]]:
    """Every store ``env`` reads indexed, from the shared embedding cache; the cache then holds
    what was embedded here too. One line per store: scope, memories, seconds."""
    from memstore.read import indexes
    from memstore.read.tuning import params_from_config
    from memstore.store.workspace import open_workspace

    emb = CACHE / "embeddings"
    ws = open_workspace(cwd=Path(env["MEMSTORE_STORE"]), env={**env, "MEMSTORE_DAEMON": "0"})
    out = []
    for store in ws.stores(include_shared=True):
        cache = store.root / ".index" / "embeddings"
        if not (store.root / ".index" / "meta.json").exists() and emb.is_dir():
            shutil.rmtree(store.root / ".index", ignore_errors=True)
            (store.root / ".index").mkdir()
            shutil.copytree(emb, cache)
        t0 = time.perf_counter()
        si = indexes.store_index(ws, store.scope, params_from_config(ws.config))
        si.refresh()
        out.append({"scope": store.scope, "memories": len(si.catalog.memories),
                    "seconds": round(time.perf_counter() - t0, 1)})
        if cache.is_dir() and sum(1 for _ in cache.rglob("*")) > sum(1 for _ in emb.rglob("*")):
            shutil.rmtree(emb, ignore_errors=True)
            shutil.copytree(cache, emb)
    ws.close()
    return out


def shared_main(argv: list[str]) -> int:
    """A warm read across the repo store, an attached shared store of ``--size`` memories and the
    global store, against a read of one repo store holding the same memories: the same queries,
    interleaved (one of each per query, their order alternating, so the machine's load falls on
    both alike), through the library (a watched workspace each) and through the CLI to one
    daemon that serves both. p50 / p95 of each and their ratio (across / one store)."""
    from memstore.read import retrieve
    from memstore.store.workspace import open_workspace

    ap = argparse.ArgumentParser(prog="perf.py shared", description=shared_main.__doc__)
    ap.add_argument("--size", type=int, default=10000, help="memories in the shared store")
    ap.add_argument("--repo", type=int, default=1000, help="memories in the repo store")
    ap.add_argument("--global", dest="global_n", type=int, default=500, help="memories in the global store")
    ap.add_argument("--reps", type=int, default=48)
    ap.add_argument("--json-out", type=Path)
    a = ap.parse_args(argv)
    import compileall

    compileall.compile_dir(str(Path(client.__file__).parent), quiet=1)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    CACHE.mkdir(parents=True, exist_ok=True)
    split, single = across_stores(a.size, a.repo, a.global_n)
    layouts = {"across": split, "one store": single}
    built = {name: index_all(env) for name, env in layouts.items()}
    print(f"# stores: {json.dumps(built)}", file=sys.stderr, flush=True)
    order = [list(layouts), list(reversed(layouts))]

    # The library: one watched workspace per layout, as a long-lived program holds it.
    spaces = {}
    for name, env in layouts.items():
        ws = open_workspace(cwd=Path(env["MEMSTORE_STORE"]), env={**env, "MEMSTORE_DAEMON": "0"})
        ws.watch()
        for q in QUERIES:
            retrieve.read(ws, {"query": q}, log_episode=False)
        spaces[name] = ws
    counts = {name: len(retrieve.read(ws, {"query": QUERIES[0]}, log_episode=False)["results"])
              for name, ws in spaces.items()}
    lib: dict[str, list[float]] = {name: [] for name in layouts}
    for i in range(a.reps):
        for name in order[i % 2]:
            t0 = time.perf_counter()
            retrieve.read(spaces[name], {"query": QUERIES[i % len(QUERIES)]}, log_episode=False)
            lib[name].append(time.perf_counter() - t0)
    for ws in spaces.values():
        ws.close()

    # The CLI, each call through one daemon that holds both workspaces warm.
    rdir = Path(tempfile.mkdtemp(prefix="msperf-", dir="/tmp"))
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    base.update({"MEMSTORE_RUNTIME_DIR": str(rdir), "MEMSTORE_DAEMON": "1", "MEMSTORE_GIT_STAGE": "0",
                 "MEMSTORE_CODE_VERSION": client.code_version()})
    envs = {name: {**base, **env} for name, env in layouts.items()}
    log = open(rdir / "serve.out", "ab")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "memstore", "serve", "--idle", "600"], env=base,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    cli: dict[str, list[float]] = {name: [] for name in layouts}
    starts: list[float] = []
    try:
        if not client.wait_until_up(120, env=base):
            raise RuntimeError(f"daemon did not start: {(rdir / 'daemon.log').read_text()[-2000:]}")
        for env in envs.values():
            for q in QUERIES:
                timed_cli(["read", *q.split()], env, Path(env["MEMSTORE_STORE"]))
        for i in range(a.reps):
            for name in order[i % 2]:
                env = envs[name]
                cli[name].append(timed_cli(["read", *QUERIES[i % len(QUERIES)].split()], env,
                                           Path(env["MEMSTORE_STORE"]))[0])
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            starts.append(time.perf_counter() - t0)
    finally:
        client.stop(env=base)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(rdir, ignore_errors=True)

    rows = []
    for surface, times in (("library", lib), ("CLI through the daemon", cli)):
        row: dict[str, Any] = {"surface": surface}
        for name in layouts:
            row[f"{name} p50"], row[f"{name} p95"] = ms(pct(times[name], 50)), ms(pct(times[name], 95))
        row["ratio p50"] = round(pct(times["across"], 50) / pct(times["one store"], 50), 2)
        row["ratio p95"] = round(pct(times["across"], 95) / pct(times["one store"], 95), 2)
        rows.append(row)
    total = a.size + a.repo + a.global_n
    print(f"{a.reps} reads each, {total} memories: repo {a.repo} + shared {a.size} + global {a.global_n} "
          f"against one store of {total}; results on the first query {counts}; python -c pass p50 "
          f"{ms(pct(starts, 50))} ms; load {os.getloadavg()[0]:.1f}\n")
    keys = list(rows[0])
    print("| " + " | ".join(k if k == "surface" else f"{k} (ms)" if "p" in k and "ratio" not in k else k
                            for k in keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    summary = {"load_avg": os.getloadavg()[0], "cpus": os.cpu_count(), "memories": total, "reps": a.reps,
               "python_start_p50_ms": ms(pct(starts, 50)), "rows": rows}
    if a.json_out:
        a.json_out.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, separators=(",", ":")))
    return 0


def store_main(argv: list[str]) -> int:
    """The warm measures of the main run on an indexed store made elsewhere (``perf.py noisy``'s
    100k, whose vectors need no model): warm library reads (BLAS on one thread, as the daemon
    runs them) with the vector lane each took, the raw index searches beside them (the store's
    approximate or flat nearest-50 search, Whoosh, the query's encoding), ``python -c pass``,
    and through a daemon: CLI reads, writes, change -> visible and its RSS."""
    from threadpoolctl import threadpool_limits

    from memstore.read import retrieve

    ap = argparse.ArgumentParser(prog="perf.py store", description=store_main.__doc__)
    ap.add_argument("--store", type=Path, required=True, help="an indexed store (its .index/ is kept)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json-out", type=Path)
    a = ap.parse_args(argv)
    import compileall

    compileall.compile_dir(str(Path(client.__file__).parent), quiet=1)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    root = a.store.resolve()
    with threadpool_limits(1, user_api="blas"):
        lib, ws = library_reads(root, a.reps)
        row: dict[str, Any] = {"store": root.name, "n": len(ws.catalog("repo").memories)}
        # index/postings.py: a first read takes its words' postings from it (perf.py project)
        row["postings_projection_mb"] = round(sum(p.stat().st_size for p in _projections(root)) / 1e6, 1)
        row["lib_read_p50_ms"], row["lib_read_p95_ms"] = ms(pct(lib["watched"], 50)), ms(pct(lib["watched"], 95))
        lanes = [retrieve.read(ws, {"query": q}, log_episode=False)["stats"].get("approximate") for q in QUERIES]
        row["approximate_reads"] = sum(1 for s in lanes if s and s["searches"] and not s["flat"])
        row["flat_reads"] = len(lanes) - row["approximate_reads"]
        row.update(floor(ws, a.reps))
        beside = reads_beside_raw(ws, a.reps)
    row["raw_searches_p50_ms"] = round(row["faiss_p50_ms"] + row["whoosh_p50_ms"] + row["encode_p50_ms"], 1)
    # The reads above meet most queries for the first time (their words' postings are read
    # from the index then) while the floor's searches come after them; these are every
    # query met before, each read beside the three raw searches of the same query.
    row["lib_read_met_p50_ms"], row["lib_read_met_p95_ms"] = ms(pct(beside["read"], 50)), ms(pct(beside["read"], 95))
    row["raw_beside_p50_ms"] = ms(pct(beside["raw"], 50))
    row["lib_read_met_over_raw"] = round(pct(beside["read"], 50) / pct(beside["raw"], 50), 2)
    del ws
    d = daemon_runs(root, a.reps, row["n"])
    for key in ("cli_read_daemon", "write_socket", "write_cli"):
        row[f"{key}_p50_ms"], row[f"{key}_p95_ms"] = ms(pct(d[key], 50)), ms(pct(d[key], 95))
    row["visible_p50_ms"], row["visible_max_ms"] = ms(pct(d["visible"], 50)), ms(max(d["visible"]))
    row["daemon_peak_rss_mb"], row["daemon_rss_mb"] = d["daemon_peak_rss_mb"], d["daemon_rss_mb"]
    start = row["python_start_p50_ms"]
    row["cli_read_over_start_p50_ms"] = round(row["cli_read_daemon_p50_ms"] - start, 1)
    row["cli_read_over_start_p95_ms"] = round(row["cli_read_daemon_p95_ms"] - start, 1)
    met, beside = d["cli_read_daemon_met"], d["python_start_beside"]
    row["cli_read_met_p50_ms"], row["cli_read_met_p95_ms"] = ms(pct(met, 50)), ms(pct(met, 95))
    row["python_start_beside_p50_ms"] = ms(pct(beside, 50))
    row["cli_read_met_over_start_p50_ms"] = round(ms(pct(met, 50)) - ms(pct(beside, 50)), 1)
    row["cli_read_met_over_start_p95_ms"] = round(ms(pct(met, 95)) - ms(pct(beside, 50)), 1)
    row["lib_read_over_raw"] = round(row["lib_read_p50_ms"] / row["raw_searches_p50_ms"], 2)
    print("| measure | value |\n|---|---|")
    for key, value in row.items():
        print(f"| {key} | {value} |")
    summary = {"load_avg": os.getloadavg()[0], "cpus": os.cpu_count(), "row": row}
    if a.json_out:
        a.json_out.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, separators=(",", ":")))
    return 0


def _projections(root: Path) -> list[Path]:
    """The postings projections beside the store's keyword segments (index/postings.py)."""
    from memstore.index.postings import is_sidecar

    folder = root / ".index" / "keyword"
    return sorted(p for p in folder.iterdir() if is_sidecar(p.name)) if folder.is_dir() else []


def project_main(argv: list[str]) -> int:
    """The postings projection of an indexed store's keyword index, written as the daemon writes
    it in a pause (``--remove``: removed, for a run without it), with its size and the CPU it
    took; then, in ``--rounds`` rounds alternating which goes first, the CPU a first read of
    each query spends on its words' postings with the projection and decoding Whoosh's blocks
    (a fresh scorer each round: every term met for the first time), and whether the two give
    the same document numbers and weights, term by term."""
    import statistics

    import numpy as np

    from memstore.index.keyword import ArrayScorer, _read_postings
    from memstore.read.indexes import store_index
    from memstore.read.tuning import params_from_config
    from memstore.store.workspace import open_workspace

    ap = argparse.ArgumentParser(prog="perf.py project", description=project_main.__doc__)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--remove", action="store_true", help="remove the store's projections and stop")
    ap.add_argument("--reads", action="store_true",
                    help="and whole library reads' CPU, first reads with and without it (a fresh scorer each round)")
    a = ap.parse_args(argv)
    root = a.store.resolve()
    if a.remove:
        for path in _projections(root):
            path.unlink()
            print(f"removed {path.name}")
        return 0
    ws = open_workspace(cwd=root, env={"MEMSTORE_STORE": str(root), "MEMSTORE_HOME": str(CACHE / "global"),
                                       "MEMSTORE_GIT_STAGE": "0"})
    si = store_index(ws, "repo", params_from_config(ws.config))
    si.refresh()  # loaded as a read loads it
    ki = si.keyword
    assert ki is not None
    t0, c0 = time.perf_counter(), time.process_time()
    for build in ki.projection_builds():
        while not build.step():
            pass
        size = ki.projected(build)
        print(f"wrote {build.segment_id}.postings: {build.postings} postings of {build.terms_seen} terms, "
              f"{(size or 0) / 1e6:.1f} MB, {build.cpu:.2f} s of CPU")
    print(f"projections: {[(p.name, round(p.stat().st_size / 1e6, 1)) for p in _projections(root)]}; "
          f"{time.perf_counter() - t0:.2f} s wall, {time.process_time() - c0:.2f} s of CPU; "
          f"load {os.getloadavg()[0]:.1f}")
    searcher = ki.searcher
    leaves = [r for r, _ in searcher.reader().leaf_readers()]
    pairs = [[p for p in ki.pairs(q) if p[0] in ("text", "code", "tags")] for q in QUERIES]
    cpu: dict[str, list[float]] = {"projection": [], "blocks": []}
    for rnd in range(a.rounds):
        for mode in (("projection", "blocks") if rnd % 2 == 0 else ("blocks", "projection")):
            scorer = ArrayScorer(1.0, 1.0, ki.folder if mode == "projection" else None, ki._seal_key)
            for query_pairs in pairs:
                c0 = time.thread_time()
                for reader in leaves:
                    for field_name, text in query_pairs:
                        scorer._term_postings(reader, field_name, text)
                cpu[mode].append(time.thread_time() - c0)
            scorer.close()
    same = terms = 0
    scorer = ArrayScorer(1.0, 1.0, ki.folder, ki._seal_key)
    for query_pairs in pairs:
        for reader in leaves:
            for field_name, text in query_pairs:
                got, want = scorer._term_postings(reader, field_name, text), _read_postings(reader, field_name, text)
                terms += 1
                same += (got is None and want is None) or (
                    got is not None and want is not None and np.array_equal(got[0], want[0])
                    and np.array_equal(got[1], want[1]) and got[1].dtype == want[1].dtype)
    scorer.close()
    for mode, values in cpu.items():
        print(f"postings of a first read, {mode}: CPU per query mean {ms(statistics.mean(values))} ms, "
              f"p50 {ms(pct(values, 50))}, p95 {ms(pct(values, 95))} ({len(values)} reads)")
    print(f"the same postings term by term: {same} of {terms}; load {os.getloadavg()[0]:.1f}")
    if a.reads:
        _project_reads(ws, ki, a.rounds)
    ws.close()
    return 0


def _project_reads(ws: Any, ki: Any, rounds: int) -> None:
    """``project --reads``: whole library reads (BLAS on one thread), every query's words met
    for the first time (a fresh keyword scorer each round) with the projection and without it,
    alternated, the rest of the read warm; then each query met before. CPU per read, and
    whether the answers (ids, scores) are the same."""
    import statistics

    from threadpoolctl import threadpool_limits

    from memstore.read import retrieve

    res: dict[str, list[float]] = {"projection": [], "blocks": [], "met before": []}
    answers: dict[str, list[tuple[str, float]]] = {}
    same = True
    ws.watch()  # as the daemon's and perf.py's reads: no stat walk of the store per read
    with threadpool_limits(1, user_api="blas"):
        for q in QUERIES:
            retrieve.read(ws, {"query": q}, log_episode=False)
        for rnd in range(rounds):
            for mode in (("projection", "blocks") if rnd % 2 == 0 else ("blocks", "projection")):
                ki._scorer.close()
                ki._scorer = ki._new_scorer()
                if mode == "blocks":
                    ki._scorer.folder = None
                for q in QUERIES:
                    c0 = time.thread_time()
                    got = retrieve.read(ws, {"query": q}, log_episode=False)
                    res[mode].append(time.thread_time() - c0)
                    ranked = [(r["id"], r["score"]) for r in got["results"]]
                    same = same and answers.setdefault(q, ranked) == ranked
                for q in QUERIES:
                    c0 = time.thread_time()
                    retrieve.read(ws, {"query": q}, log_episode=False)
                    res["met before"].append(time.thread_time() - c0)
    for mode, values in res.items():
        print(f"whole read, {mode}: CPU p50 {ms(statistics.median(values))} ms, mean {ms(statistics.mean(values))}, "
              f"p95 {ms(pct(values, 95))} ({len(values)} reads)")
    print(f"the same answers with and without the projection: {same}; load {os.getloadavg()[0]:.1f}")


def grow_main(argv: list[str]) -> int:
    """A warm read's ranking at sizes no generated store reaches (1M memories: 100 minutes of
    writing files): rows drawn around an indexed store's (a row plus noise, renormalised, as
    ``noisy`` does), the store's kinds sampled for them, in a ``VectorIndex`` with the threshold
    of the setting; per size the add and training seconds, the RSS they added, and
    ``ranking.rank`` for each query (approximate lane, and a few flat passes beside it), BLAS
    on one thread. The keyword lane is not simulated: it is the store's own Whoosh search,
    timed by ``store``. The same is timed on the store's own rows, so a read at size n is that
    store's library read plus the difference."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from memstore.index.embedder import get_embedder
    from memstore.index.vectors import VectorIndex
    from memstore.read import ranking, retrieve
    from memstore.read.rowspace import Nearest
    from memstore.read.tuning import params_from_config
    from memstore.store.workspace import open_workspace

    ap = argparse.ArgumentParser(prog="perf.py grow", description=grow_main.__doc__)
    ap.add_argument("--store", type=Path, required=True, help="an indexed store (perf.py noisy's 100k)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--flat-reps", type=int, default=5)
    a = ap.parse_args(argv)
    root = a.store.resolve()
    ws = open_workspace(cwd=root, env={"MEMSTORE_STORE": str(root), "MEMSTORE_HOME": str(CACHE / "global"),
                                       "MEMSTORE_DAEMON": "0"})
    params = params_from_config(ws.config).ranking
    retrieve.read(ws, {"query": "warm up"}, log_episode=False)  # loads the store's indexes
    vecs = ws.indexes["repo"].vectors
    assert vecs is not None and len(vecs)
    memories = ws.catalog("repo").memories
    base = vecs.matrix().copy()
    base_kinds = [memories[m].kind if m in memories else "fact" for m in vecs.row_ids()]
    qvecs = get_embedder().encode(QUERIES)
    table = {k: params.kind_offset.get(k, 0.0) for k in set(base_kinds)}
    rng = np.random.default_rng(1)

    def rss() -> float:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def timed(vi: VectorIndex, kinds: list[str], lane: Nearest | None, reps: int) -> list[float]:
        offsets = np.array([table[k] for k in kinds], dtype=np.float32)
        out = []
        for i in range(reps):
            t0 = time.perf_counter()
            ranking.rank(qvecs[i % len(qvecs)], vi.matrix(), [], kinds, params=params, offsets=offsets,
                         nearest=lane)
            out.append(time.perf_counter() - t0)
        return out

    with threadpool_limits(1, user_api="blas"):
        for n in [len(base), *a.sizes]:
            before = rss()
            if n == len(base):
                x, kinds = base, base_kinds
            else:
                pick = rng.integers(0, len(base), n)
                x = base[pick] + rng.normal(0, 0.3 / np.sqrt(base.shape[1]), (n, base.shape[1])).astype(np.float32)
                x /= np.linalg.norm(x, axis=1, keepdims=True)
                kinds = [base_kinds[i] for i in pick]
            vi = VectorIndex(base.shape[1])
            t0 = time.perf_counter()
            vi.add([f"r{i}" for i in range(n)], x)
            added = time.perf_counter() - t0
            del x
            t0 = time.perf_counter()
            lane = Nearest([vi], (n,)) if vi.approximate() else None
            if lane is not None:
                vi.approx()
            trained = time.perf_counter() - t0
            grown = rss() - before
            approx = timed(vi, kinds, lane, a.reps)
            flat = timed(vi, kinds, None, a.flat_reps)
            row = {"n": n, "add_s": round(added, 1), "train_s": round(trained, 1), "rss_added_mb": round(grown),
                   "rank_p50_ms": ms(pct(approx, 50)), "rank_p95_ms": ms(pct(approx, 95)),
                   "rank_flat_p50_ms": ms(pct(flat, 50)),
                   "searches_per_rank": round(lane.searches / a.reps, 2) if lane else 0,
                   "flat_fallbacks": lane.whole if lane else 0, "load": round(os.getloadavg()[0], 1)}
            print(json.dumps(row), flush=True)
            del vi, lane
    return 0


def main() -> int:
    if sys.argv[1:2] == ["store"]:
        return store_main(sys.argv[2:])
    if sys.argv[1:2] == ["project"]:
        return project_main(sys.argv[2:])
    if sys.argv[1:2] == ["grow"]:
        return grow_main(sys.argv[2:])
    if sys.argv[1:2] == ["noisy"]:
        return noisy_main(sys.argv[2:])
    if sys.argv[1:2] == ["cold"]:
        return cold_main(sys.argv[2:])
    if sys.argv[1:2] == ["firstread"]:
        return firstread_main(sys.argv[2:])
    if sys.argv[1:2] == ["profile"]:
        return profile_main(sys.argv[2:])
    if sys.argv[1:2] == ["shared"]:
        return shared_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json-out", type=Path)
    a = ap.parse_args()
    # An installed package has its bytecode compiled; a checkout run with PYTHONDONTWRITEBYTECODE
    # would recompile memstore in every CLI process and measure that instead.
    import compileall

    compileall.compile_dir(str(Path(client.__file__).parent), quiet=1)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    CACHE.mkdir(parents=True, exist_ok=True)
    shared_emb = CACHE / "embeddings"
    rows: list[dict[str, Any]] = []
    for n in a.sizes:
        row: dict[str, Any] = {"n": n}
        if n == min(a.sizes) and n <= 1000:
            _, cold = prepare(n, shared_emb, cold=True)
            row["rebuild_cold_s"] = round(cold, 2)
        root, warm = prepare(n, shared_emb)
        row["rebuild_cache_s"] = round(warm, 2)
        lib, ws = library_reads(root, a.reps)
        row["lib_read_p50_ms"], row["lib_read_p95_ms"] = ms(pct(lib["watched"], 50)), ms(pct(lib["watched"], 95))
        row["lib_read_cold_lists_p50_ms"] = ms(pct(lib["cold_lists"], 50))
        row["lib_read_walk_p50_ms"] = ms(pct(lib["walk"], 50))
        row.update(floor(ws, a.reps))
        row.update(client_alone(a.reps))
        t0 = time.perf_counter()
        ws.catalog("repo")  # the per-call stat walk when no watcher vouches for the store
        row["stat_walk_ms"] = ms(time.perf_counter() - t0)
        del ws
        d = daemon_runs(root, a.reps, n)
        row["cli_read_daemon_p50_ms"], row["cli_read_daemon_p95_ms"] = (
            ms(pct(d["cli_read_daemon"], 50)),
            ms(pct(d["cli_read_daemon"], 95)),
        )
        # The first pass over the queries fills the association chain's neighbour lists for the
        # memories it meets; later passes find them filled.
        first, again = d["cli_read_daemon"][: len(QUERIES)], d["cli_read_daemon"][len(QUERIES):]
        row["cli_read_daemon_first_p50_ms"] = ms(pct(first, 50))
        row["cli_read_daemon_again_p50_ms"] = ms(pct(again, 50)) if again else None
        row["cli_read_inproc_p50_ms"] = ms(pct(d["cli_read_inproc"], 50))
        row["cli_context_daemon_p50_ms"], row["cli_context_daemon_p95_ms"] = (
            ms(pct(d["cli_context_daemon"], 50)),
            ms(pct(d["cli_context_daemon"], 95)),
        )
        row["cli_context_inproc_p50_ms"] = ms(pct(d["cli_context_inproc"], 50))
        row["write_socket_p50_ms"], row["write_socket_p95_ms"] = (
            ms(pct(d["write_socket"], 50)),
            ms(pct(d["write_socket"], 95)),
        )
        row["write_cli_p50_ms"], row["write_cli_p95_ms"] = ms(pct(d["write_cli"], 50)), ms(pct(d["write_cli"], 95))
        row["visible_p50_ms"], row["visible_max_ms"] = ms(pct(d["visible"], 50)), ms(max(d["visible"]))
        row["ping_p50_ms"] = ms(pct(d["ping"], 50))
        row["daemon_peak_rss_mb"] = d["daemon_peak_rss_mb"]
        rows.append(row)
        print(f"# {json.dumps(row)}", file=sys.stderr, flush=True)
    cold_rate = next((r["rebuild_cold_s"] / r["n"] for r in rows if "rebuild_cold_s" in r), None)
    cols = [
        ("n", "memories"),
        ("cli_read_daemon_p50_ms", "CLI read daemon p50"),
        ("cli_read_daemon_p95_ms", "p95"),
        ("cli_read_daemon_first_p50_ms", "p50 first pass"),
        ("cli_read_daemon_again_p50_ms", "p50 repeated queries"),
        ("cli_read_inproc_p50_ms", "CLI read in-process p50"),
        ("cli_context_daemon_p50_ms", "CLI context daemon p50"),
        ("cli_context_daemon_p95_ms", "p95"),
        ("cli_context_inproc_p50_ms", "CLI context in-process p50"),
        ("lib_read_p50_ms", "lib read watched p50"),
        ("lib_read_p95_ms", "p95"),
        ("lib_read_cold_lists_p50_ms", "lib read cold neighbour lists p50"),
        ("lib_read_walk_p50_ms", "lib read walking p50"),
        ("write_socket_p50_ms", "write daemon p50"),
        ("write_socket_p95_ms", "p95"),
        ("write_cli_p50_ms", "write CLI p50"),
        ("visible_p50_ms", "change->visible p50"),
        ("visible_max_ms", "max"),
        ("rebuild_cache_s", "rebuild cached s"),
        ("rebuild_cold_s", "rebuild cold s"),
        ("daemon_peak_rss_mb", "daemon peak RSS MB"),
        ("stat_walk_ms", "stat walk ms"),
        ("faiss_p50_ms", "floor vector search"),
        ("whoosh_p50_ms", "floor whoosh"),
        ("encode_p50_ms", "floor encode"),
        ("ping_p50_ms", "floor socket ping"),
        ("python_start_p50_ms", "floor python start"),
        ("client_alone_p50_ms", "CLI against an instant daemon p50"),
        ("client_over_start_p50_ms", "its gap over python start"),
    ]
    print("| " + " | ".join(h for _, h in cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        cells = []
        for key, _ in cols:
            v = r.get(key)
            if v is None and key == "rebuild_cold_s" and cold_rate:
                v = f"~{cold_rate * r['n']:.0f} (extrapolated)"
            cells.append("" if v is None else str(v))
        print("| " + " | ".join(cells) + " |")
    summary = {"load_avg": os.getloadavg()[0], "cpus": os.cpu_count(), "rows": rows}
    if a.json_out:
        a.json_out.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
