"""What each git hook does when git runs it: the surface git calls through the shims in ``hooks/``.

``pre-commit`` fails closed (a commit with bad memory files is refused); the ``post-*`` hooks
fail open (they log git events to the current episode and never break git). Each exits with
a code and at most one line on stderr: this module is the hooks' one error boundary.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import gitops
from ..errors import MemstoreError
from ..git.hooks import git_event
from ..store.kinds import HOOK_NAMES
from . import output


def run_hook(name: str, args: list[str], cwd: Path | None = None, episode: str | None = None) -> int:
    """The entry point the shims exec. pre-commit returns 1 to refuse; post-* always return 0.
    ``episode``: the one the committing agent named (MEMSTORE_EPISODE reaches its git's hooks)."""
    if name not in HOOK_NAMES:
        sys.stderr.write(f"memstore: unknown hook {name!r} (one of {', '.join(HOOK_NAMES)})\n")
        return 0
    try:
        if name == "pre-commit":
            return _pre_commit(cwd)
        _post_hook(name, args, cwd, episode)
        return 0
    except Exception as exc:  # the hooks' one error boundary: git sees an exit code and one line
        if name != "pre-commit":  # fail open: git already did its work; memstore only takes notes
            sys.stderr.write(f"memstore: {name} hook skipped: {type(exc).__name__}: {exc}\n")
            return 0
        # fail closed: a broken store must not slip into a commit
        if isinstance(exc, MemstoreError):
            sys.stderr.write(f"memstore: pre-commit: {exc.message}\n")
        else:
            sys.stderr.write(f"memstore: pre-commit failed ({type(exc).__name__}: {exc}); commit refused. "
                             "Bypass once with `git commit --no-verify`.\n")
        return 1


def _pre_commit(cwd: Path | None) -> int:
    from ..git.check import _store_prefix
    from ..store.workspace import open_workspace
    from ..verbs.settings import check

    ws = open_workspace(cwd=cwd)
    store = ws.repo
    if store is None or not store.exists() or store.worktree is None:
        return 0
    if not gitops.staged_changes([_store_prefix(store)], store.worktree):
        return 0  # nothing under .memory/ in this commit: nothing to check
    report = check(ws, staged=True, fix=True)
    answer = report.to_json()
    if report.fixed or not report.ok:
        sys.stderr.write(output.pretty(answer, "check"))
    if not report.ok:
        sys.stderr.write("memstore: commit refused: fix the files above "
                         "(or bypass once with `git commit --no-verify`)\n")
        return 1
    return 0


def _post_hook(name: str, args: list[str], cwd: Path | None, episode: str | None = None) -> None:
    from ..store import episodes
    from ..store.workspace import open_workspace

    ws = open_workspace(cwd=cwd)
    store = ws.repo
    if store is None or not store.exists() or store.worktree is None:
        return  # memstore is not set up in this repo: nothing to log
    event = git_event(name, args, store.worktree)
    if event is not None:
        _, episode_id = episodes.git_episode(ws, episode)
        episodes.log(ws, "git", event["content"], episode_id=episode_id, extra={"git": event["git"]})
    # Nudge the index: a pull or checkout changes memory files; re-parsing them now (cheap, no
    # model) means the next read only has to embed what is new.
    ws.catalog("repo")
