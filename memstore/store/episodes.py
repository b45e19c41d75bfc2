"""Episodes (SPEC §2): append-only JSONL logs of a work session, what ``event:`` evidence cites.

``episodes/<YYYY-MM>/<ULID>.jsonl``: a header line, one line per event, a closing line.

Which episode a call logs to: the one it names (``--episode``, ``MEMSTORE_EPISODE``, or the
episode an MCP session started), else the checkout's *current* episode, remembered in the
store's ``.local/`` (gitignored) so a single agent's calls and the git hooks find it. Two agents
in one checkout cannot share that fallback: a ``start`` while another agent's episode is open
and active leaves the current one alone and tells the new agent to name its own. ``Store`` does
the writing (flock + O_APPEND, seq assigned under the lock); this module decides what to write.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from .. import gitops
from ..errors import InvalidRequest, NotFound, SemanticError
from . import ids
from .disk import Store, episode_rows, episode_tail
from .files import atomic_write, bad_char
from .kinds import EPISODE_SOURCES
from .model import utc_now
from .secrets import Finding, redact
from .workspace import Workspace

CURRENT_FILE = "current_episode"
GIT_DAY_FILE = "git_episode"
# An open current episode logged to within this long belongs to an agent at work: a second
# `episode start` does not take it over. Older, it is taken to be abandoned (an agent that
# stopped without `episode end`), and the new one replaces it as before.
ACTIVE_SECONDS = 2 * 3600
# The longest agent name an episode header may carry: every write of the episode takes it as
# its ``author`` (``agent_of``), so it must be one a write accepts.
MAX_AGENT_CHARS = 200


def _check_header(agent: str | None, task: str | None) -> None:
    """Refuse at ``start`` what would break the episode later: a control character in the agent
    (every write would then fail on an ``author`` the agent never set) or the task (a query
    ``context`` reads), an agent name no write accepts. Nothing is written before this."""
    found = bad_char({"agent": agent or "", "task": task or ""})
    if found is not None:
        raise SemanticError(found[1], field=found[0], code="bad_chars",
                            hint="terminal colour codes, NULs and the like do not belong in an episode header")
    if agent is not None and len(agent) > MAX_AGENT_CHARS:
        raise SemanticError(f"agent is {len(agent)} characters; at most {MAX_AGENT_CHARS}", field="agent",
                            code="too_large")


# -- where episodes live ------------------------------------------------------------------------
def episode_store(ws: Workspace) -> Store:
    """Episodes belong to the repo store; outside a repository, to the global store."""
    return ws.repo if ws.repo is not None else ws.global_


def _local_only(ws: Workspace) -> bool:
    return bool(ws.config.get("episodes", "local_only", False))


def _max_chars(ws: Workspace) -> int:
    return int(ws.config.number("episodes", "max_event_chars"))


def current_id(store: Store) -> str | None:
    """The episode this clone is logging to, if one is open."""
    path = store.local_dir / CURRENT_FILE
    if not store.inside(path):  # a committed `.local -> elsewhere` is never read through
        return None
    try:
        value = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return value if ids.is_id(value) else None


def _set_current(store: Store, episode_id: str | None) -> None:
    path = store._writable(store.local_dir / CURRENT_FILE)
    if episode_id is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write(path, episode_id + "\n")


def _active(path: Path | None) -> bool:
    """Open and logged to within ACTIVE_SECONDS."""
    if path is None:
        return False
    try:
        if episode_tail(path)[1]:
            return False
        return time.time() - path.stat().st_mtime < ACTIVE_SECONDS
    except OSError:
        return False


def find_episode(ws: Workspace, episode_id: str) -> tuple[Store, Path]:
    """Resolve a full id or unique prefix to (store, file) across the stores in view."""
    if not isinstance(episode_id, str) or len(episode_id.strip()) < ids.MIN_PREFIX:
        raise InvalidRequest(f"episode id {episode_id!r} is too short: give at least {ids.MIN_PREFIX} characters",
                             field="episode", code="bad_id")
    prefix = ids.normalize_prefix(episode_id)
    if not set(prefix) <= set(ids.ALPHABET):
        raise InvalidRequest(f"episode id {episode_id!r} is not an id (letters and digits of an episode id only)",
                             field="episode", code="bad_id")
    for store in [episode_store(ws), *[s for s in ws.stores() if s is not episode_store(ws)]]:
        path = store.episode_path(prefix)
        if path is not None:
            return store, path
    raise NotFound(f"no episode with id {episode_id!r}", field="episode")


def _resolve(ws: Workspace, episode_id: str | None) -> tuple[Store, Path]:
    if episode_id:
        return find_episode(ws, episode_id)
    store = episode_store(ws)
    cur = current_id(store)
    if cur is None:
        raise NotFound("no episode is open in this repository", field="episode",
                       hint="run `memstore episode start`, or name the episode")
    path = store.episode_path(cur)
    if path is None:
        _set_current(store, None)
        raise NotFound(f"the current episode {cur} has no file any more", field="episode",
                       hint="run `memstore episode start`")
    return store, path


# -- rows -----------------------------------------------------------------------------------------
def scrub(value: Any, found: list[Finding]) -> Any:
    """``value`` with every likely secret in its strings redacted (SPEC §10: episodes are a path
    into git). Redact, never refuse: a log line lost would fail the session it records."""
    if isinstance(value, str):
        text, hits = redact(value)
        found.extend(hits)
        return text
    if isinstance(value, dict):
        return {k: scrub(v, found) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, found) for v in value]
    return value


def _redacted_note(found: list[Finding]) -> list[dict[str, Any]]:
    return [{"kind": f.kind, "excerpt": f.excerpt} for f in found]


def cap_content(content: str, max_chars: int) -> dict[str, Any]:
    """The ``content`` fields of a row: over the cap it is cut, and the full text's sha256 kept
    so the original can still be recognised."""
    if len(content) <= max_chars:
        return {"content": content}
    return {"content": content[:max_chars], "truncated": True, "chars": len(content),
            "sha256": hashlib.sha256(content.encode("utf-8")).hexdigest()}


def read_rows(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any] | None]:
    """(header, events, closing row or None). Lines that do not parse are skipped."""
    header: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    ended: dict[str, Any] | None = None
    for row in episode_rows(path):
        if "episode" in row and not header:
            header = row
        elif isinstance(row.get("seq"), int):
            events.append(row)
        elif "ended" in row:
            ended = row
    return header, events, ended


def ref(episode_id: str, seq: int) -> str:
    return f"event:{episode_id}:{seq}"


# -- verbs ---------------------------------------------------------------------------------------------
def start(ws: Workspace, *, agent: str | None = None, task: str | None = None, local: bool | None = None,
          repo_name: str | None = None, replace: bool = False, session: str | None = None) -> dict[str, Any]:
    """Open a new episode. It becomes the checkout's current episode unless another agent's
    episode is current, open and active (then ``current`` is false and ``warning`` says how to
    name this one); ``replace`` makes it current anyway. An episode replaced stays open.
    ``session``: the agent's own session id, when the agent hooks open it (verbs.sessions)."""
    _check_header(agent, task)
    store = episode_store(ws)
    if not store.exists():
        store.init()
    local = _local_only(ws) if local is None else local
    episode_id = ids.new_id()
    if repo_name is None:
        repo_name = store.worktree.name if store.worktree is not None and store.scope == "repo" else None
    found: list[Finding] = []
    header = {"episode": episode_id, "repo": repo_name, "agent": scrub(agent or "unknown", found),
              "task": scrub(task or "", found), "started": utc_now()}
    if session:
        header["session"] = scrub(session, found)
    previous = current_id(store)
    busy = previous is not None and not replace and _active(store.episode_path(previous))
    store._writable(store.local_dir / CURRENT_FILE)  # refused before the episode file is written
    path = store.create_episode(header, local=local)
    if not busy:
        _set_current(store, episode_id)
    answer: dict[str, Any] = {"ok": True, "episode": episode_id, "path": store.display_path(store.relpath(path)),
                              "local_only": local, "cite_as": f"event:{episode_id}:<seq>", "current": not busy,
                              "env": f"MEMSTORE_EPISODE={episode_id}"}
    if busy:
        answer["in_use"] = previous
        answer["warning"] = (
            f"episode {previous} is open and active in this checkout (another agent at work?) and stays "
            f"the current one; name yours on every call: set MEMSTORE_EPISODE={episode_id} or pass "
            f"--episode {episode_id} (`--replace` makes it current instead)")
    elif previous and previous != episode_id:
        answer["previous"] = previous
    if found:
        answer["redacted"] = _redacted_note(found)
    return answer


def log(ws: Workspace, source: str, content: str, *, episode_id: str | None = None,
        extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Append one event; the answer's ``ref`` is the evidence ref to cite in a write."""
    if source not in EPISODE_SOURCES:
        raise InvalidRequest(f"source {source!r} is not one of {', '.join(EPISODE_SOURCES)}", field="source",
                             code="schema")
    if not isinstance(content, str) or not content.strip():
        raise InvalidRequest("content is empty", field="content", code="empty_text")
    store, path = _resolve(ws, episode_id)
    found: list[Finding] = []
    # Redacted before the cap, so neither the kept text nor the sha256 of the whole derives from a secret.
    capped = cap_content(scrub(content, found), _max_chars(ws))
    extra = scrub(extra, found) if extra else None

    def make_row(seq: int) -> dict[str, Any]:
        row: dict[str, Any] = {"seq": seq, "ts": utc_now(), "source": source, **capped}
        if extra:
            row.update({k: v for k, v in extra.items() if k not in row})
        return row

    row = store.append_episode(path, make_row)
    ep = path.stem
    answer: dict[str, Any] = {"ok": True, "episode": ep, "seq": row["seq"], "ref": ref(ep, row["seq"])}
    if capped.get("truncated"):
        answer["truncated"] = True
        answer["sha256"] = capped["sha256"]
    if found:
        answer["redacted"] = _redacted_note(found)
    return answer


def end(ws: Workspace, *, outcome: str | None = None, episode_id: str | None = None) -> dict[str, Any]:
    """Close an episode with its outcome; it is no longer the current one."""
    store, path = _resolve(ws, episode_id)
    found: list[Finding] = []
    closing = {"ended": utc_now(), "outcome": scrub(outcome or "", found)}
    store.append_episode(path, lambda _seq: closing)
    if current_id(store) == path.stem:
        _set_current(store, None)
    store.record_episode(path, f"memstore: episode {path.stem[:10]} ended")
    _, events, _ = read_rows(path)
    answer = {"ok": True, "episode": path.stem, "events": len(events), "outcome": closing["outcome"],
              "path": store.display_path(store.relpath(path))}
    if found:
        answer["redacted"] = _redacted_note(found)
    return answer


def show(ws: Workspace, episode_id: str | None = None) -> dict[str, Any]:
    store, path = _resolve(ws, episode_id)
    header, events, ended = read_rows(path)
    return {"ok": True, "episode": path.stem, "header": header, "events": events, "ended": ended,
            "current": current_id(store) == path.stem, "path": store.display_path(store.relpath(path))}


def list_episodes(ws: Workspace, *, limit: int | None = None) -> dict[str, Any]:
    """Every episode in view, newest first (ULIDs sort by start time)."""
    items: list[dict[str, Any]] = []
    for store in ws.stores():
        cur = current_id(store)
        for base, local in ((store.root / "episodes", False), (store.local_dir / "episodes", True)):
            if not base.is_dir():
                continue
            for path in base.glob("*/*.jsonl"):
                header, events, ended = read_rows(path)
                items.append({"episode": path.stem, "scope": store.scope, "agent": header.get("agent"),
                              "task": header.get("task"), "started": header.get("started"),
                              "events": len(events), "ended": ended.get("ended") if ended else None,
                              "outcome": ended.get("outcome") if ended else None, "current": path.stem == cur,
                              "local_only": local, "path": store.display_path(store.relpath(path))})
    items.sort(key=lambda e: e["episode"], reverse=True)
    total = len(items)
    return {"ok": True, "count": total, "episodes": items[:limit] if limit else items}


# -- logging done on behalf of other verbs ---------------------------------------------------------
def log_read(ws: Workspace, request: dict[str, Any], answer: dict[str, Any], episode_id: str | None = None) -> None:
    """Record a read in the episode named, else the current one (source ``memstore``: the query
    and the ids returned), so ``reflect`` knows which memories to vote on. Never fails the read
    it describes."""
    with contextlib.suppress(Exception):
        store = episode_store(ws)
        if not episode_id and (not store.exists() or current_id(store) is None):
            return
        results = answer.get("results") or []
        shown = ", ".join(f"{r['kind']} {r['id'][:10]}" for r in results[:10]) or "no result"
        content = f"read ({request.get('mode', 'targeted')}) {json.dumps(request.get('query', ''))} -> {shown}"
        log(ws, "memstore", content, episode_id=episode_id or None, extra={
            "op": "read", "query": request.get("query", ""), "mode": request.get("mode", "targeted"),
            "results": [r["id"] for r in results],
            # the problem the read served: reflect's vote templates carry it, so votes land in
            # that problem's context rather than the context-free pool
            **({"problem_id": request["problem_id"]} if isinstance(request.get("problem_id"), str) else {}),
        })


def log_change(ws: Workspace, answer: dict[str, Any], request: dict[str, Any],
               episode_id: str | None = None) -> None:
    """Record a committed write or update (a vote, an archive, a link) in the episode named, else
    the current one, so the session's log holds what it changed. Never fails the call it describes."""
    # a dry run wrote nothing; a write answers "commit" or, in review mode, "review"
    if not answer.get("ok") or answer.get("mode") == "dry_run":
        return
    with contextlib.suppress(Exception):
        store = episode_store(ws)
        if not episode_id and (not store.exists() or current_id(store) is None):
            return
        if "kind" in answer:  # a write
            extra: dict[str, Any] = {"op": "write", "id": answer["id"], "kind": answer["kind"]}
            links = (request.get("memory") or {}).get("links") or {}
            if isinstance(links.get("problem_id"), str):
                extra["problem_id"] = links["problem_id"]
            content = f"wrote {answer['kind']} {answer['id'][:10]}"
        else:
            kind = str(request.get("type"))
            extra = {"op": "vote" if kind == "utility_vote" else kind, "id": answer.get("id"),
                     "memory_id": request.get("memory_id")}
            if kind == "utility_vote":
                extra["vote"] = request.get("vote")
                if isinstance(request.get("problem_id"), str):
                    extra["problem_id"] = request["problem_id"]
            content = f"{extra['op']} {str(request.get('memory_id') or '')[:10]}".rstrip() + (
                f" {request.get('vote'):+g}" if kind == "utility_vote" else "")
        log(ws, "memstore", content, episode_id=episode_id or None, extra=extra)


def session_id(ws: Workspace, episode_id: str | None = None) -> str | None:
    """The full id of the episode a call belongs to (the one named, else the current one), or None."""
    with contextlib.suppress(InvalidRequest, NotFound):
        return _resolve(ws, episode_id)[1].stem
    return None


def agent_of(ws: Workspace, episode_id: str | None = None) -> str | None:
    """The agent named by the episode a call belongs to, for the ``author`` of what it writes;
    None without an episode or when it named none ("unknown", "git")."""
    with contextlib.suppress(InvalidRequest, NotFound):
        # the header is the first row; episode_rows reads no symlink and no overlong line
        header = next(episode_rows(_resolve(ws, episode_id)[1]), {})
        agent = header.get("agent")
        # A header is a line of a file (an episode may arrive through git): only a plausible
        # name is taken, as long as a write's own `author` may be.
        if (isinstance(agent, str) and 0 < len(agent.strip()) <= MAX_AGENT_CHARS and agent not in ("unknown", "git")
                and bad_char({"agent": agent}) is None):
            return agent.strip()
    return None


def git_episode(ws: Workspace, named: str | None = None) -> tuple[Store, str]:
    """The episode git events go to: the one named (if open), else the current one, else a
    per-day ``git`` episode.

    The per-day episode is always local-only: git already records commits, and a committed
    log that grows on every commit would leave the work tree dirty after each one."""
    store = episode_store(ws)
    if named:
        with contextlib.suppress(InvalidRequest, NotFound, OSError):
            named_store, path = find_episode(ws, named)
            if not episode_tail(path)[1]:
                return named_store, path.stem
    cur = current_id(store)
    if cur is not None and store.episode_path(cur) is not None:
        return store, cur
    day = utc_now()[:10]
    state = store._writable(store.local_dir / GIT_DAY_FILE)
    with contextlib.suppress(OSError, ValueError):
        saved_day, saved_id = state.read_text(encoding="utf-8").split()
        if saved_day == day and store.episode_path(saved_id) is not None:
            return store, saved_id
    episode_id = ids.new_id()
    name = store.worktree.name if store.worktree is not None else None
    store.create_episode({"episode": episode_id, "repo": name, "agent": "git", "task": f"git activity {day}",
                          "started": utc_now()}, local=True)
    atomic_write(state, f"{day} {episode_id}\n")
    return store, episode_id



def default_author(ws: Workspace, episode_id: str | None = None) -> str | None:
    """Who a write or vote is by when the request names no one (and MEMSTORE_AUTHOR is unset):
    the agent of the episode the call belongs to, else ``git config user.name``."""
    agent = agent_of(ws, episode_id)
    if agent:
        return agent
    store = episode_store(ws)
    where = store.worktree if store.worktree is not None else store.root
    return gitops.user_name(where) if where.is_dir() else None
