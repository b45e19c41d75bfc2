"""Answering one forwarded request in the daemon: a client's argv (``cli``) or a verb with its
request, run on the warm workspace it belongs to with exactly the library functions the
in-process CLI calls, so both paths give the same answers.

This is the daemon's error boundary (a MemstoreError keeps its code, anything else is logged
and answered as ``unexpected``) and where a request meets the daemon's state: a write is told
to the watcher at once, so the next read sees it; a read that meets memories without a vector
leaves them to the background embedding, started once the answer is sent.
"""

from __future__ import annotations

import functools
import logging
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import MemstoreError, error_answer
from .cliargs import ArgvError
from .daemon_stores import Entry, Workspaces
from .daemon_work import Background, after_reply
from .loadgc import LoadGC

log = logging.getLogger("memstore.surfaces.daemon")


class Requests:
    """Runs requests on the workspaces in ``stores``; ``work`` embeds what reads leave behind;
    ``gc`` pauses the collector while a workspace's first request loads it."""

    def __init__(self, stores: Workspaces, work: Background, gc: LoadGC) -> None:
        self._stores = stores
        self._work = work
        self._gc = gc

    def verb(self, verb: str, msg: dict[str, Any]) -> dict[str, Any]:
        """A forwarded verb (``client.FORWARDED_VERBS``) with its request as data."""
        from .cliargs import shared_write

        if verb == "write" and shared_write(msg.get("request")):
            return {"fallback": True}  # the client pushes it itself, with its own credentials
        answer, code = self._answer(verb, lambda: self._run(verb, msg))
        return {"answer": answer, "exit_code": code}

    def _answer(self, what: object, run: Callable[[], tuple[dict[str, Any], int]]) -> tuple[dict[str, Any], int]:
        """The daemon's one error boundary: a MemstoreError keeps its code, anything else is
        logged and answered as ``unexpected``; the daemon lives on."""
        try:
            return run()
        except ArgvError:
            raise  # not a failure: the client runs these arguments in-process
        except Exception as exc:
            if not isinstance(exc, MemstoreError):
                log.error("unexpected error on %s:\n%s", what, traceback.format_exc())
            return error_answer(exc)

    def cli(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Run a client's argv (``memstore.surfaces.entry``) and answer with the exact output the CLI
        would print in-process."""
        from ..store.workspace import require_store_dir
        from . import cliargs, output

        argv, stdin = msg.get("argv"), msg.get("stdin")
        if not isinstance(argv, list) or not all(isinstance(x, str) for x in argv):
            return {"fallback": True}
        src = cliargs.Inputs(cwd=Path(msg.get("cwd") or "/"), stdin=stdin if isinstance(stdin, str) else None)
        calls: list[cliargs.RemoteCall] = []

        def run() -> tuple[dict[str, Any], int]:
            call = cliargs.remote_call(argv, src)
            calls.append(call)
            require_store_dir(call.store, src.cwd, msg.get("env") or {})
            return self._run(call.verb, {**msg, "request": call.request, "args": call.args, "store": call.store})

        try:
            answer, code = self._answer(argv[:1], run)
        except ArgvError:
            return {"fallback": True}
        as_json = (calls[0].json_out if calls else "--json-out" in argv) or not msg.get("tty")
        if code:
            err, out = output.format_error(answer, as_json=as_json)
            return {"stdout": out, "stderr": err, "exit_code": code}
        render: output.Render = calls[0].render
        if calls[0].verb == "context":
            from . import render as renders

            render = renders.context
        colour = msg.get("color")
        text = output.format_answer(answer, as_json=as_json, render=render, tty=bool(msg.get("tty")),
                                    colour=colour if isinstance(colour, bool) else None)
        return {"stdout": text, "stderr": "", "exit_code": 0}

    def _run(self, verb: str, msg: dict[str, Any]) -> tuple[dict[str, Any], int]:
        entry = self._stores.entry_for(msg)
        if entry.loaded:
            return self._run_on(entry, verb, msg)
        self._gc.pause()
        try:
            return self._run_on(entry, verb, msg)
        finally:
            entry.loaded = True
            # Ahead of the background embedding this request may have asked for; the files a
            # partial first load left unread before that, while the collector is still paused.
            after_reply(self._gc.settle, first=True)
            after_reply(functools.partial(self._work.read_rest, entry), first=True)

    def _run_on(self, entry: Entry, verb: str, msg: dict[str, Any]) -> tuple[dict[str, Any], int]:
        from ..read.retrieve import read
        from ..verbs import api

        ws = entry.ws
        watcher = self._stores.watcher
        args = msg.get("args") or {}
        request = msg.get("request")
        env = msg.get("env") or {}
        episode = env.get("MEMSTORE_EPISODE") or None  # the client's, like MEMSTORE_AUTHOR
        # What a hook's payload names is looked up on disk before the workspace is taken: its
        # stores are shared with every repo (the global one), and a path slow to resolve must
        # hold up no other request.
        files = _touched(ws, args) if verb == "recall" else None
        with entry.using():
            if verb in ("read", "context"):
                # While the background embeds, a read answers at once (partial) rather than
                # spending its own second on a backlog it cannot finish.
                ws.embed_wait = 0.0 if self._work.embedding(entry) else entry.read_wait
                try:
                    if verb == "read":
                        return read(ws, request if isinstance(request, dict) else {}, episode=episode), 0
                    from ..verbs.guide import context

                    return context(ws, task=args.get("task"), limit=args.get("limit"), episode=episode), 0
                finally:
                    self._work.embed_after_reply(entry)
            if verb == "recall":  # an agent hook's per-prompt or per-file injection (agenthooks)
                from ..verbs.sessions import hook
                from .agenthooks import session_context

                ws.embed_wait = 0.0 if self._work.embedding(entry) else entry.read_wait
                try:
                    payload = args.get("payload")
                    payload = payload if isinstance(payload, dict) else {}
                    if args.get("event") == "session-start":
                        from .agenthooks import session_start_answer

                        return session_start_answer(ws, payload, str(args.get("agent") or "claude")), 0
                    return hook(ws, str(args.get("event")), payload, str(args.get("agent") or "claude"),
                                context_text=session_context, files=files), 0
                finally:
                    self._work.embed_after_reply(entry)
            if verb == "show":
                return api.show(ws, args.get("id")), 0
            if verb == "list":
                return api.list_memories(ws, kind=args.get("kind"), scope=args.get("scope"),
                                         include_archived=bool(args.get("all")), limit=args.get("limit")), 0
            from ..store.episodes import default_author

            author = env.get("MEMSTORE_AUTHOR") or default_author(ws, episode)
            try:
                # The client's id for this write (checked by the verb like any input): its
                # in-process retry, should this daemon die before answering, is the same write.
                new_id = msg.get("new_id")
                if verb == "write":
                    answer = api.write(ws, request if isinstance(request, dict) else {}, author=author, new_id=new_id)
                else:
                    answer = api.update(ws, request if isinstance(request, dict) else {}, author=author, new_id=new_id)
            except BaseException:
                watcher.bump(entry.roots())  # whatever happened, the next read walks
                raise
            finally:
                for root in entry.roots():
                    watcher.watch(root)
            from ..store.episodes import log_change

            log_change(ws, dict(answer), request if isinstance(request, dict) else {}, episode)
            # Our own write must be visible to the very next read, before inotify reports it:
            # by path, so that read re-reads one file rather than walking the store.
            written = _written(ws, answer)
            if written is None:
                watcher.bump(entry.roots())
            else:
                watcher.note(*written)
            return answer, 0


def _touched(ws: Any, args: dict[str, Any]) -> list[tuple[str, tuple[int, int] | None]] | None:
    """A file hook's files in the repo (``recall.touched_files``); None for another event."""
    from ..verbs.recall import payload_cwd, touched_files

    payload = args.get("payload")
    if args.get("event") != "file" or not isinstance(payload, dict):
        return None
    return touched_files(ws, payload, payload_cwd(payload))


def _written(ws: Any, answer: dict[str, Any]) -> tuple[Path, list[str]] | None:
    """(store root, [store-relative path]) of the file a committed write or update created."""
    if not answer.get("ok") or answer.get("mode") == "dry_run" or not answer.get("path"):
        return None
    try:
        store = ws.store(answer["scope"])
        path = Path(answer["path"])
        if not path.is_absolute():
            if store.worktree is None:
                return None
            path = store.worktree / path
        return store.root, [path.resolve().relative_to(store.root).as_posix()]
    except (ValueError, KeyError, OSError, MemstoreError):
        return None
