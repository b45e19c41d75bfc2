"""The command line's grammar: the parser and the request each verb builds from argv.

Shared by the in-process CLI (``cli``) and the daemon, which parses a client's argv with the
same parser (``remote_call``), so both answer a call alike. Parsing imports nothing heavy.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

from .. import __version__
from ..errors import InvalidRequest, UsageError
from ..store.kinds import AGENT_HOOK_EVENTS, AGENTS, EVENT_TYPES, KINDS, SCOPES
from .wire import MAX_REQUEST_BYTES, verb_of


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Where `-` and relative file names are read from: this process, or (in the daemon) the
    client's working directory and the stdin text it sent along."""

    cwd: Path | None = None
    stdin: str | None = None

    def read_stdin(self, max_bytes: int | None = None) -> str:
        from ..store.files import given_text

        cap = max_bytes or MAX_REQUEST_BYTES
        if self.stdin is not None:
            if len(self.stdin) > cap:  # characters: at least as many bytes
                raise InvalidRequest(f"stdin is over the {cap}-byte cap; not read", code="too_large")
            return self.stdin
        return given_text(stdin_bytes(cap), "stdin")

    def read_file(self, arg: str, what: str = "FILE", max_bytes: int | None = None) -> str:
        """The text of ``arg`` (``-``: stdin), read with a cap and only from a regular file."""
        from ..store.files import given_text, read_given

        if arg == "-":
            return self.read_stdin(max_bytes)
        path = Path(arg).expanduser()
        if self.cwd is not None and not path.is_absolute():
            path = self.cwd / path
        return given_text(read_given(path, max_bytes=max_bytes or MAX_REQUEST_BYTES, what=what), f"{what} {arg}")


def stdin_bytes(max_bytes: int) -> bytes:
    """At most ``max_bytes`` of this process's stdin (one more is ``too_large``): ``< /dev/zero``
    stops at the cap instead of filling memory."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream put in place of stdin (tests, an embedding program)
        data = sys.stdin.read(max_bytes + 1).encode("utf-8", "surrogateescape")
    else:
        try:
            data = buffer.read(max_bytes + 1)
        except OSError as exc:
            raise InvalidRequest(f"stdin: cannot read: {exc.strerror}", code="bad_input") from None
    if len(data) > max_bytes:
        raise InvalidRequest(f"stdin is over the {max_bytes}-byte cap; not read", code="too_large")
    return data


LOCAL = Inputs()


class ArgvError(Exception):
    """Arguments the daemon will not parse: the client runs them in-process instead, where
    argparse prints its usage message as usual."""


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ArgvError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise ArgvError(message or "")


class UsageParser(argparse.ArgumentParser):
    """argparse prints its usage and exits 2; an agent was promised one JSON object on stdout,
    so a bad flag becomes a UsageError answered at the one error boundary like any other."""

    def error(self, message: str) -> NoReturn:
        # The error line already starts "memstore: usage:"; the hint names the command.
        raise UsageError(message, hint=f"`{self.prog} --help` lists the options")


def write_scope(text: str) -> str:
    """A write's ``--scope``: repo, global, or shared:NAME (an attached store's name, checked by the verb)."""
    if text in SCOPES or text.startswith("shared:"):
        return text
    raise argparse.ArgumentTypeError(f"invalid scope: {text!r} (choose repo, global or shared:NAME)")


def finite_float(text: str) -> float:
    """argparse's float accepts nan and inf, which no field means and JSON cannot carry."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _no_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and no memstore field means them.
    raise ValueError(f"{name} is not valid JSON (numbers must be finite)")


def _read_json(arg: str, src: Inputs) -> dict[str, Any]:
    raw = src.read_file(arg, "--json")
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"request is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                             code="invalid_json") from exc
    except ValueError as exc:
        raise InvalidRequest(f"request is not valid JSON: {exc}", code="invalid_json") from exc
    except RecursionError as exc:
        raise InvalidRequest("request is not valid JSON: nested too deeply", code="invalid_json") from exc
    if not isinstance(data, dict):
        raise InvalidRequest("the request must be a JSON object", code="schema")
    return data


def _check_op(req: dict[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
    op = req.get("op")
    if op is not None and op not in allowed:
        raise InvalidRequest(f"this verb takes op {' or '.join(allowed)}, not {op!r}", field="op", code="schema")
    return req


def _write_request(a: argparse.Namespace, src: Inputs) -> dict[str, Any]:
    if a.json:
        return _check_op(_read_json(a.json, src), ("write", "create"))
    if not a.kind or a.text is None:
        raise InvalidRequest("give --kind and --text (or a request with --json FILE|-)", code="usage")
    links: dict[str, Any] = {}
    if a.problem:
        links["problem_id"] = a.problem
    for key, value in (("related", a.related), ("change_targets", a.change_target), ("supersedes", a.supersedes)):
        if value:
            links[key] = value
    if a.via_change:
        links["via_change"] = a.via_change
    if a.link:
        links["relations"] = [_relation(value, "--link") for value in a.link]
    text = src.read_stdin() if a.text == "-" else a.text
    memory: dict[str, Any] = {"text": text, "scope": a.scope, "kind": a.kind, "evidence_refs": a.evidence or []}
    for key in ("confidence", "rationale", "author"):
        if getattr(a, key) is not None:
            memory[key] = getattr(a, key)
    if a.tag:
        memory["tags"] = a.tag
    if links:
        memory["links"] = links
    req: dict[str, Any] = {"op": "write", "mode": "dry_run" if a.dry_run else "commit", "memory": memory}
    if a.allow_duplicate:
        req["allow_duplicate"] = True
    return req


def _relation(value: str, flag: str) -> dict[str, str]:
    kind, sep, target = value.partition(":")
    if not sep:
        raise InvalidRequest(f"{flag} takes TYPE:ID, e.g. contradicts:01jd8x4k (types: relates_to, elaborates_on, "
                             f"depends_on, contradicts), not {value!r}", code="usage")
    return {"type": kind, "id": target}


def _update_request(a: argparse.Namespace, src: Inputs) -> dict[str, Any]:
    if a.json:
        return _check_op(_read_json(a.json, src), ("update",))
    if not a.type:
        raise InvalidRequest("give --type (utility_vote|archive|fact_update_link|link) or --json FILE|-", code="usage")
    req: dict[str, Any] = {"op": "update", "mode": "dry_run" if a.dry_run else "commit", "type": a.type}
    pairs = (("memory_id", a.memory), ("problem_id", a.problem), ("vote", a.vote), ("old_fact_id", a.old_fact),
             ("change_id", a.change), ("new_fact_id", a.new_fact), ("confidence", a.confidence),
             ("rationale", a.rationale), ("author", a.author))
    req.update({k: v for k, v in pairs if v is not None})
    if a.type == "archive":
        req["archived"] = not a.unarchive
    if a.link:
        req["relation"] = _relation(a.link, "--link")
    req["evidence_refs"] = a.evidence or []
    return req


def _read_request(a: argparse.Namespace, src: Inputs) -> dict[str, Any]:
    if a.json:
        return _check_op(_read_json(a.json, src), ("read",))
    if not a.query:
        raise InvalidRequest("give a query (or --json FILE|-)", code="usage")
    req: dict[str, Any] = {"op": "read", "query": " ".join(a.query), "mode": a.mode}
    if a.kind:
        req["kinds"] = a.kind
    if a.limit is not None:
        req["limit"] = a.limit
    if a.no_global:
        req["include_global"] = False
    if a.no_shared:
        req["include_shared"] = False
    if a.problem:
        req["problem_id"] = a.problem
    filters = {}
    if a.since:
        filters["since"] = a.since
    if a.tag:
        filters["tags"] = a.tag
    if a.author is not None:
        filters["author"] = a.author
    if a.min_confidence is not None:
        filters["min_confidence"] = a.min_confidence
    if filters:
        req["filters"] = filters
    if a.explain:
        req["explain"] = True
    if a.expect:
        req["expect"] = a.expect
    expand = {k: v for k, v in (("relation_hops", a.hops), ("semantic_hops", a.semantic_hops)) if v is not None}
    if expand:
        req["expand"] = expand
    return req


def _common(p: argparse.ArgumentParser, *, default: bool) -> None:
    kw: dict[str, Any] = {} if default else {"default": argparse.SUPPRESS}
    p.add_argument("--store", metavar="DIR", help="use this store directory instead of the repo's .memory/ "
                   "(also MEMSTORE_STORE)", **({"default": None} if default else kw))
    p.add_argument("--json-out", action="store_true", help="print JSON even on a terminal",
                   **({"default": False} if default else kw))


def _print_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--print", dest="print_field", choices=PRINTABLE, metavar="FIELD",
                   help="print only this field of the answer (id or path), for a shell variable: "
                   "P=$(memstore write ... --print id)")


# Fields ``--print`` can show alone: the ones a shell script passes to the next command.
PRINTABLE = ("id", "path")


def build_parser(only: str | None = None, parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
                 ) -> argparse.ArgumentParser:
    """The whole command line, or (``only``) just one verb's parser: building all of them costs
    ~20 ms, so ``main`` builds only the verb it was given."""
    p = parser_class(
        prog="memstore",
        description="Long-term memory for AI coding agents, stored as Markdown in git. "
        "Answers are JSON when piped (or with --json-out), readable text on a terminal.",
    )
    p.add_argument("-V", "--version", action="version", version=f"memstore {__version__}")
    _common(p, default=True)
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    # Subcommands accept the common options too (`memstore read q --json-out`); SUPPRESS keeps a
    # subparser from resetting a value given before the verb.
    common = argparse.ArgumentParser(add_help=False)
    _common(common, default=False)
    _add = sub.add_parser

    def add_parser(name: str, **kw: Any) -> argparse.ArgumentParser:
        names.append(name)
        if only is not None and name != only:
            return argparse.ArgumentParser(add_help=False)  # built, never attached: cheap
        return _add(name, parents=[common], **kw)

    sub.add_parser = add_parser  # type: ignore[method-assign]
    names: list[str] = []

    s = sub.add_parser("init", help="create .memory/ in this repo (or the global store) idempotently")
    s.add_argument("--global", dest="global_store", action="store_true", help="initialise the global store")
    s.add_argument("--remote", metavar="URL", help="with --global: sync the global store through this git remote "
                   "(cloned when it has history, else pushed to)")

    s = sub.add_parser("sync", help="commit, pull (rebase) and push the global store through its git remote "
                       "(--store DIR: a store that is a git repository of its own)")
    s.add_argument("--keep", choices=("mine", "theirs"), help="a setting or file both machines changed "
                   "differently: keep this machine's (mine) or take the remote's (theirs)")

    for name in ("write", "create"):
        s = sub.add_parser(name, help="store a new memory" + (" (alias of write)" if name == "create" else ""))
        s.add_argument("--json", metavar="FILE", help="the request as JSON from FILE, or - for stdin")
        s.add_argument("--kind", choices=KINDS)
        s.add_argument("--text", help="the memory's text (- reads stdin)")
        s.add_argument("--scope", type=write_scope, default="repo", metavar="repo|global|shared:NAME",
                       help="shared:NAME pushes the memory as a branch of that attached store's remote, for review")
        s.add_argument("--confidence", type=finite_float)
        s.add_argument("--rationale")
        s.add_argument("--author")
        s.add_argument("--problem", metavar="ID", help="links.problem_id (solutions and failed tactics)")
        s.add_argument("--related", metavar="ID", action="append")
        s.add_argument("--change-target", metavar="ID", action="append", help="links.change_targets (changes)")
        s.add_argument("--supersedes", metavar="ID", action="append", help="older fact(s) this fact replaces")
        s.add_argument("--via-change", metavar="ID")
        s.add_argument("--link", metavar="TYPE:ID", action="append",
                       help="a typed link (links.relations): relates_to, elaborates_on, depends_on or contradicts")
        s.add_argument("--evidence", metavar="REF", action="append",
                       help="event:EP:SEQ, commit:SHA, file:PATH[@REV][#La-Lb], memory:ID, user:QUOTE, url:URL")
        s.add_argument("--tag", action="append")
        s.add_argument("--dry-run", action="store_true", help="run every check, write nothing")
        s.add_argument("--allow-duplicate", action="store_true", help="skip the near-duplicate refusal")
        _print_option(s)

    s = sub.add_parser("update", help="vote on, archive, or link (fact -> change -> fact, typed links) existing "
                       "memories")
    s.add_argument("--json", metavar="FILE", help="the request as JSON from FILE, or - for stdin")
    s.add_argument("--type", choices=EVENT_TYPES)
    s.add_argument("--memory", metavar="ID")
    s.add_argument("--problem", metavar="ID", help="the problem in whose context a vote is cast")
    s.add_argument("--vote", type=finite_float, help="-1 (misled) .. +1 (helped)")
    s.add_argument("--unarchive", action="store_true", help="with --type archive: restore instead")
    s.add_argument("--old-fact", metavar="ID")
    s.add_argument("--change", metavar="ID")
    s.add_argument("--new-fact", metavar="ID")
    s.add_argument("--link", metavar="TYPE:ID", help="with --type link: the typed link to add from --memory")
    s.add_argument("--confidence", type=finite_float)
    s.add_argument("--rationale")
    s.add_argument("--author")
    s.add_argument("--evidence", metavar="REF", action="append")
    s.add_argument("--dry-run", action="store_true", help="show the projected effect, write nothing")
    _print_option(s)

    s = sub.add_parser("read", help="recall memories relevant to a problem or question")
    s.add_argument("query", nargs="*", help="what you are dealing with, in words")
    s.add_argument("--json", metavar="FILE", help="the request as JSON from FILE, or - for stdin")
    s.add_argument("--mode", choices=("targeted", "ambient"), default="targeted")
    s.add_argument("--kind", choices=KINDS, action="append")
    s.add_argument("--limit", type=int)
    s.add_argument("--no-global", action="store_true", help="leave the global store out")
    s.add_argument("--no-shared", action="store_true", help="leave the attached shared stores out")
    s.add_argument("--problem", metavar="ID", help="the problem in hand (weights utility votes)")
    s.add_argument("--since", metavar="DATE")
    s.add_argument("--tag", action="append")
    s.add_argument("--author", help="only memories by this author")
    s.add_argument("--min-confidence", type=finite_float, metavar="X",
                   help="only memories written with a confidence of at least X (0-1)")
    s.add_argument("--hops", type=int, help="steps along typed links from the best matches (default 2)")
    s.add_argument("--semantic-hops", type=int, help="hops of 'most similar other memory' (default 0: off)")
    s.add_argument("--explain", action="store_true",
                   help="say why each result came back: lane scores, bars cleared, links, votes")
    s.add_argument("--expect", metavar="ID", action="append",
                   help="a memory you expected (repeatable): say where it came back or what left it out")

    s = sub.add_parser("eval", help="measure the store on its own problems: recall@1/5/10, MRR and abstention "
                       "of reads, beside the keyword and vector lanes alone")
    s.add_argument("--set", metavar="read.NAME=VALUE", action="append",
                   help="also measure with this read setting changed (repeatable)")
    s.add_argument("--global", dest="global_store", action="store_true",
                   help="read the global store too (default: the repo store alone, the same for the whole team)")

    s = sub.add_parser("show", help="one memory with its links, utility and state")
    s.add_argument("id", help="a full id or a unique prefix (>= 6 chars)")

    s = sub.add_parser("history", help="one memory's history: who wrote it, when, in which episode and commit; "
                       "its votes, links, supersession and archival")
    s.add_argument("id", help="a full id or a unique prefix (>= 6 chars)")

    s = sub.add_parser("list", help="list memories, newest first")
    s.add_argument("--kind", choices=KINDS)
    s.add_argument("--scope", choices=SCOPES)
    s.add_argument("--all", action="store_true", help="include archived memories")
    s.add_argument("--limit", type=int)

    s = sub.add_parser("new", help="open a template for KIND in $EDITOR and save it as a new memory file")
    s.add_argument("kind", choices=KINDS)
    s.add_argument("--scope", choices=SCOPES, default="repo")

    s = sub.add_parser("import", help="bulk-write requests from a JSONL file (one write request per line), "
                       "or convert notes with --from markdown|jsonl")
    s.add_argument("file", help="a .jsonl file, or - for stdin (with --from markdown: a .md file or a folder)")
    s.add_argument("--dry-run", action="store_true", help="validate every line, write nothing")
    s.add_argument("--from", dest="from_format", choices=("markdown", "jsonl"),
                   help="convert instead: Markdown notes (each bullet / paragraph becomes a fact or preference "
                   "citing its line) or a JSONL export of {text, metadata} memories")
    s.add_argument("--scope", choices=SCOPES, default="repo", help="with --from: the store to import into")

    s = sub.add_parser("check", help="validate memory files; enforce immutability of committed ones")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--staged", action="store_true", help="check what is staged (the pre-commit hook)")
    g.add_argument("--base", metavar="REV", help="check what this branch adds since REV (for CI / PR review)")
    s.add_argument("--fix", action="store_true", help="write missing id/created into hand-written files")
    s.add_argument("--global", dest="global_store", action="store_true", help="also check the global store")

    s = sub.add_parser("attach", help="clone a shared store (a git repository of memories) under the global "
                       "store; read-only here, read by every repo the shared: setting lets see it")
    s.add_argument("url", help="the shared store's git URL, or a local path")
    s.add_argument("--name", help="its name here (default: the URL's last part); reads name it shared:NAME")
    s = sub.add_parser("detach", help="remove an attached shared store's clone")
    s.add_argument("name", help="the shared store's name (see memstore attached)")
    sub.add_parser("attached", help="the attached shared stores, and whether this repo sees each")
    s = sub.add_parser("promote", help="propose one of your memories to a shared store: a branch of its "
                       "repository, pushed for review (nothing changes here)")
    s.add_argument("id", help="the memory's id or unique prefix (repo or global store)")
    s.add_argument("--to", required=True, metavar="NAME", help="the attached shared store (see memstore attached)")
    sub.add_parser("pending", help="global memories proposed in review mode, waiting for approval")
    s = sub.add_parser("approve", help="commit a pending global memory to the global store")
    s.add_argument("id", help="a pending memory's id or unique prefix (>= 6 chars)")
    s = sub.add_parser("drop", help="discard a pending global memory")
    s.add_argument("id", help="a pending memory's id or unique prefix (>= 6 chars)")

    s = sub.add_parser("reindex", help="bring the indexes up to date (--full: rebuild from scratch)")
    s.add_argument("--full", action="store_true")

    s = sub.add_parser("serve", help="run the per-user daemon in the foreground (the CLI starts it on demand)")
    s.add_argument("--idle", type=int, metavar="SECONDS", help="exit after this long without requests "
                   "(default: daemon.idle_seconds, MEMSTORE_DAEMON_IDLE)")
    s.add_argument("--warm", metavar="DIR", help="open the stores seen from DIR at start and embed their memories "
                   "that have no vector yet (the CLI passes this after a read it answered partially)")
    s = sub.add_parser("daemon", help="status, stop or restart the background daemon")
    s.add_argument("action", choices=("status", "start", "stop", "restart"))
    s = sub.add_parser("mcp", help="serve memory_read/write/update, episodes and the guide as MCP tools over stdio")
    s.add_argument("--repo", metavar="DIR", help="resolve the repository from DIR instead of the working directory")

    s = sub.add_parser("integrate", help="wire memstore into an agent (its MCP config, hooks, guide) and install "
                       "the git hooks; --remove undoes it")
    s.add_argument("agent", choices=AGENTS, help="which agent: claude (Claude Code), codex, cursor, generic "
                   "(AGENTS.md + .mcp.json), or github (the pull request review workflows)")
    s.add_argument("--remove", action="store_true", help="take out exactly what integrate added")
    s.add_argument("--hooks-path-ok", action="store_true",
                   help="core.hooksPath is set: install the git hooks into that folder anyway")
    s.add_argument("--hook", choices=AGENT_HOOK_EVENTS, help=argparse.SUPPRESS)  # the agents run these

    from .agentcmds import add_parsers  # episode, hooks, diff, guide, context, reflect, snapshot

    add_parsers(sub, common)
    return p


# Verbs the daemon can answer: (daemon verb, render). Their request is built before anything
# heavy is imported, so a forwarded call never loads the store, index or model code.
FORWARDED = {"read": ("read", "read"), "write": ("write", None), "create": ("write", None),
             "update": ("update", None), "show": ("show", "show"), "list": ("list", "list"),
             "context": ("context", None)}  # its render is render.context, chosen by the daemon


def forward_spec(a: argparse.Namespace, src: Inputs = LOCAL) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(request, args) of a forwardable verb: what both the daemon and ``_dispatch`` run."""
    if a.cmd in ("write", "create"):
        return _write_request(a, src), None
    if a.cmd == "update":
        return _update_request(a, src), None
    if a.cmd == "read":
        return _read_request(a, src), None
    if a.cmd == "show":
        return None, {"id": a.id}
    if a.cmd == "context":
        return None, {"task": a.task, "limit": a.limit}
    return None, {"kind": a.kind, "scope": a.scope, "all": a.all, "limit": a.limit}


@dataclasses.dataclass
class RemoteCall:
    """A CLI call the daemon runs for a client (see ``memstore.surfaces.entry``)."""

    verb: str  # the daemon verb: read, write, update, show, list
    request: dict[str, Any] | None
    args: dict[str, Any] | None
    store: str | None
    json_out: bool
    render: str | None


@functools.cache
def _remote_parser(verb: str) -> argparse.ArgumentParser:
    # Building one verb's parser costs ~3 ms; parse_args leaves the parser as it was, so the
    # daemon builds each once.
    return build_parser(only=verb, parser_class=_RaisingParser)


def remote_call(argv: list[str], src: Inputs) -> RemoteCall:
    """Parse a client's argv in the daemon. Raises ArgvError for anything but a well-formed
    forwardable verb, and MemstoreError for a bad request (answered like the in-process CLI)."""
    verb = verb_of(argv)
    if verb not in FORWARDED:
        raise ArgvError(f"{verb!r} is not run by the daemon")
    a = _remote_parser(verb).parse_args(argv)
    request, args = forward_spec(a, src)
    if shared_write(request):
        raise ArgvError("a write to a shared store runs in the caller's process")
    return RemoteCall(FORWARDED[a.cmd][0], request, args, a.store, bool(a.json_out), render_of(a))


def shared_write(request: object) -> bool:
    """Whether ``request`` writes to a shared store: it pushes a branch with git, which must run
    with the caller's own environment (ssh agent, credential helper), so the daemon never runs it."""
    memory = request.get("memory") if isinstance(request, dict) else None
    scope = memory.get("scope") if isinstance(memory, dict) else None
    return isinstance(scope, str) and scope.startswith("shared:")


def render_of(a: argparse.Namespace) -> str | None:
    """How a forwardable verb's answer is shown: ``--print FIELD`` alone, else its render."""
    field = getattr(a, "print_field", None)
    return f"field:{field}" if field else FORWARDED[a.cmd][1]


