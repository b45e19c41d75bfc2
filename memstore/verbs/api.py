"""The library API: write, update, show, list (and read, via retrieve). The CLI, the daemon and
MCP are thin layers over these functions; each takes a request dict and returns an answer dict."""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import Conflict, InvalidFile, InvalidRequest, MemstoreError, NoStore, SemanticError
from ..errors import IntegrityError as LinkError
from ..read.scopeview import ScopeView, scope_view
from ..store import ids
from ..store.disk import SHARED_PREFIX, Store, event_from_file, memory_from_file
from ..store.episodes import default_author
from ..store.files import read_untrusted
from ..store.graph import Graph, LinkIndex, build_graph, needs_review
from ..store.model import KIND_DIRS, Event, Memory, utc_now
from ..store.relations import relation_lists
from ..store.trust import CONTENT_TRUST
from ..store.validate import (
    check_chars,
    check_evidence_exists,
    check_schema,
    check_secrets,
    check_write_semantics,
    parse_refs,
    resolve_link,
    resolve_relations,
    resolve_write_links,
)
from ..store.workspace import Workspace, view_order
from .answers import ListAnswer, ListedMemory, ShowAnswer, UpdateAnswer, WriteAnswer

_A = TypeVar("_A")

DEFAULT_AUTHOR = "unknown"
# How far from now the time in an id a caller fixes may lie (``new_id``): the id is made just
# before a write's first attempt, and its retry follows within the client's write timeout
# (120 s). An id outside this window is refused.
FIXED_ID_PAST_MS = 3600 * 1000
FIXED_ID_AHEAD_MS = 60 * 1000


def _target_store(ws: Workspace, scope: str, *, commit: bool) -> Store:
    store = ws.store(scope)
    store.refuse_write()  # a shared store: before anything is judged or created
    if not store.exists():
        if not commit:
            return store
        # The global store is created on first use (SPEC §2); a repo store too, so an agent's
        # first write in a repo just works and shows up in `git status` for review.
        store.init()
    return store


def history(ws: Workspace, scopes: list[str] | None = None) -> tuple[dict[str, Memory], list[Event]]:
    """Every memory and event of the stores in scope (the immutable history links derive from)."""
    memories: dict[str, Memory] = {}
    events: list[Event] = []
    for scope in view_order(scopes or ws.scopes(include_shared=True)):
        cat = ws.catalog(scope)
        memories.update(cat.memories)
        events.extend(cat.events.values())
    return memories, events


def combined_graph(ws: Workspace, scopes: list[str] | None = None) -> tuple[dict[str, Memory], Graph]:
    """The memories of the stores in scope (read only) and their link/utility graph."""
    if scopes is None or scopes == ws.scopes(include_shared=True):
        view = scope_links(ws)
        return view.memories, view.graph
    memories, events = history(ws, scopes)
    return memories, build_graph(memories, events)


def scope_links(ws: Workspace) -> ScopeView:
    """Every store's records and their graph, as reads see them: a long-lived process keeps the
    view and applies each change to it instead of rebuilding it (~150 ms at 100k memories)."""
    return scope_view(ws.read_cache, [ws.catalog(scope) for scope in view_order(ws.scopes(include_shared=True))])


# -- write ------------------------------------------------------------------------------------
def write(ws: Workspace, request: dict[str, Any], *, author: str | None = None,
          new_id: str | None = None) -> WriteAnswer:
    """Validate and store one new memory. ``mode: dry_run`` runs every gate and writes nothing.

    ``new_id``: the id the memory takes, fixed by the caller before its first attempt, so that a
    retry (the daemon died before it answered) is the same write: finding the file that attempt
    left, it records it in git if it was not yet and answers as that attempt would have; it
    never writes a second copy, and never overwrites or claims a file of other content."""
    check_schema("write", request)
    fixed = _fixed_id(new_id) if new_id is not None else None
    req = copy.deepcopy(request)
    mem_req = req["memory"]
    mode = req.get("mode", "commit")
    commit = mode == "commit"
    shared = mem_req["scope"].removeprefix(SHARED_PREFIX) if mem_req["scope"].startswith(SHARED_PREFIX) else None
    if shared is not None:
        from .promote import attached_url

        shared_url = attached_url(ws, shared, "memory.scope")  # an unknown store before any other gate
    refs = check_write_semantics(mem_req, ws.config)
    writer = mem_req.get("author") or author or default_author(ws) or DEFAULT_AUTHOR  # as the CLI's
    check_chars({"author": writer})  # MEMSTORE_AUTHOR and the MCP client's name are stored too
    check_secrets({"author": writer})
    # Integrity gates run before the target store is created on first use, so a refused write
    # leaves no trace (not even an empty global store). They read immutable files: no lock needed.
    links = resolve_write_links(ws, mem_req)
    evidence = check_evidence_exists(ws, refs, mem_req["scope"], "memory.evidence_refs")
    if shared is not None:
        from .promote import write_shared

        mem = Memory(id=fixed or ids.new_id(), kind=mem_req["kind"], text=mem_req["text"].strip(),
                     scope=mem_req["scope"], created=utc_now(), author=writer, confidence=mem_req.get("confidence"),
                     rationale=(mem_req.get("rationale") or "").strip(), links=links, evidence=evidence,
                     tags=list(dict.fromkeys(mem_req.get("tags") or [])))
        answer = write_shared(ws, mem, shared, shared_url, dry_run=not commit)
        if needs_review(mem, ws.config):
            answer["review"] = True
        return answer
    store = _target_store(ws, mem_req["scope"], commit=commit)
    # A global memory reaches every repo of this user: in review mode (the user's own setting,
    # never a cloned repo's) it waits, proposed, until the user approves it (`memstore
    # approve`); a repo memory is approved in its pull request.
    proposed = mem_req["scope"] == "global" and ws.global_write_mode == "review"

    def gated() -> WriteAnswer:
        mem = Memory(
            id=fixed or ids.new_id(),
            kind=mem_req["kind"],
            text=mem_req["text"].strip(),
            scope=mem_req["scope"],
            created=utc_now(),
            author=writer,
            confidence=mem_req.get("confidence"),
            rationale=(mem_req.get("rationale") or "").strip(),
            links=links,
            evidence=evidence,
            tags=list(dict.fromkeys(mem_req.get("tags") or [])),
        )
        earlier = _earlier_memory(ws, store, mem, proposed) if fixed and commit else None
        answer: WriteAnswer = {"ok": True, "id": mem.id, "kind": mem.kind, "scope": mem.scope}
        if not req.get("allow_duplicate"):
            # Redundancy and contradiction are the agent's call: it is shown what is close
            # (a near-exact repeat alone is refused) and reinforces, supersedes or links.
            from ..read.dedupe import judge

            answer["similar"] = judge(ws, mem)
        if needs_review(mem, ws.config):
            answer["review"] = True
        if commit and proposed:
            from .pending import propose

            answer["path"] = str(earlier) if earlier is not None else propose(store, mem)
            answer["pending"] = True
        elif commit:
            path = store.create_memory(mem) if earlier is None else store.record_memory_again(mem, earlier)
            ws.wrote(store, path)
            answer["path"] = store.display_path(store.relpath(path))
        else:
            answer["path"] = store.display_path(store.relpath(store.memory_path(mem)))
            answer["content"] = store.render_memory(mem)
            if proposed:
                answer["pending"] = True
        answer["mode"] = _done_mode(ws, mem.scope) if commit else mode
        return answer

    return _locked(ws, store, commit, gated)


# -- update -----------------------------------------------------------------------------------
def update(ws: Workspace, request: dict[str, Any], *, author: str | None = None,
           new_id: str | None = None) -> UpdateAnswer:
    """Append one update event: a utility vote, an archive toggle or a fact-update link.
    ``new_id``: the event's id, fixed by the caller, as for ``write``: a retry answers with the
    event its first attempt wrote."""
    check_schema("update", request)
    fixed = _fixed_id(new_id) if new_id is not None else None
    req = copy.deepcopy(request)
    kind = req["type"]
    mode = req.get("mode", "commit")
    refs_raw = req.get("evidence_refs") or []
    if kind in ("archive", "fact_update_link", "link") and not refs_raw:
        raise SemanticError(f"{kind} needs at least one evidence ref", field="evidence_refs", code="missing_evidence")
    writer = req.get("author") or author or default_author(ws) or DEFAULT_AUTHOR
    stored = {"rationale": req.get("rationale") or "", "author": writer,
              **{f"evidence_refs[{i}]": r for i, r in enumerate(refs_raw)}}
    check_chars(stored)
    refs = parse_refs(refs_raw, "evidence_refs")
    check_secrets(stored)
    ev = Event(id=fixed or ids.new_id(), type=kind, created=utc_now(), author=writer,
               confidence=req.get("confidence"), rationale=(req.get("rationale") or "").strip())
    involved: list[Memory] = []
    if kind in ("utility_vote", "archive"):
        target = ws.find(req["memory_id"], field_name="memory_id")
        ev.memory = target.id
        involved.append(target)
        if kind == "utility_vote":
            ev.vote = float(req["vote"])
            if req.get("problem_id"):
                # A vote on a global memory lives in the global store, which never names a repo memory.
                problem = resolve_link(ws, req["problem_id"], target.scope, "problem_id", ("problem",))
                ev.problem = problem.id
                involved.append(problem)
        else:
            ev.archived = bool(req["archived"])
    elif kind == "link":
        # A typed link on a committed memory is an event: the memory's file never changes.
        source = ws.find(req["memory_id"], field_name="memory_id")
        relations = scope_links(ws).graph.relations
        ((ev.relation, ev.target),) = resolve_relations(ws, [req["relation"]], source.scope, "relation",
                                                        relations.get(source.id, []), source.id, relations)
        ev.memory = source.id
        involved.append(source)
    else:
        old = resolve_link(ws, req["old_fact_id"], "repo", "old_fact_id", ("fact",))
        change = resolve_link(ws, req["change_id"], old.scope, "change_id", ("change",))
        new = resolve_link(ws, req["new_fact_id"], old.scope, "new_fact_id", ("fact",))
        if old.id == new.id:
            raise LinkError("old_fact_id and new_fact_id are the same fact", field="new_fact_id", code="bad_link")
        ev.old_fact, ev.change, ev.new_fact = old.id, change.id, new.id
        involved += [old, change, new]
    # An event lives in the store of the memory it acts on, and acts only there (graph.acts_on):
    # a repo's events never change a global memory, even for reads in that repo.
    scope = ev.scope = involved[0].scope
    commit = mode == "commit"
    ev.evidence = check_evidence_exists(ws, refs, scope, "evidence_refs")
    store = _target_store(ws, scope, commit=commit)

    def gated() -> UpdateAnswer:
        earlier = _earlier_event(ws, store, ev) if fixed and commit else None
        # A retry's event is in the history already: its effect is the one it had, as first answered.
        links = scope_links(ws).links
        answer: UpdateAnswer = {"ok": True, "id": ev.id, "type": kind, "scope": scope,
                                "effect": (_effect(links, ev, ws.config.half_life_days) if earlier is None
                                           else _effect_again(links, ev, ws.config.half_life_days))}
        if commit:
            path = store.create_event(ev) if earlier is None else store.record_event_again(ev, earlier)
            ws.wrote(store, path)
            answer["path"] = store.display_path(store.relpath(path))
        else:
            answer["path"] = store.display_path(f"events/{ev.id}.yaml")
            answer["content"] = store.render_event(ev)
        # The global store commits every event at once (no proposal); a repo's waits for its PR.
        answer["mode"] = _done_mode(ws, scope) if commit and scope == "repo" else mode
        return answer

    return _locked(ws, store, commit, gated)


def _done_mode(ws: Workspace, scope: str) -> str:
    """The ``mode`` a write that went through answers: ``review`` while a person still approves
    it (a repo file staged for its pull request, a global memory proposed until ``memstore
    approve``), ``commit`` in autonomous mode. Review mode answering "commit" read as committed."""
    write_mode = ws.global_write_mode if scope == "global" else ws.config.write_mode
    return "review" if write_mode == "review" else "commit"


def _locked(ws: Workspace, store: Store, commit: bool, gated: Callable[[], _A]) -> _A:
    """Run the gates and the write under the store's write lock when writing: the duplicate
    check and the file must see the same store (a dry run takes no lock)."""
    if commit:
        with store.write_lock(ws.write_wait):
            return gated()
    return gated()


def _fixed_id(value: object) -> str:
    """A caller's id for a new memory or event: a ULID made within the last hour. It may come
    over the daemon's socket, so it is checked like any input before it names a file."""
    if not ids.is_id(value):
        raise InvalidRequest("the new id must be a 26-character lowercase ULID", field="id", code="bad_id")
    assert isinstance(value, str)
    age = time.time() * 1000 - ids.id_time_ms(value)
    if not -FIXED_ID_AHEAD_MS <= age <= FIXED_ID_PAST_MS:
        raise InvalidRequest(f"the new id {value} was not made in the last hour", field="id", code="bad_id",
                             hint="leave the id out: memstore makes one")
    return value


def _id_taken(new_id: str, path: Path, why: str) -> Conflict:
    return Conflict(f"the id {new_id} is taken: {path} {why}; nothing was written", field="id", code="id_taken",
                    hint="leave the id out (memstore makes one), or give a new one")


def _earlier_memory(ws: Workspace, store: Store, mem: Memory, proposed: bool) -> Path | None:
    """The file an interrupted attempt of this very write left under its fixed id (same store,
    kind, text and fields; only the time differs), or None when the id names no file yet. A
    file of that id anywhere else, or of other content, is refused (``id_taken``): a fixed id
    never overwrites a memory or answers for one it did not write. Called under the write lock."""
    from .pending import PENDING_DIRNAME

    expected = (store.local_dir / PENDING_DIRNAME) if proposed else store.root / KIND_DIRS[mem.kind]
    places = [s.root / d for s in ws.stores() for d in KIND_DIRS.values()]
    places += [s.local_dir / PENDING_DIRNAME for s in ws.stores()]
    found: Path | None = None
    for folder in dict.fromkeys([expected, *places]):
        for path in sorted(folder.glob(f"{mem.id}-*.md")) if folder.is_dir() else []:
            if folder != expected or found is not None:
                raise _id_taken(mem.id, path, "holds another memory")
            found = path
    if found is not None:
        mem.created = _made_by_this(store, found, mem, memory_from_file, store.render_memory, "memory")
    return found


def _earlier_event(ws: Workspace, store: Store, ev: Event) -> Path | None:
    """``_earlier_memory`` for an event: its file under the fixed id, or None."""
    found: Path | None = None
    for other in ws.stores():
        path = other.root / "events" / f"{ev.id}.yaml"
        if os.path.lexists(path):
            if other.root != store.root:
                raise _id_taken(ev.id, path, "holds another event")
            found = path
    if found is not None:
        ev.created = _made_by_this(store, found, ev, event_from_file, store.render_event, "event")
    return found


def _made_by_this(store: Store, found: Path, new: Any, parse: Callable[[str, str, str], Any],
                  render: Callable[[Any], str], what: str) -> Any:
    """The ``created`` time of the file an interrupted attempt left under a fixed id, when the
    file is exactly what this write renders with that time (else ``id_taken``: a fixed id never
    answers for a file it did not write)."""
    try:
        text = read_untrusted(found, store.max_file_bytes)
        before = parse(found.relative_to(store.root).as_posix(), text, store.scope).created
    except (InvalidFile, OSError, ValueError) as exc:
        raise _id_taken(new.id, found, f"is not a {what} this call made") from exc
    if render(dataclasses.replace(new, created=before)) != text:
        raise _id_taken(new.id, found, f"holds another {what}")
    return before


def _effect_again(links: LinkIndex, ev: Event, half_life_days: float) -> dict[str, Any]:
    """The effect a retried update's event had when its first attempt wrote it."""
    with links.without(ev.id):
        return _effect(links, ev, half_life_days)


def _effect(links: LinkIndex, ev: Event, half_life_days: float) -> dict[str, Any]:
    """What the event changes, computed by projecting the history with the event added."""
    g = links.graph
    if ev.type == "utility_vote" and ev.memory:
        before = g.utility_global(ev.memory, half_life_days)
        with links.trying(ev):
            after = g.utility_global(ev.memory, half_life_days)
            return {"memory_id": ev.memory,
                    "utility": {"before": round(before, 4), "after": round(after, 4), "votes": g.vote_count(ev.memory)}}
    if ev.type == "archive" and ev.memory:
        with links.trying(ev):
            return {"memory_id": ev.memory, "archived": ev.memory in g.archived}
    if ev.type == "link" and ev.memory:
        with links.trying(ev):
            return {"memory_id": ev.memory, "relations": [{"type": t, "id": i} for t, i in g.relations[ev.memory]]}
    assert ev.old_fact is not None
    head_before = g.head(ev.old_fact)
    with links.trying(ev):
        return {"old_fact_id": ev.old_fact, "head_before": head_before, "head_after": g.head(ev.old_fact)}


# -- show / list ------------------------------------------------------------------------------
def describe(ws: Workspace, mem: Memory, graph: Graph, memories: dict[str, Memory]) -> dict[str, Any]:
    store = ws.store(mem.scope)
    data = mem.to_json()
    data["path"] = store.display_path(mem.path)
    attempts = graph.attempts.get(mem.id, [])
    data["derived"] = {
        "solutions": [a for a in attempts if memories[a].kind == "solution"],
        "failed_tactics": [a for a in attempts if memories[a].kind == "failed_tactic"],
        "changes": list(graph.changes_for.get(mem.id, [])),
        "superseded_by": graph.superseded_by.get(mem.id),
        "head": graph.head(mem.id) if mem.kind == "fact" else None,
        "archived": mem.id in graph.archived,
        "utility": {"global": round(graph.utility_global(mem.id, ws.config.half_life_days), 4),
                    "votes": graph.vote_count(mem.id)},
        "relations": relation_lists(mem.id, graph, memories, active_only=False),
    }
    if mem.id_derived:
        data["derived"]["id_is_provisional"] = True
    return data


def show(ws: Workspace, memory_id: str) -> ShowAnswer:
    mem = ws.find(memory_id, field_name="id")
    memories, graph = combined_graph(ws)
    data = describe(ws, mem, graph, memories)
    if mem.id in graph.archived:
        # Who archived it and why: the latest archive event (the one in force).
        events = [e for e in history(ws, [mem.scope])[1] if e.type == "archive" and e.memory == mem.id]
        last = max(events, key=lambda e: (e.created, e.id), default=None)
        if last is not None:
            data["derived"]["archive"] = {"event": last.id, "by": last.author, "at": last.created,
                                          "why": last.rationale, "evidence": list(last.evidence)}
    return {"ok": True, "content_trust": CONTENT_TRUST, "memory": data}


def list_memories(
    ws: Workspace, *, kind: str | None = None, scope: str | None = None, include_archived: bool = False,
    limit: int | None = None,
) -> ListAnswer:
    scopes = [scope] if scope else ws.scopes()
    if scope and not ws.store(scope).exists():
        raise NoStore(f"no {scope} store at {ws.store(scope).root}", hint="run `memstore init`")
    memories, graph = combined_graph(ws, scopes)
    items: list[ListedMemory] = []
    for mem in sorted(memories.values(), key=lambda m: (m.created, m.id), reverse=True):
        if kind and mem.kind != kind:
            continue
        archived = mem.id in graph.archived
        if archived and not include_archived:
            continue
        items.append({
            "id": mem.id, "kind": mem.kind, "scope": mem.scope, "created": mem.created, "author": mem.author,
            "text": mem.text, "tags": mem.tags, "archived": archived,
            "path": ws.store(mem.scope).display_path(mem.path),
        })
    # A clone may bring any number of junk files: the first few are listed, the rest counted.
    shown = ws.config.cap("max_listed_invalid", 50)
    invalid: list[dict[str, str]] = []
    invalid_count = 0
    for sc in scopes:
        cat = ws.catalog(sc, refresh=False)
        invalid_count += len(cat.invalid) + cat.over_cap
        for p in sorted(cat.invalid)[:max(0, shown - len(invalid))]:
            invalid.append({"path": ws.store(sc).display_path(p), "error": cat.invalid[p]})
        if cat.over_cap and len(invalid) < shown:
            invalid.append({"path": ws.store(sc).display_path("."),
                            "error": f"{cat.over_cap} files past the cap of {cat.max_files} per store were not read"})
    total = len(items)
    if limit is not None:
        items = items[:limit]
    return {"ok": True, "content_trust": CONTENT_TRUST, "count": total, "memories": items, "invalid": invalid,
            "invalid_count": invalid_count}


def init(ws: Workspace, *, global_store: bool = False) -> dict[str, Any]:
    store = ws.global_ if global_store else ws.store("repo")
    if not global_store and store.worktree is None:
        raise InvalidRequest(f"{store.root.parent} is not inside a git repository", code="not_a_repo",
                             hint="run `git init` first, or use `memstore init --global`")
    created = store.init()
    return {"ok": True, "scope": store.scope, "root": str(store.root), "created": created}


# -- votes ------------------------------------------------------------------------------------
MAX_VOTES = 200  # one reflection's votes; a longer list is not one session's


def vote(ws: Workspace, request: Any, *, author: str | None = None, episode: str | None = None) -> dict[str, Any]:
    """Several utility votes at once (reflect's ``vote`` requests, filled in): ``{"votes": [...]}``
    or the list itself. Every vote runs every gate of ``update`` first, as a dry run; one refused
    refuses them all and nothing is written. A vote left ``null`` is skipped (it did not matter).
    Each vote recorded is logged to the episode named, else the current one."""
    from ..store.episodes import log_change

    votes = request.get("votes") if isinstance(request, dict) else request
    if not isinstance(votes, list):
        raise InvalidRequest('expected {"votes": [...]} or a list of utility_vote requests', field="votes",
                             code="schema")
    if len(votes) > MAX_VOTES:
        raise InvalidRequest(f"{len(votes)} votes; at most {MAX_VOTES} in one call", field="votes", code="too_large")
    chosen: list[tuple[int, dict[str, Any]]] = []
    skipped: list[int] = []
    for i, item in enumerate(votes):
        if not isinstance(item, dict):
            raise InvalidRequest(f"votes[{i}] is not an object", field=f"votes[{i}]", code="schema")
        if item.get("type", "utility_vote") != "utility_vote" or item.get("op", "update") != "update":
            raise InvalidRequest(f"votes[{i}] is not a utility_vote (archive and links go through `update`)",
                                 field=f"votes[{i}].type", code="schema")
        if item.get("vote") is None:
            skipped.append(i)
            continue
        req = {k: v for k, v in item.items() if k != "mode" and v is not None}
        chosen.append((i, {**req, "op": "update", "type": "utility_vote"}))
    for i, req in chosen:  # all gates, nothing written
        try:
            update(ws, {**req, "mode": "dry_run"}, author=author)
        except MemstoreError as exc:
            exc.message = f"votes[{i}]: {exc.message}"
            exc.args = (exc.message,)
            exc.field = f"votes[{i}].{exc.field}" if exc.field else f"votes[{i}]"
            raise
    recorded: list[dict[str, Any]] = []
    for i, req in chosen:
        answer = update(ws, req, author=author)
        log_change(ws, dict(answer), req, episode)
        recorded.append({"index": i, "id": answer["id"], "memory_id": req["memory_id"], "vote": req["vote"],
                         "problem_id": req.get("problem_id"), "effect": answer["effect"], "path": answer.get("path")})
    return {"ok": True, "recorded": recorded, "count": len(recorded), "skipped": skipped}
