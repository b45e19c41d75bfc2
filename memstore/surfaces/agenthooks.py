"""What the Claude Code hooks that ``memstore integrate claude`` writes do when Claude Code runs them.

``session-start`` prints the ambient context (``memstore context`` as text): Claude Code adds a
SessionStart hook's stdout to the session's context. ``stop`` asks for the session-end reflection
by printing ``{"decision": "block", "reason": ...}``, which keeps Claude working on that reason.
Stop fires at the end of every turn, so it asks once per session, and only once the session has
changed the work tree (a question-and-answer session has nothing to record); its input's
``stop_hook_active`` marks the turn our own request caused, which is never asked again.

Both fail open: a memstore problem must never stop an agent session, so any error is one line on
stderr and exit 0. The per-session note lives in the git dir (never committed, never shared).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from .. import gitops
from ..store.files import atomic_write

EVENTS = ("session-start", "stop")
KEEP_SECONDS = 14 * 24 * 3600  # session notes older than this are dropped at the next session start
MAX_INPUT = 1 << 20


def reflect_request(python: str) -> str:
    from ..verbs.integrate import shell_command

    return ("memstore: before you finish, record what this session learned. Run "
            f"`{shell_command(python, 'reflect')}` (or call the memory_reflect tool): it lists the session's "
            "events, the memories you read (vote on them) and a checklist of what to write - problems met, "
            "what worked, what failed, facts, preferences - each with evidence. In review mode, propose the "
            "memories to the user before writing them. If nothing is worth keeping, say so in one line and stop. "
            "(memstore asks this once per session.)")


def run_hook(event: str, stdin: str | None = None) -> int:
    try:
        text = sys.stdin.read(MAX_INPUT) if stdin is None else stdin
        payload = json.loads(text) if text.strip() else {}
        payload = payload if isinstance(payload, dict) else {}
        cwd = Path(str(payload.get("cwd") or ".")).resolve()
        if event == "session-start":
            _session_start(payload, cwd)
        elif event == "stop":
            _stop(payload, cwd)
    except Exception as exc:  # the hooks' one error boundary: fail open
        sys.stderr.write(f"memstore: {event} hook skipped: {type(exc).__name__}: {exc}\n")
    return 0


def _note_path(cwd: Path, session: Any) -> Path | None:
    top = gitops.toplevel(cwd)
    if top is None or not session:
        return None
    base = gitops.git_dir(top) / "memstore" / "sessions"
    # The session id comes from the agent: hashed, it can only ever name a file in this folder.
    return base / (hashlib.sha256(str(session).encode("utf-8")).hexdigest()[:32] + ".json")


def _fingerprint(cwd: Path) -> str:
    """HEAD and the work tree's changes, outside .memory/ (reads and episodes write there)."""
    top = gitops.toplevel(cwd) or cwd
    head = gitops.head_sha(top) or ""
    status = gitops.run(["status", "--porcelain=v1", "-z", "--", ".", ":(exclude).memory"], top, check=False).stdout
    return hashlib.sha256(f"{head}\0{status}".encode()).hexdigest()


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _save(path: Path, note: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(note) + "\n")


def _prune(folder: Path) -> None:
    cutoff = time.time() - KEEP_SECONDS
    for old in folder.glob("*.json"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            pass


def _session_start(payload: dict[str, Any], cwd: Path) -> None:
    note_path = _note_path(cwd, payload.get("session_id"))
    if note_path is not None and _load(note_path) is None:  # after /compact the session goes on: keep its note
        _save(note_path, {"start": _fingerprint(cwd), "asked": False})
        _prune(note_path.parent)
    from ..store.workspace import open_workspace
    from ..verbs.guide import context
    from .output import visible
    from .render import context as render_context

    answer = context(open_workspace(cwd=cwd))
    sys.stdout.write(visible(render_context(answer)))


def _stop(payload: dict[str, Any], cwd: Path) -> None:
    if payload.get("stop_hook_active"):
        return  # this turn answers our own request: never ask twice in a row
    note_path = _note_path(cwd, payload.get("session_id"))
    if note_path is None:
        return
    note = _load(note_path)
    now = _fingerprint(cwd)
    if note is None:  # a session that began before the integration: start counting from here
        _save(note_path, {"start": now, "asked": False})
        return
    if note.get("asked") or note.get("start") == now:
        return
    _save(note_path, {**note, "asked": True})
    sys.stdout.write(json.dumps({"decision": "block", "reason": reflect_request(sys.executable)}) + "\n")
