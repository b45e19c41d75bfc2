"""Hermetic test setup: a private HOME and global store per test, scrubbed git environment, and
real git repositories in tmp_path (no mocks)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from memstore import gitops
from memstore.store.workspace import Workspace, open_workspace
from memstore.verbs import api

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_STORE = REPO_ROOT / ".memory-example"
TEMPLATES = REPO_ROOT / "templates"


def docs_text(*names: str) -> str:
    """The user docs a test holds behaviour to: README.md and docs/*.md (or only the docs/ pages named)."""
    paths = [REPO_ROOT / "docs" / n for n in names] if names else [REPO_ROOT / "README.md",
                                                                      *sorted((REPO_ROOT / "docs").glob("*.md"))]
    return "\n".join(p.read_text(encoding="utf-8") for p in paths)

CliResult = tuple[int, Any, str]


@pytest.fixture(scope="session")
def shared_cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One XDG cache for the run (xdist workers too): the embedder's one-time ONNX export
    takes seconds and would otherwise be redone under every test's private HOME."""
    return tmp_path_factory.getbasetemp().parent / "xdg-cache"


@pytest.fixture(autouse=True)
def hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_cache_home: Path) -> Iterator[None]:
    """Nothing a test does can reach the real home directory, git config or a daemon."""
    home = tmp_path / "home"
    home.mkdir()
    for name in list(os.environ):
        if name.startswith("GIT_") or name.startswith("MEMSTORE_") or name in ("VISUAL", "EDITOR"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MEMSTORE_HOME", str(home / ".memory"))
    monkeypatch.setenv("MEMSTORE_DAEMON", "0")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared_cache_home))
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test Author")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "author@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "committer@example.com")
    gitops.toplevel.cache_clear()
    yield
    gitops.toplevel.cache_clear()


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"git {' '.join(args)} failed: {proc.stderr}"
    return proc.stdout


def make_git_repo(path: Path) -> Path:
    """A real repo on branch main with one commit holding src/app.py."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("def main():\n    return 42\n")
    git(path, "add", "src/app.py")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repo with an initial commit and `memstore init` done (layout staged, not committed)."""
    root = make_git_repo(tmp_path / "repo")
    gitops.toplevel.cache_clear()
    api.init(open_workspace(cwd=root))
    return root


@pytest.fixture
def ws(repo: Path) -> Workspace:
    return open_workspace(cwd=repo)


def reopen(repo: Path) -> Workspace:
    """A fresh workspace, as the next CLI call would see the store."""
    return open_workspace(cwd=repo)


@pytest.fixture
def cli() -> Callable[..., CliResult]:
    """Run ``python -m memstore ARGS`` as a real subprocess: (exit code, parsed JSON stdout, stderr)."""

    def run(*args: str, cwd: Path, input: str | None = None, env: dict[str, str] | None = None) -> CliResult:
        return run_cli(args, cwd=cwd, env={**os.environ, **(env or {})}, input=input)

    return run


def run_cli(args: Sequence[str], *, cwd: Path, env: dict[str, str], input: str | None = None,
            timeout: float | None = None) -> CliResult:
    """``python -m memstore ARGS`` as a real subprocess: (exit code, parsed JSON stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "memstore", *args], cwd=cwd, input=input, capture_output=True,
                          text=True, env=env, check=False, timeout=timeout,
                          stdin=None if input is not None else subprocess.DEVNULL)
    out = proc.stdout.strip()
    try:
        data = json.loads(out) if out else None
    except json.JSONDecodeError:
        data = out
    return proc.returncode, data, proc.stderr


# One problem with a solution and a failed tactic, shared by the read and MCP tests.
PROBLEM = ("Running `alembic upgrade head` in the test suite fails with DuplicateColumn: column "
           "tracking_code of relation shipments already exists, even on a fresh test database.")
SOLUTION = ("The db_schema fixture built tables with metadata.create_all() and stamped an old revision; "
            "build the test schema by running alembic upgrade head on a fresh database instead.")
TACTIC = ("Dropping and recreating the test database does not help: the fixture recreates the column "
          "from the ORM models before the migration runs.")


def store_files(repo: Path) -> set[str]:
    """Every file under .memory/ except the disposable .index/ (to assert nothing was written)."""
    root = repo / ".memory"
    if not root.exists():
        return set()
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and ".index" not in p.relative_to(root).parts}


def staged(repo: Path) -> set[str]:
    return set(git(repo, "diff", "--cached", "--name-only").split())


def write_req(kind: str, text: str, *, scope: str = "repo", evidence: list[str] | None = None,
              links: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A write request; allow_duplicate keeps the duplicate gate (and any embedder) out of tests
    that are not about duplicates."""
    memory: dict[str, Any] = {"kind": kind, "scope": scope, "text": text,
                              "evidence_refs": ["user:the user said so"] if evidence is None else evidence}
    if links:
        memory["links"] = links
    memory.update(extra.pop("memory_extra", {}))
    return {"op": "write", "memory": memory, "allow_duplicate": True, **extra}


def run_on_tty(args: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None, tty: str = "stdout",
               columns: int = 200) -> tuple[int, bytes, bytes]:
    """``memstore ARGS`` with a real pseudo-terminal as its ``tty`` stream ("stdout" or "stderr"),
    as a person at a shell runs it: (exit code, what the terminal got, the other stream)."""
    master, slave = pty.openpty()
    # A fresh pseudo-terminal says 0 columns, where a progress bar has no room.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    streams = {"stdout": slave, "stderr": subprocess.PIPE} if tty == "stdout" else {
        "stdout": subprocess.PIPE, "stderr": slave}
    proc = subprocess.Popen([sys.executable, "-m", "memstore", *args], cwd=cwd, stdin=subprocess.DEVNULL,
                            env=dict(os.environ) if env is None else env, **streams)
    os.close(slave)
    shown: list[bytes] = []

    def drain() -> None:  # a full pty buffer would block the child
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            shown.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    out, err = proc.communicate(timeout=300)
    reader.join(timeout=30)
    os.close(master)
    return proc.returncode, b"".join(shown).replace(b"\r\n", b"\n"), (err if tty == "stdout" else out) or b""
