"""The command line: parse, build a request, call the library, hand the answer to ``output``.

This module is the single boundary where errors become exit codes. Heavy modules are imported
inside the verbs so ``memstore --help`` stays fast. A call the daemon can answer never gets
here: ``memstore.surfaces.entry`` sends its argv to the daemon, which runs ``cliargs.remote_call``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidRequest, MemstoreError, UsageError, error_answer
from .cliargs import FORWARDED, UsageParser, build_parser, forward_spec, render_of
from .wire import verb_of

if TYPE_CHECKING:
    from .output import Render

__all__ = ["build_parser", "main"]


def _episode() -> str | None:
    """The episode this call belongs to when the agent names it (MEMSTORE_EPISODE)."""
    return os.environ.get("MEMSTORE_EPISODE") or None


def _author(ws: Any) -> str | None:
    """Who writes when the request names no one: MEMSTORE_AUTHOR, else the episode's agent,
    else ``git config user.name``."""
    from ..store.episodes import default_author

    return os.environ.get("MEMSTORE_AUTHOR") or default_author(ws, _episode())


def _dispatch(a: argparse.Namespace, new_id: str | None = None) -> tuple[dict[str, Any], Render]:
    from ..store.workspace import open_workspace, require_store_dir
    from ..verbs import api
    from . import render

    req, args = forward_spec(a) if a.cmd in FORWARDED else (None, None)
    if a.cmd != "init":  # init creates the store; anything else in a missing one is a typo
        require_store_dir(a.store)
    ws = open_workspace(store_dir=a.store)
    from .progress import embed_progress, say

    # A read or reindex that embeds many memories says so, and so does the model's one-time
    # export, on stderr: the answer on stdout stays clean JSON.
    ws.progress = embed_progress(sys.stderr, announce=True)
    if a.cmd in EMBEDDING_VERBS:
        from ..index import embedder

        embedder.export_notice = say(sys.stderr)
    if a.cmd in FORWARDED:
        _autostart_config.append(ws.config)
    if a.cmd == "init":
        if a.remote is not None:
            if not a.global_store:
                raise UsageError("--remote is for the global store: memstore init --global --remote URL",
                                 hint="a repo's .memory/ travels with its code through the repo's own remote")
            from ..git.sync import init_global

            return init_global(ws, a.remote, Path.cwd()), render.sync
        return api.init(ws, global_store=a.global_store), None
    if a.cmd == "sync":
        from ..git.sync import sync

        return sync(ws, store_given=bool(a.store or os.environ.get("MEMSTORE_STORE")), keep=a.keep), render.sync
    if a.cmd in ("write", "create", "update"):
        from ..store.episodes import log_change

        verb = api.update if a.cmd == "update" else api.write
        answer = verb(ws, req or {}, author=_author(ws), new_id=new_id)
        log_change(ws, dict(answer), req or {}, _episode())  # the daemon logs what it answers
        return answer, render_of(a)
    if a.cmd == "read":
        from ..read.retrieve import read
        from . import client

        if client.autostarts(ws.config):
            # A daemon starts after this answer and embeds the rest (``serve --warm``): like a
            # read through it, this one waits at most daemon.read_wait_seconds for vectors.
            ws.embed_wait = ws.config.read_wait
        # This process exits after the answer. Loading a store makes ~13 long-lived objects a
        # memory, and the cyclic GC would rescan them each time they grow by a quarter (~0.15 s
        # of a first read at 10k memories, seconds at 100k): nothing it could free is worth that.
        gc.disable()
        answer = read(ws, req or {}, episode=_episode())
        if "partial" in answer and not a.store:
            _warm_dir.append(os.getcwd())
        return answer, "read"
    if a.cmd == "eval":
        from ..verbs.evaluate import evaluate

        return evaluate(ws, overrides=a.set or [], include_global=a.global_store), render.evaluation
    if a.cmd == "show":
        return api.show(ws, (args or {})["id"]), "show"
    if a.cmd == "history":
        from ..verbs.history import memory_history

        return memory_history(ws, a.id), render.history
    if a.cmd == "list":
        args = args or {}
        return api.list_memories(ws, kind=args["kind"], scope=args["scope"], include_archived=args["all"],
                                 limit=args["limit"]), "list"
    if a.cmd == "new":
        from ..verbs.newfile import new_memory_file

        return new_memory_file(ws, a.kind, a.scope), None
    if a.cmd == "import":
        if a.from_format:
            from ..verbs.importers import import_notes

            return import_notes(ws, a.file, a.from_format, scope=a.scope, dry_run=a.dry_run,
                                author=_author(ws)), "import"
        from ..verbs.bulk import import_jsonl
        from .progress import count_progress

        return import_jsonl(ws, a.file, dry_run=a.dry_run, author=_author(ws),
                            progress=count_progress(sys.stderr, "importing", " lines")), "import"
    if a.cmd == "check":
        from ..verbs.settings import check

        report = check(ws, staged=a.staged, base=a.base, fix=a.fix, include_global=a.global_store)
        return report.to_json(), "check"
    if a.cmd in ("attach", "detach", "attached"):
        from ..verbs import shared

        if a.cmd == "attach":
            return shared.attach(ws, a.url, a.name, Path.cwd()), None
        return (shared.detach(ws, a.name) if a.cmd == "detach" else shared.attached(ws)), None
    if a.cmd == "promote":
        from ..verbs.promote import promote

        return promote(ws, a.id, a.to, Path.cwd()), None
    if a.cmd in ("pending", "approve", "drop"):
        from ..verbs import pending

        if a.cmd == "pending":
            return pending.list_pending(ws), None
        return (pending.approve if a.cmd == "approve" else pending.drop)(ws, a.id), None
    if a.cmd == "reindex":
        from ..read.indexes import reindex

        return reindex(ws, full=a.full), None
    if a.cmd == "integrate":
        from ..verbs.integrate import integrate

        return integrate(ws, a.agent, remove=a.remove, hooks_path_ok=a.hooks_path_ok), render.integrate
    from . import agentcmds

    if a.cmd in agentcmds.COMMANDS:
        return agentcmds.dispatch(a, ws, os.environ.get("MEMSTORE_AUTHOR") or None, _episode())
    raise InvalidRequest(f"unknown command {a.cmd!r}", code="usage")


# Commands that may load the model (a read, a write's duplicate check, an import, a rebuild).
EMBEDDING_VERBS = ("read", "write", "create", "context", "reindex", "import", "reflect", "snapshot", "review")

_autostart_config: list[Any] = []  # the Config an in-process forwardable verb ran with
_warm_dir: list[str] = []  # where a read answered partially: the daemon started next embeds the rest


def _maybe_autostart(a: argparse.Namespace) -> None:
    """After answering in-process, start the daemon in the background so the next call is fast
    (``daemon.autostart`` config; MEMSTORE_DAEMON=0 turns it off)."""
    if a.cmd not in FORWARDED or not _autostart_config:
        return
    from . import client

    config = _autostart_config.pop()
    if client.autostarts(config):
        client.autostart(config, warm=_warm_dir.pop() if _warm_dir else None)


def _daemon_command(a: argparse.Namespace) -> int:
    from . import client, output

    if a.cmd == "serve":
        from .daemon import serve

        return serve(a.idle, warm=a.warm)
    if a.action == "status":
        answer = client.status()
    elif a.action == "stop":
        answer = client.stop()
    elif a.action == "start":  # one is enough: a running daemon of this version is left as it is
        answer = client.start()
    else:
        stopped = client.stop()
        client.spawn()
        answer = {"ok": client.wait_until_up(), "was_running": stopped.get("was_running", False)}
    if a.action in ("start", "restart") and answer["ok"]:
        answer.update({k: v for k, v in client.status().items() if k not in answer})
    output.emit(answer, as_json=True)
    return 0 if answer.get("ok") else 1


def main(argv: list[str] | None = None, *, new_id: str | None = None) -> int:
    """Run one command in this process (``memstore.surfaces.entry`` has already offered it to the daemon).
    ``new_id``: the id entry fixed for a write or update before it offered it (``api.write``).

    The CLI's one error boundary: a MemstoreError keeps its code and exit status, anything else
    is ``unexpected`` (exit 1), and bad input never shows a traceback."""
    from . import output

    args = sys.argv[1:] if argv is None else argv
    # How an error is shown: JSON when asked or piped, decided again once the arguments parse.
    shown = {"json": output.want_json("--json-out" in args)}
    try:
        return _run(args, shown, new_id)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not isinstance(exc, MemstoreError) and os.environ.get("MEMSTORE_DEBUG"):
            import traceback

            traceback.print_exc()
        err, code = error_answer(exc)
        output.emit_error(err, as_json=shown["json"])
        return code


def _run(args: list[str], shown: dict[str, bool], new_id: str | None = None) -> int:
    from . import output

    verb = verb_of(args)
    parser = build_parser(only=verb, parser_class=UsageParser)
    if verb is not None and not parser._subparsers._group_actions[0].choices:  # type: ignore[union-attr]
        # not a verb: the full parser says so and lists the real ones
        parser = build_parser(parser_class=UsageParser)
    a = parser.parse_args(args)
    if a.cmd is None:
        parser.print_help()
        return 0
    # ``mcp`` speaks its protocol on stdout: its errors go to stderr only.
    shown["json"] = output.want_json(a.json_out) and a.cmd != "mcp"
    if a.cmd in ("serve", "daemon"):
        return _daemon_command(a)
    if a.cmd == "mcp":
        from .mcp_server import serve

        return serve(store=a.store, repo=a.repo)
    if a.cmd == "hooks" and a.hooks_cmd == "run":  # git's entry point: its own exit codes, stderr only
        from .githook import run_hook

        return run_hook(a.name, a.hook_args, episode=_episode())
    if a.cmd == "integrate" and a.hook:  # the agents' entry point: fails open, exit 0
        from .agenthooks import run_hook as run_agent_hook

        return run_agent_hook(a.hook, agent=a.agent if a.agent in ("claude", "codex", "cursor") else "claude")
    if a.cmd == "review" and a.from_file:  # the posting job: a review made elsewhere, no store here
        from .agentcmds import review_from

        answer, render = review_from(a)
        output.emit(answer, as_json=shown["json"], render=render)
        return 0
    try:
        answer, render = _dispatch(a, new_id)
    finally:
        _maybe_autostart(a)
    output.emit(answer, as_json=shown["json"], render=render)
    if render in ("check", "import") and not answer.get("ok", True):
        if render == "check" and shown["json"]:  # CI logs: the readable report on stderr beside the JSON
            output.info(output.pretty(answer, "check").rstrip("\n"))
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
