"""Faults memstore must survive, measured: crashes, concurrent writers, damaged projections,
broken files, branches, a full disk, a killed index build. Prints one table (and, last, one
JSON line).

Run (from the repo root, venv active; root is needed for the tmpfs of the full-disk scenario,
without it a file size limit stands in for the full device):

    python bench/faults.py                                   # the issue's counts: 50 trials, 8 x 200 writes
    python bench/faults.py --trials 5 --writers 4 --writes 20
    python bench/faults.py --only damage,yaml
    python bench/faults.py --only full_disk,killed_build --trials 11 --build-trials 30

Everything is real: `python -m memstore` subprocesses, a real `memstore serve`, real git, real
`kill -9`, a real tmpfs. Each scenario works in its own git repo under a temporary directory
with a private HOME, global store and daemon runtime directory.

Columns: trials; acknowledged writes (the CLI answered ok); memories on disk after (listed by a
fresh process); lost (acknowledged but not on disk: must be 0); failed reads (a read that did
not answer ok); reads until healed (after damage to `.index/`: reads until the answer equals
the one before, worst trial; 1 = the first read after the damage already answers as before).
Every scenario also runs `memstore check`: a store it does not find clean is counted in
"corrupt stores" (must be 0); so is, for the full disk, a refused write that left a file or an
unstaged change behind, and for the killed build, a read after the kill that answered otherwise
than a fresh rebuild (a read that waited past `--read-bound` is a failed read: a wedge).
Writes carry `allow_duplicate` so that, without the daemon, a
write does not load the embedding model: this measures durability, not the duplicate gate.

The `secrets` section scores the secret detector on tests/data/secrets_corpus.jsonl (78 fake
secrets, 78 look-alikes: hashes, UUIDs, vendors' documented example keys, placeholders, prose,
ports and variables on command lines):
recall over the secrets, false-positive rate over the look-alikes, time to read and scan one
file, import time in a fresh process. With `--detect-secrets-python PY` (a python whose venv
holds detect-secrets, e.g. `python -m venv /tmp/ds && /tmp/ds/bin/pip install
detect-secrets==1.5.0`) the same files go through detect-secrets' `scan_file` under its default
settings, and the union of both is scored too:

    python bench/faults.py --only secrets --detect-secrets-python /tmp/ds/bin/python
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memstore.surfaces import client  # noqa: E402

WORDS = ["alembic", "migration", "cache", "redis", "worker", "queue", "deploy", "runner", "webhook", "retry",
         "postgres", "index", "fixture", "schema", "token", "rotation", "backup", "cron", "upload", "bucket",
         "latency", "timeout", "pool", "thread"]


@dataclass
class Row:
    scenario: str
    trials: int = 0
    acknowledged: int = 0
    on_disk: int = 0
    lost: int = 0
    failed_reads: int = 0
    reads_until_healed: int | None = None
    corrupt: int = 0
    notes: list[str] = field(default_factory=list)


class World:
    """A private HOME, global store, git identity and daemon runtime directory."""

    def __init__(self, base: Path) -> None:
        self.base = base
        home = base / "home"
        home.mkdir(parents=True, exist_ok=True)
        gitconfig = base / "gitconfig"
        gitconfig.write_text("[user]\n\tname = Bench\n\temail = bench@example.com\n")
        # AF_UNIX paths are short: the runtime directory lives directly under /tmp.
        self.rdir = Path(tempfile.mkdtemp(prefix="msf-", dir="/tmp"))
        self.vars = {"HOME": str(home), "MEMSTORE_HOME": str(home / ".memory"), "MEMSTORE_RUNTIME_DIR": str(self.rdir),
                     "GIT_CONFIG_GLOBAL": str(gitconfig), "GIT_CONFIG_NOSYSTEM": "1", "MEMSTORE_AUTHOR": "bench"}
        self.daemon: subprocess.Popen[bytes] | None = None
        self.n = 0

    def env(self, daemon: bool) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSTORE_", "GIT_"))}
        env.update(self.vars)
        env["MEMSTORE_DAEMON"] = "1" if daemon else "0"
        return env

    def cli(self, *args: str, cwd: Path, daemon: bool = False, timeout: float = 600) -> tuple[int, Any]:
        proc = subprocess.run([sys.executable, "-m", "memstore", *args], cwd=cwd, env=self.env(daemon),
                              capture_output=True, text=True, check=False, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        try:
            return proc.returncode, json.loads(proc.stdout)
        except ValueError:
            return proc.returncode, {"stdout": proc.stdout[-500:], "stderr": proc.stderr[-500:]}

    def git(self, cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["git", *args], cwd=cwd, env=self.env(False), capture_output=True, text=True,
                              check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {proc.stderr}")
        return proc

    def repo(self, name: str, where: Path | None = None) -> Path:
        self.n += 1
        root = (where or self.base) / f"{name}-{self.n}"
        root.mkdir(parents=True)
        self.git(root, "init", "-q", "-b", "main")
        self.git(root, "commit", "-q", "--allow-empty", "-m", "initial")
        rc, out = self.cli("init", cwd=root)
        assert rc == 0, out
        self.git(root, "add", "-A")
        self.git(root, "commit", "-q", "-m", "memory layout")
        return root

    # -- the daemon ------------------------------------------------------------------------------
    def start_daemon(self) -> int:
        env = self.env(True)
        client.ensure_runtime_dir(env)
        log = open(self.rdir / "bench-daemon.out", "ab")  # noqa: SIM115 - closed once the child has it
        self.daemon = subprocess.Popen([sys.executable, "-m", "memstore", "serve", "--idle", "900"], env=env,
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        if not client.wait_until_up(180, env=env):
            raise RuntimeError("the daemon did not come up: " + (self.rdir / "daemon.log").read_text()[-2000:])
        return self.daemon.pid

    def kill_daemon(self) -> None:
        if self.daemon is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.daemon.pid, signal.SIGKILL)
            self.daemon.wait(timeout=60)
            self.daemon = None

    def stop_daemon(self) -> None:
        if self.daemon is not None:
            with contextlib.suppress(Exception):
                client.stop(env=self.env(True))
            try:
                self.daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill_daemon()
            self.daemon = None

    def close(self) -> None:
        self.stop_daemon()
        shutil.rmtree(self.rdir, ignore_errors=True)


# -- shared steps -----------------------------------------------------------------------------------
def sentence(rng: random.Random, i: int) -> str:
    return f"Note {i}: the {' '.join(rng.sample(WORDS, 6))} setting is {rng.randrange(10**6)}."


def write_args(text: str) -> list[str]:
    return ["write", "--kind", "fact", "--evidence", "user:bench", "--allow-duplicate", "--text", text]


def write_request(text: str) -> str:
    return json.dumps({"memory": {"kind": "fact", "scope": "repo", "text": text, "evidence_refs": ["user:bench"]},
                       "allow_duplicate": True})


def ack_id(rc: int, out: Any) -> str | None:
    return out.get("id") if rc == 0 and isinstance(out, dict) and out.get("ok") else None


def audit(world: World, repo: Path, acked: set[str], row: Row) -> None:
    """A fresh process without the daemon: what is on disk, readable, and does check pass?"""
    rc, listed = world.cli("list", "--all", cwd=repo)
    on_disk = {m["id"] for m in listed.get("memories", [])} if rc == 0 else set()
    row.on_disk += len(on_disk)
    row.lost += len(acked - on_disk)
    rc, report = world.cli("check", cwd=repo)
    if rc != 0 or not report.get("ok"):
        row.corrupt += 1
        row.notes.append(f"check: {json.dumps(report)[:300]}")
    torn = [p for p in (repo / ".memory").rglob("*.tmp") if ".index" not in p.parts]
    if torn:
        row.corrupt += 1
        row.notes.append(f"torn files: {torn[:3]}")
    rc, out = world.cli("read", "which setting is the deploy runner", "--no-global", cwd=repo)
    if rc != 0 or not out.get("ok"):
        row.failed_reads += 1


# -- scenarios -----------------------------------------------------------------------------------------
def concurrent(world: World, args: argparse.Namespace, daemon: bool) -> Row:
    row = Row(f"{args.writers} concurrent writers x {args.writes} CLI writes, {'with' if daemon else 'no'} daemon",
              trials=1)
    repo = world.repo("concurrent")
    if daemon:
        world.start_daemon()
    rng = random.Random(1)
    scripts = []
    for w in range(args.writers):
        lines = []
        for i in range(args.writes):
            req = world.base / f"req-{daemon}-{w}-{i}.json"
            req.write_text(write_request(sentence(rng, i)))
            lines.append(f"{sys.executable} -m memstore write --json {req}; echo")
        scripts.append("\n".join(lines))
    procs = [subprocess.Popen(["sh", "-c", s], cwd=repo, env=world.env(daemon), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for s in scripts]
    acked: set[str] = set()
    for proc in procs:
        out, _ = proc.communicate()
        for line in out.splitlines():
            with contextlib.suppress(ValueError):
                got = json.loads(line)
                if got.get("ok") and got.get("id"):
                    acked.add(got["id"])
    row.acknowledged = len(acked)
    if daemon:
        world.stop_daemon()
    audit(world, repo, acked, row)
    return row


def kill_writer(world: World, args: argparse.Namespace) -> Row:
    row = Row("kill -9 of a writer mid-write (no daemon)", trials=args.trials)
    repo = world.repo("killwriter")
    rng = random.Random(2)
    acked: set[str] = set()
    for trial in range(args.trials):
        proc = subprocess.Popen([sys.executable, "-m", "memstore", *write_args(sentence(rng, trial))], cwd=repo,
                                env=world.env(False), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(rng.uniform(0.05, args.kill_window))
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        with contextlib.suppress(ValueError):
            got = json.loads(out) if out.strip() else {}
            if proc.returncode == 0 and got.get("ok"):
                acked.add(got["id"])
    row.acknowledged = len(acked)
    row.notes.append(f"{args.trials - len(acked)} of {args.trials} writers were killed before answering")
    audit(world, repo, acked, row)
    return row


def kill_daemon(world: World, args: argparse.Namespace) -> Row:
    """Writes through the daemon, then kill -9 while it saves its projections in a pause: the
    kill comes the moment a temp file of the save appears in .index/ (or at the window's end)."""
    row = Row("kill -9 of the daemon mid-index-save", trials=args.trials)
    repo = world.repo("killdaemon")
    index = repo / ".memory" / ".index"
    rng = random.Random(3)
    acked: set[str] = set()
    mid_save = 0
    for trial in range(args.trials):
        world.start_daemon()
        for i in range(3):
            mid = ack_id(*world.cli(*write_args(sentence(rng, trial * 10 + i)), cwd=repo, daemon=True))
            if mid:
                acked.add(mid)
        rc, _ = world.cli("read", "which setting is the deploy runner", "--no-global", cwd=repo, daemon=True)
        deadline = time.monotonic() + 12.0
        caught = False
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if any(name.endswith(".tmp") for name in os.listdir(index)):
                    caught = True
                    break
            time.sleep(0.0005)
        world.kill_daemon()
        mid_save += caught
        # The next call is a fresh process: it must read (and heal what the kill left).
        rc, out = world.cli("read", "which setting is the deploy runner", "--no-global", cwd=repo)
        if rc != 0 or not out.get("ok"):
            row.failed_reads += 1
    row.acknowledged = len(acked)
    row.notes.append(f"{mid_save} of {args.trials} kills landed while a save's temp file existed")
    audit(world, repo, acked, row)
    return row


def _garble(path: Path, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    for _ in range(max(1, len(data) // 512)):
        if not data:
            return
        at = rng.randrange(len(data))
        chunk = rng.randbytes(min(16, len(data) - at))
        data[at:at + len(chunk)] = chunk
    with open(path, "r+b") as fh:
        fh.write(data)


def _index_files(index: Path) -> list[Path]:
    return [p for p in sorted(index.rglob("*")) if p.is_file() and not p.name.endswith("lock")]


def _delete(index: Path, rng: random.Random) -> None:
    shutil.rmtree(index, ignore_errors=True)


def _truncate(index: Path, rng: random.Random) -> None:
    for path in _index_files(index):
        os.truncate(path, path.stat().st_size // 2)


def _garble_all(index: Path, rng: random.Random) -> None:
    for path in _index_files(index):
        _garble(path, rng)


DAMAGES: dict[str, Callable[[Path, random.Random], None]] = {"deleted": _delete, "truncated": _truncate,
                                                             "garbled": _garble_all}


def damage(world: World, args: argparse.Namespace) -> list[Row]:
    repo = world.repo("damage")
    rng = random.Random(4)
    for i in range(12):
        rc, out = world.cli(*write_args(sentence(rng, i)), cwd=repo)
        if not ack_id(rc, out):
            raise RuntimeError(f"seeding failed: {out}")
    query = ["read", "which setting is the deploy runner", "--no-global"]
    world.start_daemon()
    index = repo / ".memory" / ".index"
    rows = []
    try:
        for name, hurt in DAMAGES.items():
            row = Row(f".index/ {name} while the daemon runs", trials=args.trials)
            for _ in range(args.trials):
                # Saved by the daemon first (a pause after the last request), so there is something to damage.
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not (index / "meta.json").is_file():
                    time.sleep(0.2)
                rc, before = world.cli(*query, cwd=repo, daemon=True)
                if rc != 0:
                    row.failed_reads += 1
                    continue
                hurt(index, rng)
                reads = 0
                while reads < args.max_reads:
                    reads += 1
                    rc, after = world.cli(*query, cwd=repo, daemon=True)
                    if rc != 0 or not after.get("ok"):
                        row.failed_reads += 1
                        continue
                    if [r["id"] for r in after["results"]] == [r["id"] for r in before["results"]]:
                        break
                else:
                    reads = args.max_reads + 1  # never healed within the bound
                row.reads_until_healed = max(row.reads_until_healed or 0, reads)
                time.sleep(6)  # a pause: the daemon saves the projections again
            audit(world, repo, set(), row)
            rows.append(row)
    finally:
        world.stop_daemon()
    return rows


def broken_yaml(world: World, args: argparse.Namespace) -> Row:
    row = Row("hand-broken YAML among good files", trials=args.trials)
    repo = world.repo("yaml")
    rng = random.Random(5)
    acked = set()
    for i in range(3):
        mid = ack_id(*world.cli(*write_args(sentence(rng, i)), cwd=repo))
        if mid:
            acked.add(mid)
    breakages = ["tags: [a, b\n", "kind: fact: again\n", "confidence: : 0.5\n", "links: {problem: \n"]
    named = 0
    for trial in range(args.trials):
        line = breakages[trial % len(breakages)]
        path = repo / ".memory" / "facts" / f"hand-{trial}.md"
        path.write_text(f"---\nkind: fact\nscope: repo\nevidence: [user:me]\n{line}---\nHand-written note {trial}.\n")
        rc, out = world.cli("read", "which setting is the deploy runner", "--no-global", cwd=repo)
        if rc != 0 or not out.get("ok"):
            row.failed_reads += 1
        rc, report = world.cli("check", cwd=repo)
        found = [p for p in report.get("problems", []) if p.get("path", "").endswith(path.name)]
        if found and " line " in found[0].get("message", ""):
            named += 1
        path.unlink()
    row.acknowledged = len(acked)
    row.notes.append(f"check named the file and line {named} of {args.trials} times")
    audit(world, repo, acked, row)
    return row


def branches(world: World, args: argparse.Namespace, how: str) -> Row:
    row = Row(f"two branches of memories, {how}", trials=args.trials)
    rng = random.Random(6)
    conflicts = 0
    for trial in range(args.trials):
        repo = world.repo(how)
        world.git(repo, "checkout", "-q", "-b", "side")
        side = ack_id(*world.cli(*write_args(sentence(rng, trial)), cwd=repo))
        world.git(repo, "commit", "-q", "-m", "side")
        world.git(repo, "checkout", "-q", "main")
        main = ack_id(*world.cli(*write_args(sentence(rng, trial + 1000)), cwd=repo))
        world.git(repo, "commit", "-q", "-m", "main")
        if how == "merged":
            ok = world.git(repo, "merge", "-q", "--no-edit", "side", check=False).returncode == 0
        else:
            world.git(repo, "checkout", "-q", "side")
            ok = world.git(repo, "rebase", "-q", "main", check=False).returncode == 0
        conflicts += not ok
        acked = {m for m in (side, main) if m}
        row.acknowledged += len(acked)
        for mid in acked:
            rc, _out = world.cli("show", mid, cwd=repo)
            if rc != 0:
                row.failed_reads += 1
        audit(world, repo, acked, row)
    row.notes.append(f"{conflicts} git conflicts")
    return row


@contextlib.contextmanager
def small_disk(base: Path) -> Iterator[Path | None]:
    mnt = base / "small-disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True,
                          check=False)
    try:
        yield mnt if proc.returncode == 0 else None
    finally:
        if proc.returncode == 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def _no_room() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


GAPS_KIB = (0, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # room left before a write: none, the file only, enough


def _fill(filler: Path, leave_kib: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        filler.unlink()
    # The file's close raises ENOSPC too (its buffer flushes): both inside the suppress.
    with contextlib.suppress(OSError), open(filler, "wb") as fh:
        while True:
            fh.write(b"\0" * 4096)
    if leave_kib:
        os.truncate(filler, max(0, filler.stat().st_size - leave_kib * 1024))


def full_disk(world: World, args: argparse.Namespace) -> Row:
    """Each trial fills the device but for a few KiB (none, room for the memory file but not
    for git's object and index, room for all), then writes through the CLI, then reads and
    shows while the device is still full: a write is acknowledged or refused as disk_full with
    nothing left behind (no file, nothing unstaged); reads answer."""
    with small_disk(world.base) as mnt:
        row = Row("full disk (2 MB tmpfs)" if mnt else "full disk (RLIMIT_FSIZE=0: no tmpfs here)",
                  trials=args.trials)
        repo = world.repo("full", where=mnt)
        rng = random.Random(7)
        acked: set[str] = set()
        clear = 0
        unclear: list[str] = []
        reads = 0
        for trial in range(args.trials):
            filler = (mnt or world.base) / "filler"
            if mnt is not None:
                _fill(filler, GAPS_KIB[trial % len(GAPS_KIB)])
            before = {p for p in (repo / ".memory").rglob("*") if ".index" not in p.parts}
            proc = subprocess.run([sys.executable, "-m", "memstore", *write_args(sentence(rng, trial))], cwd=repo,
                                  env=world.env(False), capture_output=True, text=True, check=False,
                                  preexec_fn=None if mnt else _no_room)
            ok = False
            with contextlib.suppress(ValueError):
                got = json.loads(proc.stdout)
                ok = proc.returncode == 0 and bool(got.get("ok"))
                if ok:
                    acked.add(got["id"])
                elif got.get("error", {}).get("code") == "disk_full":
                    clear += 1
                else:
                    unclear.append(str(got.get("error", {}).get("code")))
            after = {p for p in (repo / ".memory").rglob("*") if ".index" not in p.parts}
            if after - before and not ok:  # a refused write must leave nothing behind
                row.corrupt += 1
                row.notes.append(f"half-written: {sorted(map(str, after - before))[:3]}")
            status = world.git(repo, "--no-optional-locks", "status", "--porcelain", "--untracked-files=all",
                               "--", ".memory", check=False).stdout
            loose = [line for line in status.splitlines() if not line.startswith("A  ")]
            if loose:
                row.corrupt += 1
                row.notes.append(f"not staged: {loose[:3]}")
            if mnt is not None:  # reads while the device is full
                _fill(filler, 0)
                reads += 1
                rc, out = world.cli("read", "which setting is the deploy runner", "--no-global", cwd=repo)
                if rc != 0 or not out.get("ok"):
                    row.failed_reads += 1
                    row.notes.append(f"read while full: {json.dumps(out)[:200]}")
            with contextlib.suppress(FileNotFoundError):
                filler.unlink()
            # Room again: the same store takes a write.
            mid = ack_id(*world.cli(*write_args(sentence(rng, trial + 500)), cwd=repo))
            if mid:
                acked.add(mid)
        row.acknowledged = len(acked)
        refused = clear + len(unclear)
        row.notes.append(f"{refused} refused writes, {clear} of them a clear disk_full error"
                         + (f" (others: {', '.join(sorted(set(unclear)))})" if unclear else ""))
        if reads:
            row.notes.append(f"{reads - row.failed_reads} of {reads} reads answered while the device was full")
        audit(world, repo, acked, row)
        return row


# -- a killed keyword index build -------------------------------------------------------------------
def _fill_store(repo: Path, n: int) -> None:
    """``n`` short memories written as files (no CLI: this is the build's setup, not a write)."""
    from memstore.store import ids
    from memstore.store.config import Config
    from memstore.store.disk import Store
    from memstore.store.model import Memory

    rng = random.Random(9)
    config = Config().with_overrides({"git": {"stage": False, "commit": False}})
    store = Store(root=repo / ".memory", scope="repo", config=config, worktree=None)
    for i in range(n):
        store.create_memory(Memory(id=ids.new_id(), kind="fact", text=sentence(rng, i), scope="repo",
                                   created="2026-03-01T10:00:00Z", author="bench", evidence=["user:bench"]))


def _lock_holders(lock: Path) -> list[int]:
    """Processes holding ``lock`` open (Linux /proc): what a wedged build leaves behind."""
    holders = []
    with contextlib.suppress(OSError):
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                if any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(lock) for fd in os.listdir(f"/proc/{pid}/fd")):
                    holders.append(int(pid))
    return holders


def killed_build(world: World, args: argparse.Namespace) -> Row:
    """``kill -9`` of ``memstore reindex --full`` at a random moment, then a read in a fresh
    process: it must answer within ``--read-bound`` seconds (a build's helpers left holding the
    index lock once made every later read wait for ever) and equal a fresh rebuild's answer."""
    n = args.build_memories
    row = Row(f"kill -9 of reindex --full ({n} memories)", trials=args.build_trials)
    repo = world.repo("killbuild")
    _fill_store(repo, n)
    world.git(repo, "add", "-A")
    world.git(repo, "commit", "-q", "-m", "memories")
    query = ["read", "which setting is the deploy runner", "--no-global"]
    world.cli("reindex", "--full", cwd=repo, timeout=1800)  # the embedding cache then holds every vector
    t0 = time.monotonic()
    world.cli("reindex", "--full", cwd=repo, timeout=1800)
    build_s = time.monotonic() - t0
    rc, fresh = world.cli(*query, cwd=repo)
    want = [(r["id"], r["score"]) for r in fresh.get("results", [])]
    lock = repo / ".memory" / ".index" / "index.lock"
    rng = random.Random(13)
    wedged = differ = 0
    worst = 0.0
    for _ in range(args.build_trials):
        proc = subprocess.Popen([sys.executable, "-m", "memstore", "reindex", "--full"], cwd=repo,
                                env=world.env(False), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, build_s))
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        t0 = time.monotonic()
        try:
            rc, out = world.cli(*query, cwd=repo, timeout=args.read_bound)
        except subprocess.TimeoutExpired:
            wedged += 1
            row.failed_reads += 1
            for pid in _lock_holders(lock):  # the killed build's orphans, so the next trial can run
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            continue
        worst = max(worst, time.monotonic() - t0)
        if rc != 0 or not out.get("ok"):
            row.failed_reads += 1
        elif [(r["id"], r["score"]) for r in out["results"]] != want:
            differ += 1
            row.corrupt += 1
    row.notes.append(f"a full build takes {build_s:.1f} s; kills at 0.3 s..that")
    row.notes.append(f"{wedged} of {args.build_trials} reads after a kill waited past {args.read_bound:.0f} s "
                     f"(wedged); {differ} answered otherwise than a fresh rebuild; slowest answer {worst:.1f} s")
    audit(world, repo, set(), row)
    return row


SCENARIOS = ("writers", "kill_writer", "kill_daemon", "damage", "yaml", "branches", "full_disk", "killed_build",
             "secrets")

CORPUS = ROOT / "tests" / "data" / "secrets_corpus.jsonl"
# Run by the interpreter of a venv holding detect-secrets: its default settings (every plugin,
# default filters), one file per corpus row, as its pre-commit hook scans files.
_DETECT_SECRETS = """
import json, os, sys, tempfile, time
t0 = time.perf_counter()
from detect_secrets.core.scan import scan_file
from detect_secrets.settings import default_settings
imported = time.perf_counter() - t0
rows = json.load(sys.stdin)
found = {}
with default_settings(), tempfile.TemporaryDirectory() as tmp:
    paths = []
    for i, row in enumerate(rows):
        path = os.path.join(tmp, f"m{i}.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write(row["text"] + "\\n")
        paths.append((row["id"], path))
    list(scan_file(paths[0][1]))
    t1 = time.perf_counter()
    for rid, path in paths:
        found[rid] = sorted({s.type for s in scan_file(path)})
    per_file = (time.perf_counter() - t1) / len(paths)
print(json.dumps({"import_s": imported, "per_file_s": per_file, "found": found}))
"""


@dataclass
class DetectorRow:
    detector: str
    recall: float
    missed: list[str]
    false_positives: list[str]
    fp_rate: float
    per_file_ms: float | None
    import_ms: float | None


def load_corpus() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        row["text"] = "".join(row["parts"]) if "parts" in row else row["text"]
    return rows


def _score(name: str, rows: list[dict[str, Any]], flagged: set[str], per_file: float | None,
           imported: float | None) -> DetectorRow:
    positives = [r["id"] for r in rows if r["secret"]]
    negatives = [r["id"] for r in rows if not r["secret"]]
    return DetectorRow(
        detector=name,
        recall=round(sum(i in flagged for i in positives) / len(positives), 3),
        missed=[i for i in positives if i not in flagged],
        false_positives=[i for i in negatives if i in flagged],
        fp_rate=round(sum(i in flagged for i in negatives) / len(negatives), 3),
        per_file_ms=None if per_file is None else round(per_file * 1000, 3),
        import_ms=None if imported is None else round(imported * 1000, 1),
    )


def _import_seconds(python: str, module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return float(proc.stdout.strip())


def secret_detectors(args: argparse.Namespace) -> list[DetectorRow]:
    """memstore's detector and detect-secrets on tests/data/secrets_corpus.jsonl: recall over the
    secrets, false-positive rate over the look-alikes, time to read and scan one file."""
    from memstore.store.secrets import find_secrets

    rows = load_corpus()
    with tempfile.TemporaryDirectory(prefix="memstore-secrets-") as tmp:
        paths = []
        for i, row in enumerate(rows):
            path = Path(tmp) / f"m{i}.md"
            path.write_text(row["text"] + "\n", encoding="utf-8")
            paths.append((row["id"], path))
        ours: set[str] = set()
        t0 = time.perf_counter()
        for _ in range(args.secret_repeats):
            ours = {rid for rid, path in paths if find_secrets(path.read_text(encoding="utf-8"))}
        per_file = (time.perf_counter() - t0) / args.secret_repeats / len(paths)
    out = [_score("memstore", rows, ours, per_file, _import_seconds(sys.executable, "memstore.store.secrets"))]
    if args.detect_secrets_python:
        proc = subprocess.run([args.detect_secrets_python, "-c", _DETECT_SECRETS], input=json.dumps(rows),
                              capture_output=True, text=True, check=True)
        theirs_run = json.loads(proc.stdout)
        theirs = {rid for rid, types in theirs_run["found"].items() if types}
        out.append(_score("detect-secrets 1.5.0", rows, theirs, theirs_run["per_file_s"], theirs_run["import_s"]))
        out.append(_score("either (union)", rows, ours | theirs, None, None))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--kill-window", type=float, default=3.0, help="a writer is killed after 0.05..this many s")
    ap.add_argument("--max-reads", type=int, default=5, help="reads tried after a damage before giving up")
    ap.add_argument("--build-memories", type=int, default=2500,
                    help="the killed build's store (over 2,000: the bulk writer)")
    ap.add_argument("--build-trials", type=int, default=30, help="kills of reindex --full")
    ap.add_argument("--read-bound", type=float, default=120.0, help="seconds a read after a killed build may take")
    ap.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated: " + ",".join(SCENARIOS))
    ap.add_argument("--detect-secrets-python", default=os.environ.get("DETECT_SECRETS_PYTHON"),
                    help="a python with detect-secrets installed, compared on the secrets corpus")
    ap.add_argument("--secret-repeats", type=int, default=20, help="passes over the corpus for memstore's timing")
    args = ap.parse_args()
    only = set(args.only.split(","))
    t0 = time.time()
    rows: list[Row] = []
    detectors = secret_detectors(args) if "secrets" in only else []
    with tempfile.TemporaryDirectory(prefix="memstore-faults-") as tmp:
        world = World(Path(tmp))
        try:
            if "writers" in only:
                rows += [concurrent(world, args, daemon=True), concurrent(world, args, daemon=False)]
            if "kill_writer" in only:
                rows.append(kill_writer(world, args))
            if "kill_daemon" in only:
                rows.append(kill_daemon(world, args))
            if "damage" in only:
                rows += damage(world, args)
            if "yaml" in only:
                rows.append(broken_yaml(world, args))
            if "branches" in only:
                rows += [branches(world, args, "merged"), branches(world, args, "rebased")]
            if "full_disk" in only:
                rows.append(full_disk(world, args))
            if "killed_build" in only:
                rows.append(killed_build(world, args))
        finally:
            world.close()
    print("| scenario | trials | acknowledged writes | memories on disk after | lost | failed reads "
          "| reads until healed | corrupt stores |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        healed = "-" if r.reads_until_healed is None else str(r.reads_until_healed)
        print(f"| {r.scenario} | {r.trials} | {r.acknowledged} | {r.on_disk} | {r.lost} | {r.failed_reads} "
              f"| {healed} | {r.corrupt} |")
    print()
    for r in rows:
        for note in r.notes:
            print(f"- {r.scenario}: {note}")
    if detectors:
        print()
        print("| secret detector (tests/data/secrets_corpus.jsonl) | recall | false-positive rate | time per file "
              "| import |")
        print("|---|---|---|---|---|")
        for d in detectors:
            per = "-" if d.per_file_ms is None else f"{d.per_file_ms} ms"
            imp = "-" if d.import_ms is None else f"{d.import_ms} ms"
            print(f"| {d.detector} | {d.recall} | {d.fp_rate} | {per} | {imp} |")
        for d in detectors:
            print(f"- {d.detector}: missed {', '.join(d.missed) or 'none'}; false positives "
                  f"{', '.join(d.false_positives) or 'none'}")
    with contextlib.suppress(OSError):
        print(f"- load average {os.getloadavg()[0]:.1f}, {round(time.time() - t0)} s")
    print(json.dumps({"rows": [asdict(r) for r in rows], "secret_detectors": [asdict(d) for d in detectors]}))
    return 0 if all(r.lost == 0 and r.corrupt == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
