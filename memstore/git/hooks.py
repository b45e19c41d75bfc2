"""Git hooks (SPEC §7): install / uninstall / status, and what a post-* hook records
(``git_event``); running them is ``memstore.surfaces.githook``, the surface git calls.

Installed the way pre-commit installs itself: our hook files carry a marker line, a foreign
hook already in place is moved to ``<hook>.legacy`` and called first by our shim (uninstall
puts it back), and ``core.hooksPath`` is refused unless the caller says to install there.
The shims live in the top-level ``hooks/`` folder (``memstore/_data/hooks`` in a wheel); at
install time the absolute ``sys.executable`` is written into the copy in ``.git/hooks`` so a
hook finds memstore even when git runs it with another PATH (``memstore`` on PATH is the fallback).
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from pathlib import Path
from typing import Any

from .. import gitops
from ..errors import Conflict, GitError, InvalidRequest
from ..store.data import data_text
from ..store.kinds import HOOK_NAMES

MARKER = "# memstore-hook:"
PYTHON_LINE = 'MEMSTORE_PYTHON=""'
MAX_PATHS = 100  # changed paths kept per git event


# -- templates ------------------------------------------------------------------------------------
def template(name: str) -> str:
    """A hook shim: package data in a wheel, the repo's ``hooks/`` in an editable install."""
    return data_text("hooks", name)


def render(name: str, python: str | None) -> str:
    text = template(name)
    if python:
        text = text.replace(PYTHON_LINE, f"MEMSTORE_PYTHON={shlex.quote(python)}", 1)
    return text


def is_ours(path: Path) -> bool:
    """Whether ``path`` is a hook memstore wrote: a regular file carrying the marker (a FIFO left
    where a hook belongs is opened without blocking and is not ours, never waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, 4096).decode("utf-8", errors="replace")
    except OSError:
        return False
    finally:
        os.close(fd)
    return MARKER in head


def recorded_python(path: Path) -> str | None:
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("MEMSTORE_PYTHON="):
            value = shlex.split(line.partition("=")[2] or "''")
            return value[0] if value and value[0] else None
    return None


# -- where hooks go -----------------------------------------------------------------------------------
def _worktree(cwd: Path | None) -> Path:
    top = gitops.toplevel((cwd or Path.cwd()).resolve())
    if top is None:
        raise InvalidRequest("not inside a git repository", code="not_a_repo", hint="run it inside the repo")
    return top


def hooks_path_setting(worktree: Path) -> str | None:
    proc = gitops.run(["config", "--get", "core.hooksPath"], worktree, check=False)
    return proc.stdout.strip() or None


def hooks_dir(worktree: Path) -> Path:
    """Where git looks for hooks: ``core.hooksPath`` if set, else the common git dir's ``hooks/``."""
    setting = hooks_path_setting(worktree)
    if setting:
        path = Path(setting).expanduser()
        return path if path.is_absolute() else worktree / path
    return gitops.git_dir(worktree, common=True).resolve() / "hooks"


# -- install / uninstall / status -------------------------------------------------------------------------
def install(cwd: Path | None = None, *, python: str | None = None, hooks_path_ok: bool = False) -> dict[str, Any]:
    """Install (or refresh) every hook; idempotent. Foreign hooks are kept as ``.legacy``."""
    worktree = _worktree(cwd)
    setting = hooks_path_setting(worktree)
    if setting and not hooks_path_ok:
        raise Conflict(
            f"core.hooksPath is set ({setting}): git runs the hooks there, not in .git/hooks",
            code="hooks_path_set",
            hint="install into that folder with `memstore hooks install --hooks-path-ok` (or --force), "
                 "or unset it with `git config --unset core.hooksPath`",
        )
    target = hooks_dir(worktree)
    python = python or sys.executable
    # Check every hook before touching any, so a refusal leaves nothing half-installed.
    for name in HOOK_NAMES:
        path, legacy = target / name, target / f"{name}.legacy"
        if path.exists() and not is_ours(path) and legacy.exists():
            raise Conflict(f"{path} and {legacy} both exist and neither is memstore's",
                           code="hook_conflict", hint="merge or remove one of them, then run install again")
    target.mkdir(parents=True, exist_ok=True)
    results = []
    for name in HOOK_NAMES:
        path, legacy = target / name, target / f"{name}.legacy"
        content = render(name, python)
        if path.exists() and not is_ours(path):
            os.replace(path, legacy)
            state = "installed (existing hook kept as " + legacy.name + ")"
        elif path.exists():
            state = "unchanged" if path.read_text(encoding="utf-8", errors="replace") == content else "updated"
        else:
            state = "installed"
        if state != "unchanged":
            tmp = path.with_name(f".{name}.memstore.tmp")
            tmp.write_text(content, encoding="utf-8")
            os.chmod(tmp, 0o755)  # noqa: S103 - git only runs executable hooks
            os.replace(tmp, path)
        results.append({"hook": name, "state": state, "legacy": legacy.exists()})
    return {"ok": True, "hooks_dir": str(target), "python": python, "hooks": results}


def uninstall(cwd: Path | None = None) -> dict[str, Any]:
    """Remove our hooks and put any ``.legacy`` hook back where it was."""
    worktree = _worktree(cwd)
    target = hooks_dir(worktree)
    results = []
    for name in HOOK_NAMES:
        path, legacy = target / name, target / f"{name}.legacy"
        if path.exists() and not is_ours(path):
            results.append({"hook": name, "state": "not memstore's: left alone"})
            continue
        state = "absent"
        if path.exists():
            path.unlink()
            state = "removed"
        if legacy.exists():
            os.replace(legacy, path)
            state = "removed, previous hook restored" if state == "removed" else "previous hook restored"
        results.append({"hook": name, "state": state})
    return {"ok": True, "hooks_dir": str(target), "hooks": results}


def status(cwd: Path | None = None) -> dict[str, Any]:
    worktree = _worktree(cwd)
    target = hooks_dir(worktree)
    results = []
    for name in HOOK_NAMES:
        path, legacy = target / name, target / f"{name}.legacy"
        item: dict[str, Any] = {"hook": name, "legacy": legacy.exists()}
        if not path.exists():
            item["state"] = "absent"
        elif not is_ours(path):
            item["state"] = "foreign"
        else:
            py = recorded_python(path)
            current = path.read_text(encoding="utf-8", errors="replace") == render(name, py)
            item["state"] = "installed" if current else "outdated"
            item["python"] = py
            item["executable"] = bool(path.stat().st_mode & stat.S_IXUSR)
        results.append(item)
    installed = all(r["state"] == "installed" for r in results)
    return {"ok": True, "hooks_dir": str(target), "hooks_path": hooks_path_setting(worktree),
            "installed": installed, "hooks": results}


# -- what the hooks do ------------------------------------------------------------------------------------
def _git_lines(args: list[str], cwd: Path) -> list[str]:
    proc = gitops.run(args, cwd, check=False)
    return [line for line in proc.stdout.splitlines() if line.strip()] if proc.returncode == 0 else []


def _names_between(old: str, new: str, cwd: Path) -> list[str]:
    try:
        return gitops.changed_names(old, new, cwd)
    except GitError:  # ORIG_HEAD or the previous HEAD gone: the event is logged without paths
        return []


def git_event(name: str, args: list[str], worktree: Path) -> dict[str, Any] | None:
    """What a post-* hook records: None when there is nothing worth a row (a file checkout)."""
    sha = gitops.resolve_commit("HEAD", worktree) or ""
    subject = "".join(_git_lines(["log", "-1", "--format=%s", "HEAD"], worktree)[:1])
    branch = "".join(_git_lines(["rev-parse", "--abbrev-ref", "HEAD"], worktree)[:1])
    if name == "post-commit":
        paths = gitops.commit_names("HEAD", worktree) or []
        head = f"commit {sha[:7]} {subject}"
    elif name == "post-merge":
        paths = _names_between("ORIG_HEAD", "HEAD", worktree)
        squash = bool(args and args[0] == "1")
        head = f"{'squash ' if squash else ''}merge into {branch} at {sha[:7]} {subject}"
    else:  # post-checkout: previous HEAD, new HEAD, 1 for a branch checkout / 0 for files
        if len(args) >= 3 and args[2] == "0":
            return None
        prev = args[0] if args else ""
        paths = _names_between(prev, sha, worktree) if prev and set(prev) != {"0"} else []
        head = f"checkout {branch} at {sha[:7]} {subject}"
    shown = ", ".join(paths[:10]) + (f", … (+{len(paths) - 10})" if len(paths) > 10 else "")
    content = head.rstrip() + (f" ({len(paths)} file{'s' if len(paths) != 1 else ''}: {shown})" if paths else "")
    return {"content": content, "git": {"hook": name, "sha": sha, "branch": branch, "message": subject,
                                        "paths": paths[:MAX_PATHS], "paths_total": len(paths)}}
