"""Agent sessions as episodes (SPEC §10, "Sessions from hooks"): what the agent hooks capture.

An agent session the hooks see (Claude Code's and Codex's ``session_id``, Cursor's
``conversation_id``) becomes an episode at its first hook call; the session's note in the git dir
(``verbs.recall.note_path``, never committed) names it, so every later call of that session logs
to the same episode, whoever else works in the checkout. Logged, as events:

- each prompt (source ``user``, ``op: prompt``);
- each tool call a post-tool hook reports (source ``tool``, ``op: tool``): the tool, its command,
  the repo files it names, its outcome (``ok`` / ``failed`` / ``unknown``) and exit code when the
  agent says, and the tail of its output;
- each injection (source ``memstore``, ``op: inject``): the memories a prompt or file hook gave
  the agent, with the prompt event (``by``) or the files that brought them.

Everything goes through ``store.episodes.log``, which redacts secrets before anything reaches
disk and caps each event's text (``episodes.max_event_chars``). A session keeps at most
``episodes.max_session_events`` events; what the cap drops is counted in the note and written into the episode as
one ``op: dropped`` row when the session is asked to reflect, so nothing is lost silently.

Control characters in what the agent sends (a coloured log pasted into a prompt) are taken out
here, before anything reads it: the read and the stores refuse them, which would silence the hook.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import MemstoreError
from ..store import episodes
from ..store.disk import episode_rows, episode_tail
from ..store.files import file_lock
from ..store.workspace import Workspace
from . import recall

MAX_COMMAND = 1000  # characters of a tool call's command kept in its event
MAX_OUTPUT = 1500  # characters of a tool call's output kept (its tail: where errors are)
MAX_FILES = 20
MAX_SESSION_CHARS = 200
OPEN_LIST = "open-episodes"  # beside it: the episodes the hooks opened and saw no end of
MAX_LISTED = 200
OPEN_LOCK = "open.lock"  # in the notes' folder: one session's episode is opened once
AGENT_NAMES = {"claude": "claude-code", "codex": "codex", "cursor": "cursor"}
# Tools that change files: their calls are the "edits" of reflect's heuristics.
EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit", "apply_patch", "StrReplace", "TabWrite",
                        "edit_file", "write_file", "search_replace"})
FAILED_EVENTS = frozenset({"PostToolUseFailure", "postToolUseFailure"})
POST_EVENTS = frozenset({"PostToolUse", "PostToolUseFailure", "postToolUse", "postToolUseFailure",
                         "afterShellExecution", "afterFileEdit", "afterMCPExecution"})
# ANSI escape sequences (CSI, OSC) first, whole, so a coloured log leaves no "[31m" behind;
# then any other C0 control, DEL and the C1 range (newline and tab stay).
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_EXIT_RE = re.compile(r"(?i)\b(?:exit(?:ed)?(?: with)?(?: status| code)|process exited with code|returncode)"
                      r"\s*[:=]?\s*(-?\d+)")


# -- what the agent sends --------------------------------------------------------------------------
def clean_text(text: str) -> str:
    """``text`` without terminal escape sequences and control characters (newlines and tabs kept)."""
    if text.isprintable():
        return text
    return _CONTROL_RE.sub("", _ANSI_RE.sub("", text.replace("\r\n", "\n").replace("\r", "\n")))


def clean(value: Any) -> Any:
    """A hook payload with every string cleaned (``clean_text``), keys included."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(k) if isinstance(k, str) else k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def session_of(payload: dict[str, Any]) -> str | None:
    value = payload.get("session_id") or payload.get("conversation_id")
    return str(value)[:MAX_SESSION_CHARS] if isinstance(value, (str, int)) and str(value).strip() else None


# -- the session's episode -------------------------------------------------------------------------
class Session:
    """One agent session's episode and note, for the length of one hook call."""

    def __init__(self, ws: Workspace, episode: str, path: Path, note_file: Path, note: dict[str, Any]) -> None:
        self.ws = ws
        self.episode = episode
        self.path = path
        self.note_file = note_file
        self.note = note
        self.cap = int(ws.config.number("episodes", "max_session_events"))

    def log(self, source: str, content: str, extra: dict[str, Any]) -> str | None:
        """Append one event; its ref, or None when the session's cap dropped it (counted)."""
        last, ended = episode_tail(self.path)
        if ended:
            return None
        if last >= self.cap:
            self.note = {**(recall.load_note(self.note_file) or self.note)}
            self.note["dropped"] = int(self.note.get("dropped") or 0) + 1
            recall.save_note(self.note_file, self.note)
            return None
        return str(episodes.log(self.ws, source, content or "-", episode_id=self.episode, extra=extra)["ref"])

    def flush_dropped(self) -> int:
        """Write what the cap dropped since the last flush into the episode; the total dropped."""
        note = recall.load_note(self.note_file) or self.note
        dropped, written = int(note.get("dropped") or 0), int(note.get("dropped_logged") or 0)
        if dropped > written:
            with contextlib.suppress(Exception):
                episodes.log(self.ws, "memstore", f"{dropped - written} events past the cap of {self.cap} "
                             "per session were not kept", episode_id=self.episode,
                             extra={"op": "dropped", "dropped": dropped - written, "cap": self.cap})
                recall.save_note(self.note_file, {**note, "dropped_logged": dropped})
        return dropped


def _open_episode(ws: Workspace, episode: Any) -> Path | None:
    if not isinstance(episode, str) or not episode:
        return None
    path = episodes.episode_store(ws).episode_path(episode)
    if path is None:
        return None
    try:
        return None if episode_tail(path)[1] else path
    except OSError:
        return None


def _hook_owned(path: Path | None) -> bool:
    """Whether an episode was opened by the hooks for an agent session (its header names one)."""
    return path is not None and bool(next(episode_rows(path), {}).get("session"))


def _end_idle_sessions(ws: Workspace, listed: Path) -> list[str]:
    """The hook sessions' episodes still open, after ending each idle one (``_end_if_idle``).
    ``listed`` names the episodes the hooks opened in this checkout (not ``*.json``: the notes'
    pruning leaves it), so a session's start reads a few episode tails, not every episode."""
    still: list[str] = []
    for episode in (recall.load_note(listed) or {}).get("episodes", []):
        path = _open_episode(ws, episode)
        if path is not None and _hook_owned(path) and not _end_if_idle(ws, path, episode):
            still.append(episode)
    return still[-MAX_LISTED:]


def _end_if_idle(ws: Workspace, path: Path | None, episode: str) -> bool:
    """End a hook session's episode that has logged nothing for ``episodes.idle_end_minutes``
    when another session opens one. Codex sends no session end: without this its episodes would
    all stay open and out of git. A session that comes back after it finds its episode ended and
    opens a new one: nothing is lost."""
    minutes = float(ws.config.number("episodes", "idle_end_minutes"))
    if path is None or minutes <= 0:
        return False
    try:
        idle = time.time() - path.stat().st_mtime
    except OSError:
        return False
    if idle < minutes * 60:
        return False
    with contextlib.suppress(MemstoreError):
        episodes.end(ws, outcome=f"unknown: no session end, idle {int(idle // 60)} min", episode_id=episode)
        return True
    return False


def session(ws: Workspace, cwd: Path, payload: dict[str, Any], agent: str) -> Session | None:
    """The episode of the session ``payload`` belongs to, opened at its first hook call; None
    without a session id, outside git, or in a repository without a store (the hooks never create
    one)."""
    sid = session_of(payload)
    store = episodes.episode_store(ws)
    if sid is None or ws.repo is None or not store.exists():
        return None
    note_file = recall.note_path(cwd, sid)
    if note_file is None:
        return None
    note = recall.load_note(note_file) or {}
    path = _open_episode(ws, note.get("episode"))
    if path is None:
        # An agent runs hooks side by side (parallel tool calls): one of them opens the episode,
        # the others find it in the note once they hold the lock.
        with file_lock(note_file.parent / OPEN_LOCK):
            note = recall.load_note(note_file) or {}
            path = _open_episode(ws, note.get("episode"))
            if path is None:
                still_open = _end_idle_sessions(ws, note_file.parent / OPEN_LIST)
                # An episode another hook session opened gives way: each hook session finds its own
                # through its note. One an agent opened itself (`episode start`) stays the current one.
                current = episodes.current_id(store)
                replace = current is not None and _hook_owned(store.episode_path(current))
                started = episodes.start(ws, agent=AGENT_NAMES.get(agent, agent), task="", session=sid,
                                         replace=replace)
                note = {**note, "episode": started["episode"]}
                recall.save_note(note_file, note)
                recall.save_note(note_file.parent / OPEN_LIST, {"episodes": [*still_open, started["episode"]]})
                path = store.episode_path(started["episode"])
        if path is None:
            return None
    return Session(ws, path.stem, path, note_file, note)


def noted_injections(cwd: Path, sid: str) -> list[str]:
    """The memories the session's note says the hooks injected (``verbs.recall``), logged or not:
    an injection made before the session had an episode, or whose event a failure lost."""
    note_file = recall.note_path(cwd, sid)
    note = (recall.load_note(note_file) if note_file is not None else None) or {}
    return [m for m in note.get("recalled") or [] if isinstance(m, str)]


def find_session_episode(ws: Workspace, cwd: Path, sid: str) -> str | None:
    """The episode the hooks opened for session ``sid``: the one its note names, else the newest
    whose header names the session (a note pruned, or another checkout's session)."""
    note_file = recall.note_path(cwd, sid)
    note = (recall.load_note(note_file) if note_file is not None else None) or {}
    store = episodes.episode_store(ws)
    if isinstance(note.get("episode"), str) and store.episode_path(note["episode"]) is not None:
        return str(note["episode"])
    for item in episodes.list_episodes(ws)["episodes"]:
        path = store.episode_path(item["episode"])
        if path is not None and next(episode_rows(path), {}).get("session") == sid[:MAX_SESSION_CHARS]:
            return str(item["episode"])
    return None


# -- tool calls ------------------------------------------------------------------------------------
def _tool_input(payload: dict[str, Any]) -> dict[str, Any]:
    value = payload.get("tool_input")
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except ValueError:
            value = {"command": value}
    return value if isinstance(value, dict) else {}


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        parts = [value.get(k) for k in ("stderr", "stdout", "output", "error", "content", "result")]
        return "\n".join(p for p in parts if isinstance(p, str) and p)
    if isinstance(value, list):
        return "\n".join(_text_of(v) for v in value)
    return ""


def outcome(payload: dict[str, Any]) -> tuple[str, int | None, str]:
    """(``ok`` / ``failed`` / ``unknown``, the exit code when the agent gave one, the output's text)."""
    event = str(payload.get("hook_event_name") or "")
    response = payload.get("tool_response", payload.get("tool_output", payload.get("result_json")))
    text = "\n".join(t for t in (_text_of(response), _text_of(payload.get("output")),
                                 _text_of(payload.get("error"))) if t)
    code: int | None = None
    if isinstance(response, dict):
        for key in ("exit_code", "exitCode", "returncode", "return_code"):
            value = response.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                code = value
                break
    for key in ("exit_code", "exitCode"):
        value = payload.get(key)
        if code is None and isinstance(value, int) and not isinstance(value, bool):
            code = value
    if code is None and (m := _EXIT_RE.search(text)):
        code = int(m.group(1))
    failed = event in FAILED_EVENTS or (code is not None and code != 0)
    if isinstance(response, dict) and (response.get("is_error") is True or response.get("isError") is True
                                       or response.get("success") is False or response.get("interrupted") is True):
        failed = True
    if failed:
        return "failed", code, text
    known = code is not None or event in POST_EVENTS
    return ("ok" if known else "unknown"), code, text


def tool_event(ws: Workspace, payload: dict[str, Any], cwd: Path) -> tuple[str, dict[str, Any]]:
    """(content, extra) of the event that records one tool call."""
    tool_input = _tool_input(payload)
    event = str(payload.get("hook_event_name") or "")
    tool = str(payload.get("tool_name") or ("Shell" if event == "afterShellExecution" else
                                             "Edit" if event == "afterFileEdit" else "tool"))[:100]
    edit = tool in EDIT_TOOLS or event == "afterFileEdit"
    # an edit's input is its patch (Codex's apply_patch sends it as `command`): its files say what it did
    command = None if edit else tool_input.get("command", payload.get("command") if event == "afterShellExecution"
                                                   else None)
    if isinstance(command, list):
        command = " ".join(str(c) for c in command)
    command = " ".join(str(command).split())[:MAX_COMMAND] if isinstance(command, str) and command.strip() else None
    files = [rel for raw, _ in recall.tool_files(payload) if (rel := recall.repo_path(ws, raw, cwd))][:MAX_FILES]
    result, code, text = outcome(payload)
    what = command or ", ".join(files) or tool
    content = f"{tool}: {what} -> {result}" + (f" (exit {code})" if code is not None else "")
    tail = text.strip()[-MAX_OUTPUT:]
    if tail and (result == "failed" or command):
        content += "\n" + tail
    extra: dict[str, Any] = {"op": "tool", "tool": tool, "outcome": result}
    if command:
        extra["command"] = command
    if files:
        extra["files"] = files
    if code is not None:
        extra["exit_code"] = code
    if edit:
        extra["edit"] = True
    return content, extra


# -- one hook call ---------------------------------------------------------------------------------
def hook(ws: Workspace, event: str, payload: dict[str, Any], agent: str = "claude", *,
         context_text: Callable[[Workspace], str] | None = None,
         files: list[tuple[str, tuple[int, int] | None]] | None = None) -> dict[str, Any]:
    """One agent hook call through the session's episode: the payload cleaned, the prompt or tool
    call logged, then ``verbs.recall.hook``'s injection (``prompt``, ``file``) logged with what
    brought it. ``tool`` (a post-tool event) injects nothing. Capture never fails the hook.
    ``files``: a file event's touched files, when the caller looked them up already."""
    payload = clean(payload)
    cwd = Path(str(payload.get("cwd") or ".")).resolve()
    sess: Session | None = None
    by: str | None = None
    with contextlib.suppress(Exception):
        sess = session(ws, cwd, payload, agent)
        if sess is not None:
            by = _capture(sess, event, payload, cwd)
    if event == "tool":
        answer: dict[str, Any] = {"ok": True, "event": event, "results": [], "text": "", "stdout": ""}
    else:
        answer = recall.hook(ws, event, payload, agent, context_text=context_text, files=files)
    if sess is not None and answer.get("results"):
        with contextlib.suppress(Exception):
            _injected(sess, event, answer, by, payload, cwd)
    if sess is not None:
        answer["episode"] = sess.episode
    return answer


def _capture(sess: Session, event: str, payload: dict[str, Any], cwd: Path) -> str | None:
    if event == "prompt":
        prompt = payload.get("prompt")
        if isinstance(prompt, str) and prompt.strip():
            return sess.log("user", prompt, {"op": "prompt"})
        return None
    name = str(payload.get("hook_event_name") or "")
    if event == "tool" or (event == "file" and name in POST_EVENTS):
        content, extra = tool_event(sess.ws, payload, cwd)
        return sess.log("tool", content, extra)
    return None


def _injected(sess: Session, event: str, answer: dict[str, Any], by: str | None, payload: dict[str, Any],
              cwd: Path) -> None:
    results = [r for r in answer["results"] if isinstance(r, dict) and isinstance(r.get("id"), str)]
    shown = ", ".join(f"{r.get('kind')} {r['id'][:10]}" for r in results)
    extra: dict[str, Any] = {"op": "inject", "event": event, "results": [r["id"] for r in results]}
    if by:
        extra["by"] = by
    if event == "file":
        files = [rel for raw, _ in recall.tool_files(payload) if (rel := recall.repo_path(sess.ws, raw, cwd))]
        extra["files"] = files[:MAX_FILES]
        why = ", ".join(extra["files"]) or "a file"
    else:
        why = "the prompt" + (f" {by.rsplit(':', 1)[1]}" if by else "")
    sess.log("memstore", f"injected for {why}: {shown}", extra)


def end_session(ws: Workspace, cwd: Path, payload: dict[str, Any]) -> dict[str, Any] | None:
    """Close the session's episode (what its cap dropped written first); the ``episode end`` answer,
    or None when the session has no open episode."""
    payload = clean(payload)
    sid = session_of(payload)
    note_file = recall.note_path(cwd, sid) if sid is not None else None
    note = (recall.load_note(note_file) if note_file is not None else None) or {}
    path = _open_episode(ws, note.get("episode")) if note_file is not None else None
    if path is None or note_file is None:
        return None
    Session(ws, path.stem, path, note_file, note).flush_dropped()
    reason = payload.get("reason") or payload.get("status")
    outcome = f"session ended ({reason})" if isinstance(reason, str) and reason else "session ended"
    return episodes.end(ws, outcome=outcome[:200], episode_id=path.stem)


def stop_note(ws: Workspace, cwd: Path, payload: dict[str, Any], agent: str) -> str | None:
    """At the Stop hook: the session's episode (opened if the session had none yet), with what
    its cap dropped written into it. None without a session episode."""
    with contextlib.suppress(Exception):
        sess = session(ws, cwd, clean(payload), agent)
        if sess is not None:
            sess.flush_dropped()
            return sess.episode
    return None


# -- what reflect finds in a session's events --------------------------------------------------------
def _ref(episode: str, e: dict[str, Any]) -> str:
    return episodes.ref(episode, int(e["seq"]))


def _command_key(command: str) -> tuple[str, ...]:
    """What makes two runs "the same command": its first two words that are neither flags nor
    VAR=value assignments (``pytest -x tests/a.py`` and ``pytest tests/a.py -q`` are one)."""
    words = [w for w in command.split() if not w.startswith("-") and "=" not in w]
    return tuple(words[:2])


_REVERT_RE = re.compile(r"\bgit\s+(?:checkout\s+(?:--\s|\S+\s+--\s)|restore\b|revert\b|reset\s+--hard|stash\b)")


def lessons(events: list[dict[str, Any]], episode: str) -> list[dict[str, Any]]:
    """Candidate lessons found in a session's tool events, by fixed rules (memstore judges
    nothing; the agent decides what, if anything, to write):

    - ``problem_solution``: a command failed, files were edited, the same command then passed;
      the failing and the passing events are the evidence.
    - ``failed_tactic``: edits undone by a revert (``git checkout --``, ``restore``, ``reset
      --hard``, ``stash``), or a command that failed again and again and never passed after.
    - ``most_edited``: the files edited most, with the edits as evidence.
    """
    tools = [e for e in events if e.get("op") == "tool" and isinstance(e.get("seq"), int)]
    out: list[dict[str, Any]] = []
    # failures still waiting for a pass: command key -> (first failing event, edits since)
    open_failures: dict[tuple[str, ...], tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    failures: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    passed_after: set[tuple[str, ...]] = set()
    edits: list[dict[str, Any]] = []
    for e in tools:
        command = e.get("command")
        if e.get("edit"):
            edits.append(e)
            for _, since in open_failures.values():
                since.append(e)
            continue
        if not isinstance(command, str):
            continue
        if _REVERT_RE.search(command) and edits:
            undone = edits[-3:]
            out.append({"kind": "failed_tactic", "why": "edits undone by a revert",
                        "evidence": [_ref(episode, x) for x in undone] + [_ref(episode, e)],
                        "files": sorted({f for x in undone for f in x.get("files") or []}),
                        "template": _template("failed_tactic", [_ref(episode, x) for x in undone]
                                              + [_ref(episode, e)], problem_id="<problem id>")})
            continue
        key = _command_key(command)
        if not key:
            continue
        if e.get("outcome") == "failed":
            failures.setdefault(key, []).append(e)
            if key not in open_failures:
                open_failures[key] = (e, [])
        elif e.get("outcome") == "ok" and key in open_failures:
            failed, since = open_failures.pop(key)
            passed_after.add(key)
            if since:
                files = sorted({f for x in since for f in x.get("files") or []})
                fail_ref, pass_ref = _ref(episode, failed), _ref(episode, e)
                out.append({
                    "kind": "problem_solution", "why": f"`{failed.get('command')}` failed, then passed after edits",
                    "problem_event": fail_ref, "solution_event": pass_ref,
                    "edits": [_ref(episode, x) for x in since], "files": files,
                    "evidence": [fail_ref, pass_ref],
                    "templates": [_template("problem", [fail_ref]),
                                  _template("solution", [pass_ref, fail_ref], problem_id="<the problem's id>")]})
    for key, failed in failures.items():
        if len(failed) >= 2 and key not in passed_after and key in open_failures:
            refs = [_ref(episode, x) for x in failed[-3:]]
            out.append({"kind": "failed_tactic", "why": f"`{failed[-1].get('command')}` failed {len(failed)} times "
                        "and never passed after", "evidence": refs,
                        "template": _template("failed_tactic", refs, problem_id="<problem id>")})
    counts: dict[str, list[str]] = {}
    for e in edits:
        for f in e.get("files") or []:
            counts.setdefault(f, []).append(_ref(episode, e))
    top = sorted(counts.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:5]
    if top:
        out.append({"kind": "most_edited", "why": "the files this session edited most",
                    "files": [{"path": f, "edits": len(refs), "evidence": refs[-3:]} for f, refs in top]})
    return out


def _template(kind: str, refs: list[str], **links: Any) -> dict[str, Any]:
    memory: dict[str, Any] = {"kind": kind, "scope": "repo", "text": "", "confidence": 0.7, "evidence_refs": refs}
    if links:
        memory["links"] = links
    return {"op": "write", "memory": memory}


def injections(events: list[dict[str, Any]], episode: str) -> list[dict[str, Any]]:
    """The session's injections grouped by what brought them: a prompt (its event and text) or
    the files a tool call named, each with the memories given, in order."""
    by_seq = {e["seq"]: e for e in events if isinstance(e.get("seq"), int)}
    groups: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("op") != "inject" or not isinstance(e.get("seq"), int):
            continue
        if e.get("event") == "prompt":
            by = e.get("by") if isinstance(e.get("by"), str) else None
            key = f"prompt {by}"
            seq = by.rsplit(":", 1)[1] if by else ""
            origin = by_seq.get(int(seq)) if seq.isdigit() else None
            head = {"event": "prompt", "by": by, "prompt": str((origin or {}).get("content") or "")[:300]}
        else:
            files = [f for f in e.get("files") or [] if isinstance(f, str)]
            key = "file " + " ".join(files)
            head = {"event": "file", "files": files}
        group = groups.setdefault(key, {**head, "injected_at": [], "memories": []})
        group["injected_at"].append(_ref(episode, e))
        for mid in e.get("results") or []:
            if isinstance(mid, str) and mid not in group["memories"]:
                group["memories"].append(mid)
    return list(groups.values())
