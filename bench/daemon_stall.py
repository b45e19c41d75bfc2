"""Does one slow request on the daemon hold up another repo's agent hooks? (docs/daemon.md)

Run (from the repo root, venv active):

    python bench/daemon_stall.py                       # this checkout's memstore
    python bench/daemon_stall.py --code OTHER_CHECKOUT # another memstore, e.g. before a fix

A real `memstore serve` answers two repos, A and B; B holds a memory citing src/billing.py. Each
row runs B's file hook (`memstore integrate claude --hook file`, a Read of that file) ``--calls``
times and gives its wall time and how many calls injected the memory (a call past the hook's
5 s budget injects nothing):

- ``alone``: nothing else runs (the floor the other rows are compared with);
- ``hostile path in A``: while A's file hook names `/proc/self/root` and 300,000 `/x`;
- ``write in A waiting``: while a write to A waits for A's write lock, held by another process.

Everything lives in a temporary directory with its own HOME, global store and runtime dir.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOSTILE = "/proc/self/root" + "/x" * 300_000


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


class World:
    def __init__(self, base: Path, code: str | None) -> None:
        self.base = base
        self.rdir = Path(tempfile.mkdtemp(prefix="/tmp/msst-"))  # AF_UNIX paths are short
        (base / "home").mkdir()
        gitconfig = base / "gitconfig"
        gitconfig.write_text("[user]\n\tname = Bench\n\temail = bench@example.com\n")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSTORE_", "GIT_"))}
        self.env.update({"HOME": str(base / "home"), "MEMSTORE_HOME": str(base / "home" / ".memory"),
                         "MEMSTORE_RUNTIME_DIR": str(self.rdir), "GIT_CONFIG_GLOBAL": str(gitconfig),
                         "GIT_CONFIG_NOSYSTEM": "1"})
        if code:
            self.env["PYTHONPATH"] = code

    def memstore(self, cwd: Path, *args: str, stdin: str | None = None,
                 **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "memstore", *args], cwd=cwd, env={**self.env, **extra},
                              input=stdin, capture_output=True, text=True, check=False, timeout=600)

    def repo(self, name: str) -> tuple[Path, str]:
        root = self.base / name
        (root / "src").mkdir(parents=True)
        (root / "src" / "billing.py").write_text("def charge():\n    return 1\n")
        _git(root, "init", "-q", "-b", "main")
        _git(root, "add", "src")
        _git(root, "commit", "-q", "-m", "initial")
        self.memstore(root, "init", MEMSTORE_DAEMON="0")
        out = self.memstore(root, "write", "--kind", "problem", "--evidence", "file:src/billing.py", "--text",
                            f"{name}: invoices are double-charged when the payment webhook is retried",
                            "--json-out", MEMSTORE_DAEMON="0")
        return root, json.loads(out.stdout)["id"]

    def status(self) -> dict[str, Any]:
        out = self.memstore(self.base, "daemon", "status", "--json-out")
        return json.loads(out.stdout) if out.stdout.strip() else {}


def _payload(repo: Path, session: str, path: str) -> str:
    return json.dumps({"session_id": session, "cwd": str(repo), "hook_event_name": "PreToolUse",
                       "tool_name": "Read", "tool_input": {"file_path": path}})


def _hooks(world: World, repo: Path, mid: str, calls: int, tag: str) -> tuple[list[float], int]:
    times, injected = [], 0
    for i in range(calls):
        t0 = time.perf_counter()
        out = world.memstore(repo, "integrate", "claude", "--hook", "file",
                             stdin=_payload(repo, f"{tag}{i}", str(repo / "src" / "billing.py")))
        times.append(time.perf_counter() - t0)
        injected += mid in out.stdout
    return times, injected


def _wait_for(cond: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", help="a memstore checkout to run instead of this one (PYTHONPATH)")
    ap.add_argument("--calls", type=int, default=3)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="memstore-stall-"))
    world = World(base, args.code)
    daemon = None
    try:
        repo_a, _ = world.repo("repo_a")
        repo_b, mid = world.repo("repo_b")
        # cwd: not this checkout, whose memstore/ would shadow --code's (`-m` puts the cwd first)
        daemon = subprocess.Popen([sys.executable, "-m", "memstore", "serve", "--idle", "600"], cwd=base,
                                  env=world.env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        _wait_for(lambda: bool(world.status().get("running")))
        _hooks(world, repo_b, mid, 1, "warm")  # B's workspace loaded, as in a session
        rows: list[tuple[str, list[float], int]] = [("alone", *_hooks(world, repo_b, mid, args.calls, "a"))]

        hostile = subprocess.Popen([sys.executable, "-m", "memstore", "integrate", "claude", "--hook", "file"],
                                   cwd=repo_a, env=world.env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, text=True)
        assert hostile.stdin is not None
        hostile.stdin.write(_payload(repo_a, "h", HOSTILE))
        hostile.stdin.close()
        # Not `daemon status`: a daemon busy resolving that path may not answer it for a while.
        # The hook sends its request within a second of its start.
        time.sleep(2.0)
        rows.append(("hostile path in A", *_hooks(world, repo_b, mid, args.calls, "h")))
        hostile.wait(timeout=600)

        lock = repo_a / ".memory" / ".index" / "write.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)  # another process writing to A
        before = world.status().get("requests", 0)
        writer = subprocess.Popen([sys.executable, "-m", "memstore", "write", "--kind", "fact", "--evidence",
                                   "user:seen", "--text", "repo_a: the ledger runs on port 8081", "--json-out"],
                                  cwd=repo_a, env=world.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        _wait_for(lambda: world.status().get("requests", 0) >= before + 2)  # the write has arrived
        rows.append(("write in A waiting", *_hooks(world, repo_b, mid, args.calls, "w")))
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        writer.wait(timeout=600)

        print(f"memstore: {args.code or 'this checkout'}; B's file hook, {args.calls} calls per row")
        print(f"{'while':<22}{'median s':>10}{'max s':>8}{'injected':>10}")
        for name, times, injected in rows:
            print(f"{name:<22}{statistics.median(times):>10.2f}{max(times):>8.2f}{injected:>7}/{len(times)}")
    finally:
        world.memstore(base, "daemon", "stop")
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
        if daemon is not None:
            daemon.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(world.rdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
