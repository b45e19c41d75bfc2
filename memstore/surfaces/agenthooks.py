"""What the agent hooks that ``memstore integrate <agent>`` writes do when the agent runs them.

Every hook call of an agent session logs to the session's episode (``verbs.sessions``: opened at
the session's first call, keyed by the agent's session id): ``session-start`` opens it and prints the
ambient context (``memstore context`` as text), which the agent adds to the session, through the
warm daemon when one runs; ``tool`` (the post-tool events: Claude Code's PostToolUse and
PostToolUseFailure, Codex's PostToolUse, Cursor's postToolUseFailure) records a tool call and its
outcome and prints nothing. ``prompt`` (Claude Code's and Codex's UserPromptSubmit) and ``file``
(PreToolUse/PostToolUse on the file tools; Cursor's postToolUse) inject the memories
that match the prompt or cite the file (``verbs.recall``; docs/recall.md), through the warm daemon
when one runs, and print nothing when nothing passes. ``compact`` (Claude Code's PreCompact) marks
the session, so its next prompt carries the session-start context again. ``stop`` asks for the
session-end reflection of this session (``reflect --session ID``) by printing ``{"decision":
"block", "reason": ...}`` (Cursor: a ``followup_message``), which keeps the agent working on that
reason. ``end`` (Claude Code's SessionEnd, Cursor's sessionEnd) closes the session's episode.
Stop fires at the end of every turn, so it asks once per session, and only once the
session has changed the work tree (a question-and-answer session has nothing to record); its
input's ``stop_hook_active`` marks the turn our own request caused, which is never asked again.

Each agent hands its own JSON and reads its own answer: Claude Code and Codex send ``cwd`` and
``session_id``, Cursor ``workspace_roots`` and ``conversation_id``; context goes back as plain text
(Claude Code's SessionStart), as ``hookSpecificOutput.additionalContext`` (Claude Code's other
events, Codex) or as ``additional_context`` (Cursor).

All fail open: a memstore problem must never stop an agent session. ``session-start``, ``compact``
and ``stop`` say so in one line on stderr; ``prompt``, ``file`` and ``tool``, which run on every
prompt and tool call, say nothing to the agent and log the line to ``hooks.log`` in the daemon's runtime
dir (so does running past ``MEMSTORE_HOOK_BUDGET``). The per-session note lives in the git dir
(never committed, never shared).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing itself is not imported on the hooks' fast path
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

# ``prompt``, ``file`` and ``tool`` run on every prompt and every tool call: their path through a
# running daemon imports no more than entry.py does (json, os, socket); the rest loads only to
# answer in-process, when no daemon runs.
EVENTS = ("session-start", "prompt", "file", "tool", "compact", "stop", "end")  # as store.kinds.AGENT_HOOK_EVENTS
# Answered by the warm daemon when one runs: they fire on every prompt and every tool call.
RECALL_EVENTS = ("prompt", "file", "tool")
AGENTS = ("claude", "codex", "cursor")
MAX_INPUT = 1 << 20
# Seconds a recall hook may take before it gives up and injects nothing (MEMSTORE_HOOK_BUDGET):
# the agent waits for the hook on every prompt. Through the warm daemon a call takes tens of
# milliseconds; in-process (no daemon yet) the model alone may take longer than this.
BUDGET_SECONDS = 5.0
LOG_NAME = "hooks.log"


def reflect_request(python: str, session: str | None = None) -> str:
    from ..verbs.integrate import shell_command

    args = ("reflect", "--session", session) if session else ("reflect",)
    tool = f"the memory_reflect tool with session {session!r}" if session else "the memory_reflect tool"
    return ("memstore: before you finish, record what this session learned. Run "
            f"`{shell_command(python, *args)}` (or call {tool}): it lists this session's "
            "events, the memories it was given with a vote request for each (send your votes at once with "
            f"`{shell_command(python, 'vote')}` on stdin), candidate lessons found in the events and a checklist "
            "of what to write - problems met, what worked, what failed, facts, preferences - each with evidence. "
            "In review mode, propose the "
            "memories to the user before writing them. If nothing is worth keeping, say so in one line and stop. "
            "(memstore asks this once per session.)")


def run_hook(event: str, stdin: str | None = None, agent: str = "claude") -> int:
    """Run one agent hook; always 0 (the hooks fail open). ``stdin``: the hook's JSON (default:
    read from stdin); ``agent``: whose output format ``prompt`` and ``file`` answer in."""
    if event in RECALL_EVENTS:
        return _recall(event, stdin, agent)
    if event == "session-start":
        return _start(stdin, agent)
    try:
        import json
        from pathlib import Path

        text = sys.stdin.read(MAX_INPUT) if stdin is None else stdin
        payload = json.loads(text) if text.strip() else {}
        payload = _clean_payload(common_payload(payload if isinstance(payload, dict) else {}))
        cwd = Path(str(payload.get("cwd") or ".")).resolve()
        if event == "compact":
            _compact(payload, cwd)
        elif event == "stop":
            _stop(payload, cwd, agent)
        elif event == "end":
            _end(payload, cwd)
    except Exception as exc:  # the hooks' one error boundary: fail open
        sys.stderr.write(f"memstore: {event} hook skipped: {type(exc).__name__}: {exc}\n")
    return 0


def common_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Cursor's names for the working directory and the session, as Claude Code and Codex name them."""
    roots = payload.get("workspace_roots")
    if not payload.get("cwd") and isinstance(roots, list) and roots and isinstance(roots[0], str):
        payload = {**payload, "cwd": roots[0]}
    if not payload.get("session_id") and payload.get("conversation_id"):
        payload = {**payload, "session_id": payload["conversation_id"]}
    return payload


def context_output(agent: str, text: str) -> str:
    """The session-start context ``text`` in the answer ``agent`` reads from that hook."""
    import json

    if agent == "cursor":
        return json.dumps({"additional_context": text}) + "\n"
    if agent == "claude":
        return text  # a SessionStart hook's stdout on exit 0 is added to the context
    return json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}) + "\n"


def _clean_payload(payload: dict[str, Any]) -> dict[str, Any]:
    from ..verbs.sessions import clean

    return clean(payload)


def session_context(ws: Any) -> str:
    """The session-start context as the agent reads it: ``memstore context`` rendered as text."""
    from ..verbs.guide import context
    from .output import visible
    from .render import agent_context as render_context

    return visible(render_context(context(ws)))


class _Overrun(BaseException):
    """The hook's time budget ran out. Not an Exception: raised by SIGALRM wherever the hook
    happens to be, it must not be taken by an ``except Exception`` there (a keyword index that
    rebuilds itself on any error would take the timeout for damage and run on past the budget)."""


def _budget() -> float:
    try:
        value = float(os.environ.get("MEMSTORE_HOOK_BUDGET") or BUDGET_SECONDS)
    except ValueError:
        return BUDGET_SECONDS
    return value if value > 0 else BUDGET_SECONDS


def _log(line: str) -> None:
    """One line in the runtime dir's hooks.log: a recall hook says nothing to the agent, even
    when it fails, but a person looking for why it was silent finds it here."""
    import time

    from . import wire

    try:
        folder = wire.runtime_dir()
        os.makedirs(folder, mode=0o700, exist_ok=True)
        wire.check_runtime_dir(folder)  # never a line in a directory another user holds or can read
        fd = os.open(os.path.join(folder, LOG_NAME), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {line}\n")
    except (OSError, wire.Unavailable, wire.Untrusted):
        pass


def _recall(event: str, stdin: str | None, agent: str) -> int:
    """``prompt`` / ``file``: the memories to inject, through the daemon when one runs, else
    in-process under the time budget; any failure or overrun injects nothing and exits 0."""
    import time

    from ..store.paths import check_path
    from .wire import loads

    budget = _budget()
    try:
        text = sys.stdin.read(MAX_INPUT) if stdin is None else stdin
        payload = loads(text) if text.strip() else {}  # the C scanner alone: json.decoder imports re
        if not isinstance(payload, dict):
            return 0
        payload = common_payload(payload)
        # no cwd (or a relative one): the hook's own, resolved here; the daemon's is elsewhere
        cwd = payload.get("cwd")
        cwd = check_path(cwd, "cwd") if isinstance(cwd, str) and cwd else "."  # bounded before it is resolved
        payload = {**payload, "cwd": os.path.realpath(cwd)}
        out = _through_daemon(event, payload, agent, budget)
        if out is None:
            out = _in_process(event, payload, agent, time.monotonic() + budget)
        if out:
            sys.stdout.write(out)
            sys.stdout.flush()
    except _Overrun:
        _log(f"{agent} {event}: over the {budget:g} s budget; nothing injected")
    except Exception as exc:  # the hooks' one error boundary: fail open, silently
        _log(f"{agent} {event}: skipped: {type(exc).__name__}: {exc}")
    return 0


def _through_daemon(event: str, payload: dict[str, Any], agent: str, budget: float) -> str | None:
    """The hook's stdout from a running daemon, or None when none answers (run in-process)."""
    body = _ask_daemon(event, payload, agent, budget)
    return None if body is None else str(body.get("stdout") or "")


def _ask_daemon(event: str, payload: dict[str, Any], agent: str, budget: float) -> dict[str, Any] | None:
    """The daemon's answer to a hook call, or None when none answers (run in-process)."""
    from . import wire

    if wire.disabled():
        return None
    cwd = payload.get("cwd")
    message: dict[str, object] = {
        "verb": "recall", "version": wire.code_version(),
        "cwd": cwd if isinstance(cwd, str) and cwd else os.getcwd(), "store": None, "env": wire.forwarded_env(),
        "args": {"event": event, "payload": payload, "agent": agent},
    }
    try:
        answer = wire.exchange(message, timeout=budget)
    except TimeoutError as exc:
        raise _Overrun() from exc
    except (wire.Unavailable, wire.Untrusted, OSError, ValueError):
        return None
    if answer.get("restart") or "answer" not in answer:
        return None
    body = answer["answer"]
    if not isinstance(body, dict) or answer.get("exit_code"):
        err = body.get("error") if isinstance(body, dict) else None
        raise RuntimeError(f"daemon: {err}")
    return body


def _in_process(event: str, payload: dict[str, Any], agent: str, deadline: float) -> str:
    """The answer computed here, interrupted at ``deadline``; starts a daemon for the next call."""
    import signal
    import threading
    import time
    from pathlib import Path

    from ..store.workspace import open_workspace
    from ..verbs.sessions import hook
    from . import client

    left = deadline - time.monotonic()
    if left <= 0:
        raise _Overrun()
    timed = threading.current_thread() is threading.main_thread()

    def expire(signum: int, frame: Any) -> None:
        raise _Overrun()

    old = signal.signal(signal.SIGALRM, expire) if timed else None
    if timed:
        signal.setitimer(signal.ITIMER_REAL, left)
    try:
        ws = open_workspace(cwd=Path(str(payload.get("cwd") or ".")).resolve())
        if client.autostarts(ws.config):
            client.autostart(ws.config)
        return str(hook(ws, event, payload, agent, context_text=session_context)["stdout"])
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def _fingerprint(cwd: Path) -> str:
    """HEAD and the work tree's changes, outside .memory/ (reads and episodes write there)."""
    import hashlib

    from .. import gitops

    top = gitops.toplevel(cwd) or cwd
    head = gitops.head_sha(top) or ""
    status = gitops.run(["status", "--porcelain=v1", "-z", "--", ".", ":(exclude).memory"], top, check=False).stdout
    return hashlib.sha256(f"{head}\0{status}".encode()).hexdigest()


def _start(stdin: str | None, agent: str) -> int:
    """``session-start``: the context and the session's episode, from the warm daemon when one runs
    (the retrieval stack is loaded there: ~1.5 s saved per session start), else in-process, which
    starts a daemon for the hooks that follow. Fails open with one line on stderr."""
    from .wire import loads

    budget = _budget()
    try:
        text = sys.stdin.read(MAX_INPUT) if stdin is None else stdin
        payload = loads(text) if text.strip() else {}
        payload = common_payload(payload if isinstance(payload, dict) else {})
        cwd = payload.get("cwd")
        payload = {**payload, "cwd": os.path.realpath(cwd if isinstance(cwd, str) and cwd else ".")}
        body = _ask_daemon("session-start", payload, agent, budget)
        if body is None:
            from pathlib import Path

            from ..store.workspace import open_workspace
            from . import client

            ws = open_workspace(cwd=Path(payload["cwd"]))
            body = session_start_answer(ws, payload, agent)
            if client.autostarts(ws.config):  # warm for the prompt and file hooks that follow
                client.autostart(ws.config)
        if body.get("episode"):
            _export_episode(str(body["episode"]))
        sys.stdout.write(str(body.get("stdout") or ""))
        sys.stdout.flush()
    except _Overrun:
        sys.stderr.write(f"memstore: session-start hook skipped: over the {budget:g} s budget\n")
    except Exception as exc:  # the hooks' one error boundary: fail open
        sys.stderr.write(f"memstore: session-start hook skipped: {type(exc).__name__}: {exc}\n")
    return 0


def session_start_answer(ws: Any, payload: dict[str, Any], agent: str) -> dict[str, Any]:
    """What ``session-start`` answers, here or in the daemon: ``stdout`` (the context as the agent
    reads it) and the session's ``episode``, opened at this first hook call."""
    from pathlib import Path

    from ..verbs.sessions import clean, session

    payload = clean(payload)
    cwd = Path(str(payload.get("cwd") or ".")).resolve()
    _session_note(payload, cwd)
    episode = None
    try:
        sess = session(ws, cwd, payload, agent)
        episode = sess.episode if sess is not None else None
    except Exception as exc:  # capture fails open; the context is still given
        _log(f"{agent} session-start: session not recorded: {type(exc).__name__}: {exc}")
    return {"ok": True, "episode": episode, "stdout": context_output(agent, session_context(ws))}


def _session_note(payload: dict[str, Any], cwd: Path) -> None:
    from ..verbs.recall import load_note, note_path, prune_notes, save_note

    path = note_path(cwd, payload.get("session_id"))
    note = load_note(path) if path is not None else None
    if path is not None:
        if note is None:  # after a compaction the session goes on: keep its note
            save_note(path, {"start": _fingerprint(cwd), "asked": False})
            prune_notes(path.parent)
        elif note.get("compacted"):
            save_note(path, {**note, "compacted": False})  # this start carries the context again


def _export_episode(episode: str) -> None:
    """Name the session's episode to the agent's shell commands: Claude Code gives a SessionStart
    hook ``CLAUDE_ENV_FILE``, whose ``export`` lines the session's later Bash commands run with, so
    a ``memstore write`` or ``vote`` there logs to this session's episode (MEMSTORE_EPISODE)."""
    target = os.environ.get("CLAUDE_ENV_FILE")
    if not target:
        return
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(f"export MEMSTORE_EPISODE={episode}\n")


def _end(payload: dict[str, Any], cwd: Path) -> None:
    """The session is over (Claude Code's SessionEnd, Cursor's sessionEnd): its episode is closed
    and, unless episodes are local-only, staged in git like any episode that ends."""
    from ..store.workspace import open_workspace
    from ..verbs.sessions import end_session

    end_session(open_workspace(cwd=cwd), cwd, payload)


def _compact(payload: dict[str, Any], cwd: Path) -> None:
    """Before a compaction: the next prompt of this session carries the session-start context again
    (verbs.recall.hook), as a SessionStart hook's output after a compaction is not added."""
    from ..verbs.recall import load_note, note_path, save_note

    path = note_path(cwd, payload.get("session_id"))
    if path is None:
        return
    note = load_note(path) or {"start": _fingerprint(cwd), "asked": False}
    save_note(path, {**note, "compacted": True})


def _stop(payload: dict[str, Any], cwd: Path, agent: str) -> None:
    if payload.get("stop_hook_active"):
        return  # this turn answers our own request: never ask twice in a row
    from ..verbs.recall import load_note, note_path, save_note

    path = note_path(cwd, payload.get("session_id"))
    if path is None:
        return
    note = load_note(path)
    now = _fingerprint(cwd)
    if note is None or "start" not in note:
        # A session that began before the integration (or whose note only the recall hooks
        # wrote so far): start counting from here.
        save_note(path, {**(note or {}), "start": now, "asked": False})
        return
    if note.get("asked") or note.get("start") == now:
        return
    save_note(path, {**note, "asked": True})
    import json

    from ..store.workspace import open_workspace
    from ..verbs.sessions import session_of, stop_note

    sid = session_of(payload)
    # the cap's count goes into the episode before the agent reads it
    episode = stop_note(open_workspace(cwd=cwd), cwd, payload, agent)
    reason = reflect_request(sys.executable, sid if episode else None)
    answer = {"followup_message": reason} if agent == "cursor" else {"decision": "block", "reason": reason}
    sys.stdout.write(json.dumps(answer) + "\n")
