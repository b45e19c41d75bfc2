"""Recall at the moment an agent acts: what the agent hooks inject when a prompt is submitted
(``prompt``) and when a file tool touches a file (``file``), as library calls the daemon serves.

Agents rarely ask memory on their own; these answers come to them unasked, so each says nothing
unless it clears a bar of its own: the prompt's memories must pass the read's gate and an
absolute score (``PROMPT_BAR``, chosen in bench/hooks.py), a file's memories must cite the file
in their evidence (and overlap the lines the tool reads, when both say which). Each memory is
injected at most once per agent session (a note in the git dir, beside the Stop hook's), and
the text of every answer is framed as the read answers frame memory text: untrusted data.

``hook_output`` turns an answer into the exact stdout each agent documents for added context
(docs/recall.md names the sources).
"""

from __future__ import annotations

import functools
import hashlib
import json
import posixpath
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import gitops
from ..store import relations
from ..store.files import atomic_write
from ..store.model import Memory
from ..store.paths import bounded, check_path
from ..store.trust import CONTENT_TRUST, UNTRUSTED_RULE
from ..store.workspace import Workspace

# A prompt's memories: the read's own gate, then this absolute bar on the fused score, at most
# PROMPT_LIMIT of them. The bar is bench/hooks.py's choice, leave-one-store-out on the precision
# stores: the most relevance among the bars that keep 95 % of off-topic coding prompts and of
# LoCoMo's mismatched questions silent (every fold chose 0.38).
PROMPT_BAR = 0.38
PROMPT_LIMIT = 3
PROMPT_MODE = "targeted"  # the read's mode (its gate's bar): bench/hooks.py measures both
PROMPT_QUERY_CHARS = 2000  # a pasted log is condensed by the read; past this it is only noise
# Characters of memory text one injection may carry (Claude Code and Codex take 10,000 whole).
PROMPT_BUDGET = 4000
FILE_LIMIT = 5
FILE_BUDGET = 3000
KEEP_SECONDS = 14 * 24 * 3600
HEADER = ("memstore recalled these memories from earlier sessions ({why}). Current code is ground truth: "
          "verify them before relying on them; failed tactics are watch-outs. ")
# The order a file's memories come in: what not to try again and what is still broken first.
FILE_ORDER = {"failed_tactic": 0, "problem": 1, "solution": 2, "change": 3, "fact": 4, "preference": 5}
_PATCH_FILE_RE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.M)


# -- the per-session note -----------------------------------------------------------------------
def note_path(cwd: Path, session: Any) -> Path | None:
    """The session's note in the git dir (never committed, never shared), or None outside git or
    without a session id."""
    top = gitops.toplevel(cwd)
    if top is None or not session:
        return None
    base = _git_dir(top) / "memstore" / "sessions"
    # The session id comes from the agent: hashed, it can only ever name a file in this folder.
    return base / (hashlib.sha256(str(session).encode("utf-8")).hexdigest()[:32] + ".json")


@functools.lru_cache(maxsize=64)
def _git_dir(top: Path) -> Path:
    # A checkout's git dir does not move: the daemon answers every hook call of a session
    # without running git for it again.
    return gitops.git_dir(top)


def load_note(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def save_note(path: Path, note: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # No fsync: the prompt and file hooks write this on the agent's clock, and a note lost in a
    # power cut only lets a memory be shown once more.
    atomic_write(path, json.dumps(note) + "\n", durable=False)


def prune_notes(folder: Path) -> None:
    cutoff = time.time() - KEEP_SECONDS
    for old in folder.glob("*.json"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            pass


def _unseen(cwd: Path, session: Any, ids: list[str]) -> tuple[list[str], Path | None, dict[str, Any]]:
    path = note_path(cwd, session)
    note = (load_note(path) if path is not None else None) or {}
    seen = set(note.get("recalled") or [])
    return [i for i in ids if i not in seen], path, note


def _remember(path: Path | None, note: dict[str, Any], ids: list[str]) -> None:
    if path is None or not ids:
        return
    # Re-read: the Stop hook may have written its part of the note since.
    fresh = load_note(path) or note
    save_note(path, {**fresh, "recalled": [*(fresh.get("recalled") or []), *ids]})


# -- the prompt -----------------------------------------------------------------------------------
def prompt_recall(ws: Workspace, prompt: str, *, session: Any = None, cwd: Path | None = None) -> dict[str, Any]:
    """The memories to inject for a prompt: those the read answers above ``PROMPT_BAR``, not yet
    shown in this session."""
    items = [_item(r) for r in prompt_candidates(ws, prompt) if float(r.get("score") or 0.0) >= PROMPT_BAR]
    return _answer(ws, "prompt", items, session, cwd)


def prompt_candidates(ws: Workspace, prompt: str, mode: str = PROMPT_MODE) -> list[dict[str, Any]]:
    """What the read answers for a prompt (the gate passed), before the absolute bar: the
    benchmark sweeps the bar over these."""
    from ..read.retrieve import read

    query = " ".join(str(prompt or "").split())[:PROMPT_QUERY_CHARS]
    if not query:
        return []
    req = {"op": "read", "query": query, "limit": PROMPT_LIMIT, "mode": mode}
    return list(read(ws, req, log_episode=False).get("results", []))


# -- the file -------------------------------------------------------------------------------------
def tool_files(payload: dict[str, Any]) -> list[tuple[str, tuple[int, int] | None]]:
    """(path, line range or None) of each file a tool call names: ``tool_input.file_path`` (Claude
    Code's Read, Edit, Write, MultiEdit; Cursor's tools), ``notebook_path``, ``path``, a top-level
    ``file_path`` (Cursor's beforeReadFile, afterFileEdit), and the files of an ``apply_patch``
    patch (Codex). A Read's ``offset``/``limit`` give its lines. A path past the bounds of
    ``store.paths`` (4096 bytes, 512 parts) names no file and is left out unlooked-at."""
    tool_input = payload.get("tool_input")
    if isinstance(tool_input, str):  # some agents send the tool's input as a JSON string
        try:
            tool_input = json.loads(tool_input)
        except ValueError:
            tool_input = {"command": tool_input}
    tool_input = tool_input if isinstance(tool_input, dict) else {}
    out: list[tuple[str, tuple[int, int] | None]] = []
    lines = _lines(tool_input)
    for key in ("file_path", "notebook_path", "path"):
        value = bounded(tool_input.get(key))
        if value is not None and value.strip():
            out.append((value, lines))
    top = bounded(payload.get("file_path"))
    if top is not None and top.strip():
        out.append((top, None))
    for value in tool_input.values():
        if isinstance(value, str) and "*** " in value:
            out += [(p.strip(), None) for p in _PATCH_FILE_RE.findall(value) if bounded(p.strip()) is not None]
    return list(dict.fromkeys(out))


def _lines(tool_input: dict[str, Any]) -> tuple[int, int] | None:
    offset, limit = tool_input.get("offset"), tool_input.get("limit")
    if not isinstance(offset, int) and not isinstance(limit, int):
        return None
    start = offset if isinstance(offset, int) and not isinstance(offset, bool) and offset > 0 else 1
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return start, start + limit - 1
    return start, 1 << 31


def repo_path(ws: Workspace, raw: str, cwd: Path) -> str | None:
    """``raw`` as a repo-relative POSIX path (how evidence cites files), or None outside the repo."""
    if ws.repo is None or ws.repo.worktree is None:
        return None
    root = ws.repo.worktree.resolve()
    path = Path(raw)
    path = path if path.is_absolute() else cwd / path
    try:
        rel = Path(posixpath.normpath(str(path))).relative_to(root)
    except ValueError:
        try:
            rel = path.resolve().relative_to(root)
        except (ValueError, OSError):
            return None
    text = rel.as_posix()
    return None if text in ("", ".") else text


def citations(ws: Workspace) -> dict[str, list[tuple[str, tuple[int, int] | None]]]:
    """path -> [(memory id, cited lines or None)] over the current memories in scope; kept with
    the scope's view and rebuilt when it changes (one pass over every memory's evidence)."""
    from .api import scope_links

    view = scope_links(ws)
    key = (id(view), view.generation)
    cached = ws.read_cache.get("recall_citations")
    if cached is not None and cached[0] == key:
        return cached[1]
    out: dict[str, list[tuple[str, tuple[int, int] | None]]] = {}
    g = view.graph
    for mem in view.memories.values():
        if mem.id in g.archived or mem.id in g.superseded_by:
            continue
        for ref in mem.file_evidence():
            out.setdefault(posixpath.normpath(ref.path or ""), []).append((mem.id, ref.lines))
    ws.read_cache["recall_citations"] = (key, out)
    return out


def _overlaps(cited: tuple[int, int] | None, asked: tuple[int, int] | None) -> bool:
    return cited is None or asked is None or (cited[0] <= asked[1] and asked[0] <= cited[1])


def payload_cwd(payload: dict[str, Any]) -> Path:
    """The hook's working directory as its payload gives it, bounded (``store.paths``), resolved."""
    return Path(check_path(str(payload.get("cwd") or "."), "cwd")).resolve()


def touched_files(ws: Workspace, payload: dict[str, Any], cwd: Path) -> list[tuple[str, tuple[int, int] | None]]:
    """(repo-relative path, lines or None) of each file in the repo a tool call names. This asks
    the file system only, none of the workspace's projections: the daemon runs it before it takes
    the workspace, so a path that is slow to resolve holds up no other request."""
    out: list[tuple[str, tuple[int, int] | None]] = []
    for raw, lines in tool_files(payload):
        rel = repo_path(ws, raw, cwd)
        if rel:
            out.append((rel, lines))
    return out


def file_recall(ws: Workspace, payload: dict[str, Any], *, session: Any = None, cwd: Path | None = None,
                files: list[tuple[str, tuple[int, int] | None]] | None = None) -> dict[str, Any]:
    """The memories whose evidence cites a file the tool call names (on overlapping lines when
    both give lines): failed tactics and open problems first, then the newest. ``files``: those
    files as ``touched_files`` gives them, when the caller has them already."""
    from .api import scope_links

    here = (cwd or Path.cwd()).resolve()
    index = citations(ws)
    wanted: dict[str, None] = {}
    for rel, lines in touched_files(ws, payload, here) if files is None else files:
        for mid, cited in index.get(rel, []):
            if _overlaps(cited, lines):
                wanted[mid] = None
    if not wanted:
        return _answer(ws, "file", [], session, cwd)
    view = scope_links(ws)
    mems = [view.memories[m] for m in wanted if m in view.memories]

    def order(m: Memory) -> tuple[int, int, str]:
        solved = m.kind == "problem" and any(view.memories.get(a) is not None and view.memories[a].kind == "solution"
                                             for a in view.graph.attempts.get(m.id, []))
        rank = FILE_ORDER.get(m.kind, 9) + (2 if solved else 0)  # a solved problem comes after its solution
        return rank, -_stamp(m.created), m.id

    mems.sort(key=order)
    mems = mems[:FILE_LIMIT * 3]
    # The same doubts a read gives, stale by cited lines included (the prompt's come with its read).
    from ..git.stale import repo_stale, stale_of
    from ..read.scope import checkout_cache

    found = stale_of(ws.repo, mems)
    unverified = repo_stale(found, mems, ws.checkouts, checkout_cache(ws))
    items = [{"id": m.id, "kind": m.kind, "scope": m.scope, "text": m.text, "created": m.created,
              "stale": found.get(m.id),
              "doubts": relations.doubts(m, view.graph, view.memories, ws.config, stale=found.get(m.id),
                                         unverified=unverified.get(m.id))}
             for m in mems]
    return _answer(ws, "file", items, session, cwd)


def _stamp(created: str) -> int:
    digits = re.sub(r"\D", "", created or "")
    return int(digits[:14] or 0)


# -- the answer -----------------------------------------------------------------------------------
def _item(r: dict[str, Any]) -> dict[str, Any]:
    return {"id": r["id"], "kind": r["kind"], "scope": r["scope"], "text": r["text"], "score": r.get("score"),
            "stale": r.get("stale"), "doubts": r.get("doubts") or []}


def _answer(ws: Workspace, event: str, items: list[dict[str, Any]], session: Any, cwd: Path | None) -> dict[str, Any]:
    if not items:  # the common case: no note to read, no git to ask
        return {"ok": True, "event": event, "content_trust": CONTENT_TRUST, "results": [], "text": ""}
    here = (cwd or Path.cwd()).resolve()
    limit, budget = (PROMPT_LIMIT, PROMPT_BUDGET) if event == "prompt" else (FILE_LIMIT, FILE_BUDGET)
    fresh, path, note = _unseen(here, session, [i["id"] for i in items])
    chosen = [i for i in items if i["id"] in set(fresh)][:limit]
    _remember(path, note, [i["id"] for i in chosen])
    return {"ok": True, "event": event, "content_trust": CONTENT_TRUST, "results": chosen,
            "text": render(event, chosen, budget)}


def render(event: str, items: list[dict[str, Any]], budget: int) -> str:
    """The injected text: a header that frames what follows as untrusted data, then each memory
    with every line quoted (``| ``), so no memory text can pose as the frame or end it early.
    Empty when there is nothing to inject."""
    if not items:
        return ""
    why = "they match this prompt" if event == "prompt" else "they cite the file this tool touches"
    out = [HEADER.format(why=why) + UNTRUSTED_RULE + f' (content_trust: "{CONTENT_TRUST}")']
    left = budget
    for it in items:
        text = str(it["text"])
        if left <= 0:
            out.append(f"[{it['kind']} {it['id']}] (not shown: `memstore show {it['id']}`)")
            continue
        if len(text) > left:
            text = text[:left].rstrip() + f" ... (cut; `memstore show {it['id']}` for the rest)"
        left -= len(text)
        out.append(f"[{it['kind']} {it['id']}]{relations.doubt_label(it.get('doubts'))}")
        out.extend("| " + line for line in text.splitlines() or [""])
    return "\n".join(out) + "\n"


# Where each agent reads a hook's added context (docs/recall.md names the pages):
# Claude Code and Codex: {"hookSpecificOutput": {"hookEventName": <event>, "additionalContext": text}}
# on stdout with exit 0; Cursor: {"additional_context": text} from its postToolUse hook (afterFileEdit
# is observation only); its beforeSubmitPrompt answers {"continue": true} and cannot add context.
CLAUDE_EVENTS = {"prompt": ("UserPromptSubmit",), "file": ("PreToolUse", "PostToolUse")}


def hook_output(agent: str, event: str, payload: dict[str, Any], text: str) -> str:
    """The stdout of a hook that injects ``text`` for ``agent`` (empty: print nothing)."""
    if not text:
        return ""
    if agent == "cursor":
        if event == "prompt":
            return ""
        return json.dumps({"additional_context": text}) + "\n"
    named = str(payload.get("hook_event_name") or "")
    allowed = CLAUDE_EVENTS.get(event, ())
    name = named if named in allowed else allowed[0] if event == "prompt" else "PostToolUse"
    return json.dumps({"hookSpecificOutput": {"hookEventName": name, "additionalContext": text}}) + "\n"


def after_compaction(cwd: Path, session: Any) -> bool:
    """Was the session compacted since its context was last given (the PreCompact hook's mark)?
    Clears the mark: the context comes back once."""
    path = note_path(cwd, session)
    note = load_note(path) if path is not None else None
    if path is None or not note or not note.get("compacted"):
        return False
    save_note(path, {**note, "compacted": False})
    return True


def hook(ws: Workspace, event: str, payload: dict[str, Any], agent: str = "claude", *,
         context_text: Callable[[Workspace], str] | None = None,
         files: list[tuple[str, tuple[int, int] | None]] | None = None) -> dict[str, Any]:
    """One hook call: the answer, with ``stdout`` the exact text the hook prints. ``context_text``:
    the session-start context as text, which the first prompt after a compaction carries again;
    ``files``: a file event's ``touched_files``, when the caller has them already."""
    cwd = payload_cwd(payload)
    session = payload.get("session_id") or payload.get("conversation_id")
    if event == "prompt":
        answer = prompt_recall(ws, str(payload.get("prompt") or ""), session=session, cwd=cwd)
        if context_text is not None and after_compaction(cwd, session):
            answer["text"] = context_text(ws) + answer["text"]
    elif event == "file":
        answer = file_recall(ws, payload, session=session, cwd=cwd, files=files)
    else:
        raise ValueError(f"unknown recall event {event!r}")
    answer["stdout"] = hook_output(agent, event, payload, answer["text"])
    return answer
