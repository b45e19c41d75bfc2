"""What the agent hooks that ``memstore integrate claude|codex|cursor`` writes do when the agent runs them.

``session-start`` prints the ambient context (``memstore context`` as text), which the agent adds to
the session. ``prompt`` (Claude Code / Codex UserPromptSubmit) and ``file`` (PreToolUse on the file
tools) add the memories relevant to the prompt or the file. ``compact`` (Claude Code PreCompact) marks
the session, so the next prompt carries the session-start context again. ``stop`` asks for the
session-end reflection by printing ``{"decision": "block", "reason": ...}`` (Cursor: a
``followup_message``), which keeps the agent working on that reason. Stop fires at the end of every
turn, so it asks once per session, and only once the session has changed the work tree (a
question-and-answer session has nothing to record); its input's ``stop_hook_active`` marks the turn
our own request caused, which is never asked again.

Each agent hands its own JSON and reads its own answer: Claude Code and Codex send ``cwd`` and
``session_id``, Cursor ``workspace_roots`` and ``conversation_id``; context goes back as plain text
(Claude Code's SessionStart and UserPromptSubmit), as ``hookSpecificOutput.additionalContext``
(Claude Code's PreToolUse, Codex) or as ``additional_context`` (Cursor's sessionStart).

All fail open: a memstore problem must never stop an agent session, so any error is one line on
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
from ..store.kinds import AGENT_HOOK_EVENTS

EVENTS = AGENT_HOOK_EVENTS
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


def run_hook(event: str, stdin: str | None = None, agent: str = "claude") -> int:
    try:
        text = sys.stdin.read(MAX_INPUT) if stdin is None else stdin
        payload = json.loads(text) if text.strip() else {}
        payload = payload if isinstance(payload, dict) else {}
        payload = _common(payload)
        cwd = Path(str(payload.get("cwd") or ".")).resolve()
        if event == "session-start":
            _session_start(payload, cwd, agent)
        elif event == "prompt":
            _after_compaction(payload, cwd, agent)
        elif event == "file":
            pass  # memories whose evidence cites the file: not wired yet
        elif event == "compact":
            _compact(payload, cwd)
        elif event == "stop":
            _stop(payload, cwd, agent)
    except Exception as exc:  # the hooks' one error boundary: fail open
        sys.stderr.write(f"memstore: {event} hook skipped: {type(exc).__name__}: {exc}\n")
    return 0


def _common(payload: dict[str, Any]) -> dict[str, Any]:
    """Cursor's names for the working directory and the session, as Claude Code and Codex name them."""
    roots = payload.get("workspace_roots")
    if not payload.get("cwd") and isinstance(roots, list) and roots and isinstance(roots[0], str):
        payload = {**payload, "cwd": roots[0]}
    if not payload.get("session_id") and payload.get("conversation_id"):
        payload = {**payload, "session_id": payload["conversation_id"]}
    return payload


HOOK_EVENT_NAMES = {"session-start": "SessionStart", "prompt": "UserPromptSubmit", "file": "PreToolUse"}


def context_output(agent: str, event: str, text: str) -> str:
    """``text`` as context in the answer ``agent`` reads from the hook for ``event``."""
    if agent == "cursor":
        return json.dumps({"additional_context": text}) + "\n"
    if agent == "claude" and event in ("session-start", "prompt"):
        return text  # stdout on exit 0 is added to the context
    return json.dumps({"hookSpecificOutput": {"hookEventName": HOOK_EVENT_NAMES[event],
                                              "additionalContext": text}}) + "\n"


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


def _context_text(cwd: Path) -> str:
    from ..store.workspace import open_workspace
    from ..verbs.guide import context
    from .output import visible
    from .render import context as render_context

    return visible(render_context(context(open_workspace(cwd=cwd))))


def _session_start(payload: dict[str, Any], cwd: Path, agent: str) -> None:
    note_path = _note_path(cwd, payload.get("session_id"))
    note = _load(note_path) if note_path is not None else None
    if note_path is not None:
        if note is None:  # after a compaction the session goes on: keep its note
            _save(note_path, {"start": _fingerprint(cwd), "asked": False})
            _prune(note_path.parent)
        elif note.get("compacted"):
            _save(note_path, {**note, "compacted": False})  # this start carries the context again
    sys.stdout.write(context_output(agent, "session-start", _context_text(cwd)))


def _compact(payload: dict[str, Any], cwd: Path) -> None:
    """Before a compaction: the next prompt of this session carries the session-start context again."""
    note_path = _note_path(cwd, payload.get("session_id"))
    if note_path is None:
        return
    note = _load(note_path) or {"start": _fingerprint(cwd), "asked": False}
    _save(note_path, {**note, "compacted": True})


def _after_compaction(payload: dict[str, Any], cwd: Path, agent: str) -> None:
    note_path = _note_path(cwd, payload.get("session_id"))
    note = _load(note_path) if note_path is not None else None
    if note_path is None or note is None or not note.get("compacted"):
        return
    _save(note_path, {**note, "compacted": False})
    sys.stdout.write(context_output(agent, "prompt", _context_text(cwd)))


def _stop(payload: dict[str, Any], cwd: Path, agent: str) -> None:
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
    reason = reflect_request(sys.executable)
    answer = {"followup_message": reason} if agent == "cursor" else {"decision": "block", "reason": reason}
    sys.stdout.write(json.dumps(answer) + "\n")
