"""Every git call memstore makes. The git binary, not GitPython's index code: ``git add`` is
~30 ms where GitPython rewrites the index in Python (~270 ms in a 10k-file repo), and the
import alone costs ~90 ms on every CLI call."""

from __future__ import annotations

import functools
import subprocess
import time
from pathlib import Path

from .errors import GitError

_LOCK_RETRIES = 20


def run(
    args: list[str], cwd: Path, *, check: bool = True, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, input=input_text, check=False
        )
    except FileNotFoundError as exc:
        raise GitError("git is not installed or not on PATH", hint="install git") from exc
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise GitError(f"git {' '.join(args[:2])} failed: {msg[-1] if msg else 'exit ' + str(proc.returncode)}")
    return proc


def _run_retrying(args: list[str], cwd: Path) -> None:
    """git refuses to work while another process holds index.lock; concurrent writers take turns."""
    for attempt in range(_LOCK_RETRIES):
        proc = run(args, cwd, check=False)
        if proc.returncode == 0:
            return
        if "index.lock" not in proc.stderr or attempt == _LOCK_RETRIES - 1:
            msg = proc.stderr.strip().splitlines()
            raise GitError(f"git {args[0]} failed: {msg[-1] if msg else proc.returncode}")
        time.sleep(0.05 * (attempt + 1))


@functools.lru_cache(maxsize=64)
def toplevel(path: Path) -> Path | None:
    """The work tree root containing ``path``, or None outside a repository."""
    probe = path if path.is_dir() else path.parent
    while not probe.exists():
        probe = probe.parent
    proc = run(["rev-parse", "--show-toplevel"], probe, check=False)
    if proc.returncode != 0:
        return None
    return Path(proc.stdout.strip())


def user_name(cwd: Path) -> str | None:
    """``git config user.name`` as seen from ``cwd`` (repo, then global config), or None."""
    try:
        proc = run(["config", "--get", "user.name"], cwd, check=False)
    except GitError:
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def init(path: Path) -> None:
    run(["init", "-q"], path)


def stage(paths: list[Path], cwd: Path) -> None:
    if paths:
        _run_retrying(["add", "--", *[str(p) for p in paths]], cwd)


def commit(paths: list[Path], message: str, cwd: Path) -> None:
    """Commit exactly ``paths``; works with no user identity configured (a store is often new)."""
    stage(paths, cwd)
    ident = ["-c", "user.name=memstore", "-c", "user.email=memstore@localhost"]
    has_ident = run(["config", "user.email"], cwd, check=False).returncode == 0
    args = ([] if has_ident else ident) + ["commit", "-q", "--no-verify", "-m", message, "--", *map(str, paths)]
    _run_retrying(args, cwd)


def resolve_commit(rev: str, cwd: Path) -> str | None:
    proc = run(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def has_head(cwd: Path) -> bool:
    return run(["rev-parse", "--verify", "--quiet", "HEAD"], cwd, check=False).returncode == 0


def show_file(rev: str, path: str, cwd: Path) -> bytes | None:
    """A file's content at ``rev`` (repo-relative path), or None if it was not there."""
    proc = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=cwd, capture_output=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


def staged_entries(prefix: str, cwd: Path) -> list[tuple[str, str, str]]:
    """(mode, blob sha, repo-relative path) of every file under ``prefix`` in the index."""
    proc = run(["ls-files", "-s", "-z", "--", prefix], cwd, check=False)
    out: list[tuple[str, str, str]] = []
    for item in proc.stdout.split("\0"):
        meta, _, path = item.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and path:
            out.append((parts[0], parts[1], path))
    return out


def read_blobs(shas: list[str], cwd: Path) -> dict[str, bytes]:
    """The content of each blob, in one ``git cat-file --batch`` (a process per file costs ~5 ms)."""
    wanted = list(dict.fromkeys(shas))
    if not wanted:
        return {}
    proc = subprocess.run(["git", "cat-file", "--batch"], cwd=cwd, input="".join(f"{s}\n" for s in wanted).encode(),
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise GitError(f"git cat-file failed: {proc.stderr.decode(errors='replace').strip()}")
    data, pos, out = proc.stdout, 0, {}
    for sha in wanted:
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        pos = end + 1
        if len(header) != 3:  # "<sha> missing"
            continue
        size = int(header[2])
        out[sha] = data[pos:pos + size]
        pos += size + 1
    return out


def merge_base(a: str, b: str, cwd: Path) -> str | None:
    proc = run(["merge-base", a, b], cwd, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def head_sha(worktree: Path) -> str | None:
    """HEAD's commit, read from ``.git`` directly in the common layouts (a read pays this on
    every call; a ``git`` process costs ~5 ms), else asked of git."""
    gitdir = worktree / ".git"
    try:
        head = (gitdir / "HEAD").read_text(encoding="ascii").strip()
        if not head.startswith("ref: "):
            return head if len(head) == 40 else resolve_commit("HEAD", worktree)
        ref = head[5:]
        loose = gitdir / ref
        if loose.is_file():
            sha = loose.read_text(encoding="ascii").strip()
            if len(sha) == 40:
                return sha
        packed = gitdir / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="ascii").splitlines():
                if line.endswith(" " + ref) and len(line) > 41:
                    return line[:40]
        return None if not loose.exists() and not packed.exists() else resolve_commit("HEAD", worktree)
    except (OSError, UnicodeDecodeError):
        return resolve_commit("HEAD", worktree)
