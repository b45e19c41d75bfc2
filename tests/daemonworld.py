"""A hermetic world for one real `memstore serve`: home, global store, runtime dir, repos seeded
with a problem, its solution and failed tactic, a fact and a preference. Shared by the daemon
tests and the daemon fault trials."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from memstore import gitops
from memstore.store.workspace import open_workspace
from memstore.surfaces import client
from memstore.verbs import api

WAIT = 60.0  # generous bound for a daemon start (model load) on a loaded 2-core machine


def commit_all(root: Path, message: str = "memories") -> None:
    """Everything in ``root``'s work tree committed: an origin for a teammate to clone."""
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-q", "-m", message], cwd=root, check=True)


def clone(origin: Path, name: str) -> Path:
    """A real `git clone` of ``origin`` beside it: what a teammate's checkout starts from."""
    dest = origin.parent / name
    subprocess.run(["git", "clone", "-q", str(origin), str(dest)], check=True)
    return dest


def ranked(answer: dict[str, Any]) -> list[tuple[str, float]]:
    """A read's results as (id, score), for comparing two answers."""
    return [(r["id"], r["score"]) for r in answer["results"]]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _poll(cond: Callable[[], Any], timeout: float = 20.0, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


class Env:
    """A hermetic world for one daemon: home, global store, runtime dir, repos."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.home = base / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        # AF_UNIX paths are limited to ~107 bytes: keep the runtime dir short, not under tmp_path.
        self.rdir = Path(f"/tmp/ms-test-{os.getpid()}-{base.name[-12:]}")
        gitconfig = base / "gitconfig"
        gitconfig.write_text("[user]\n\tname = Test\n\temail = test@example.com\n")
        self.vars = {
            "HOME": str(self.home), "MEMSTORE_HOME": str(self.home / ".memory"),
            "MEMSTORE_RUNTIME_DIR": str(self.rdir), "MEMSTORE_DAEMON": "1",
            "GIT_CONFIG_GLOBAL": str(gitconfig), "GIT_CONFIG_NOSYSTEM": "1",
        }

    @contextlib.contextmanager
    def environ(self) -> Iterator[None]:
        """This world's variables in os.environ for the block: seeding through the library
        happens before the conftest's per-test environment exists."""
        old = dict(os.environ)
        os.environ.update(self.env())
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(old)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSTORE_", "GIT_"))}
        env.update(self.vars)
        env.update(extra)
        return env

    def cli(self, *args: str, cwd: Path, **extra: str) -> tuple[int, Any, str]:
        return run_cli(args, cwd=cwd, env=self.env(**extra), timeout=180)

    def call(self, message: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        return client.call(message, timeout=timeout, env=self.env())

    def status(self) -> dict[str, Any]:
        return client.status(env=self.env())

    def forward(self, verb: str, cwd: Path, *, request: dict[str, Any] | None = None,
                args: dict[str, Any] | None = None) -> dict[str, Any]:
        """What the CLI sends, straight over the socket (no interpreter start per poll)."""
        msg = {"verb": verb, "version": client.code_version(), "cwd": str(cwd), "store": None,
               "env": client.forwarded_env(self.env()), "request": request, "args": args}
        return self.call(msg)

    def make_repo(self, name: str) -> Path:
        root = self.base / name
        root.mkdir()
        _git(root, "init", "-q", "-b", "main")
        _git(root, "commit", "-q", "--allow-empty", "-m", "initial")
        gitops.toplevel.cache_clear()
        ws = open_workspace(cwd=root, env=self.env())
        api.init(ws)
        return root

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        client.ensure_runtime_dir(self.env())
        log = open(self.rdir / "test-daemon.out", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([sys.executable, "-m", "memstore", "serve", *extra], env=self.env(),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        assert client.wait_until_up(WAIT, env=self.env()), self.log()
        return proc

    def stop(self) -> None:
        client.stop(env=self.env())

    def log(self) -> str:
        parts = []
        for name in ("daemon.log", "test-daemon.out"):
            path = self.rdir / name
            if path.exists():
                parts.append(path.read_text(errors="replace")[-4000:])
        return "\n".join(parts)

    def cleanup(self) -> None:
        import shutil

        self.stop()
        pid_file = self.rdir / client.LOCK_NAME
        if client.daemon_running(self.env()) and pid_file.exists():
            pid = int(pid_file.read_text().split()[0] or 0)
            if pid:
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.rdir, ignore_errors=True)


def _seed(world: Env, repo: Path, topic: str) -> dict[str, str]:
    ws = open_workspace(cwd=repo, env=world.env())

    def w(kind: str, text: str, **links: Any) -> str:
        memory: dict[str, Any] = {"kind": kind, "scope": "repo", "text": text, "evidence_refs": ["user:seen"]}
        if links:
            memory["links"] = links
        return api.write(ws, {"op": "write", "memory": memory, "allow_duplicate": True})["id"]

    ids = {"problem": w("problem", f"{topic}: sqlite migration fails because column already exists")}
    ids["solution"] = w("solution", f"{topic}: guard the ALTER TABLE with a PRAGMA table_info check",
                        problem_id=ids["problem"])
    ids["failed"] = w("failed_tactic", f"{topic}: deleting the migration row from schema_versions broke prod",
                      problem_id=ids["problem"])
    ids["fact"] = w("fact", f"{topic}: the API server reads its settings from config/server.toml")
    ids["pref"] = w("preference", f"{topic}: the team prefers pytest fixtures over unittest setUp methods")
    return ids


def running_world(tmp_path_factory: pytest.TempPathFactory, label: str,
                  repos: dict[str, str]) -> Iterator[Env]:
    """A daemon serving one seeded repo per ``repos`` entry (attribute name -> topic): the repo
    is ``world.<name>`` and its ids ``world.ids_<suffix>`` (``repo_a`` -> ``ids_a``)."""
    world = Env(tmp_path_factory.mktemp(label))
    with world.environ():
        for name in repos:
            setattr(world, name, world.make_repo(name))
        for name, topic in repos.items():
            setattr(world, "ids_" + name.removeprefix("repo_"), _seed(world, getattr(world, name), topic))
    world.proc = world.start("--idle", "600")  # type: ignore[attr-defined]
    yield world
    world.cleanup()
    world.proc.wait(timeout=30)  # type: ignore[attr-defined]
