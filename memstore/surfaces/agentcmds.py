"""The CLI of the git-native and agent-loop verbs: ``episode``, ``hooks``, ``diff``, ``review``, ``guide``,
``context``, ``reflect``, ``vote``, ``snapshot``. ``cli`` adds these parsers and hands matching commands
here; each branch parses, calls the library, and returns (answer, render) for ``output``.

Renders: a callable turns the answer into text on a terminal; ``"markdown"`` prints
``answer["markdown"]`` as is (a document), piped or not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest
from ..store.kinds import EPISODE_SOURCES, HOOK_NAMES
from . import render

COMMANDS = ("episode", "hooks", "diff", "review", "guide", "context", "reflect", "vote", "snapshot")


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add these verbs to ``sub``; ``common`` is the parent parser of the options every verb takes,
    so nested actions accept them too (`memstore episode log ... --json-out`)."""

    s = sub.add_parser("episode", help="record a work session: start, log events, end, show, list")
    ep = s.add_subparsers(dest="episode_cmd", metavar="ACTION", required=True)
    _with_common(ep, common)
    e = ep.add_parser("start", help="open a new episode; prints its id (name it with MEMSTORE_EPISODE)")
    e.add_argument("--agent", help="who is working; writes in the episode carry it as author "
                   "(default: $MEMSTORE_AUTHOR or 'unknown')")
    e.add_argument("--task", help="the task in one line")
    e.add_argument("--local", action="store_true", default=None,
                   help="keep this episode on this machine only (default: episodes.local_only)")
    e.add_argument("--replace", action="store_true",
                   help="make it the current episode even while another agent's episode is active")
    e = ep.add_parser("log", help="append one event; prints the event:<episode>:<seq> ref to cite")
    e.add_argument("--source", required=True, choices=EPISODE_SOURCES)
    g = e.add_mutually_exclusive_group(required=True)
    g.add_argument("--content", help="the event text")
    g.add_argument("--content-file", metavar="FILE", help="read the event text from FILE (- for stdin)")
    e.add_argument("--episode", metavar="ID",
                   help="log to this episode (default: $MEMSTORE_EPISODE, else the current one)")
    e = ep.add_parser("end", help="close the current episode")
    e.add_argument("--outcome", help="e.g. success, partial, abandoned")
    e.add_argument("--episode", metavar="ID",
                   help="close this episode (default: $MEMSTORE_EPISODE, else the current one)")
    e = ep.add_parser("show", help="an episode's header and events (default: the current one)")
    e.add_argument("id", nargs="?", help="episode id or unique prefix (>= 6 chars; default: $MEMSTORE_EPISODE, "
                   "else the current one)")
    e = ep.add_parser("list", help="episodes, newest first")
    e.add_argument("--limit", type=int)

    s = sub.add_parser("hooks", help="install, remove or inspect memstore's git hooks")
    hk = s.add_subparsers(dest="hooks_cmd", metavar="ACTION", required=True)
    _with_common(hk, common)
    h = hk.add_parser("install", help="install pre-commit, post-commit, post-merge, post-checkout (idempotent)")
    h.add_argument("--hooks-path-ok", action="store_true",
                   help="core.hooksPath is set: install into that folder anyway")
    h.add_argument("--force", action="store_true", help="same as --hooks-path-ok")
    h.add_argument("--python", metavar="PATH", help="the python the hooks run memstore with (default: this one)")
    hk.add_parser("uninstall", help="remove memstore's hooks and restore hooks they replaced")
    hk.add_parser("status", help="which hooks are installed, outdated or foreign")
    h = hk.add_parser("run", help="what the installed hooks execute (not for direct use)")
    h.add_argument("name", choices=HOOK_NAMES)
    h.add_argument("hook_args", nargs=argparse.REMAINDER)

    s = sub.add_parser("diff", help="render the memories and events this branch adds since REV (PR review)")
    s.add_argument("rev", nargs="?", help="base revision (default: merge-base with origin/HEAD, main or master)")

    s = sub.add_parser("review", help="what memory says about a pull request: memories it may make stale, "
                       "past problems and failed tactics like it, memories it adds (--post: as a PR comment)")
    s.add_argument("--base", metavar="REV", help="the branch the PR merges into (required unless --from)")
    s.add_argument("--head", metavar="REV", help="the PR's head commit (default: HEAD)")
    s.add_argument("--title", help="the PR's title (read with its body and changed lines for 'seen before')")
    s.add_argument("--body-file", metavar="FILE", help="the PR's body, from FILE (- for stdin)")
    s.add_argument("--format", choices=("markdown", "json", "github"), default="markdown",
                   help="markdown: the PR comment; json: the answer (docs/review.md); github: workflow-command "
                   "annotations on the changed lines")
    s.add_argument("--from", dest="from_file", metavar="FILE",
                   help="render or post a review JSON written earlier (--format json) instead of reviewing here")
    s.add_argument("--post", action="store_true", help="post (or edit in place) the PR's one memstore comment "
                   "through `gh api`; with nothing to say, nothing is posted (an earlier comment is marked resolved)")
    s.add_argument("--repo", metavar="OWNER/NAME", help="with --post: the repository (default: $GITHUB_REPOSITORY)")
    s.add_argument("--pr", type=int, metavar="N", help="with --post: the pull request number")
    s.add_argument("--expect-head", metavar="SHA", help="with --post: refuse unless the PR's head is SHA")
    s.add_argument("--link-base", metavar="URL", help="file links in the comment point under URL "
                   "(default: $GITHUB_SERVER_URL/$GITHUB_REPOSITORY)")

    s = sub.add_parser("guide", help="print the agent instructions (--install: into AGENTS.md / CLAUDE.md)")
    s.add_argument("--install", action="store_true", help="add or refresh the marked memstore section in a file")
    s.add_argument("--file", metavar="FILE", help="with --install: the file (default AGENTS.md at the repo root; "
                   "inside the repo, never in .git/ or .memory/)")
    s.add_argument("--outside-repo", action="store_true", help="with --install --file: allow a file outside the "
                   "repository (still never in .git/ or a store)")

    s = sub.add_parser("context", help="the ambient read for a session start (preferences, facts, relevant)")
    s.add_argument("--task", help="what the session is about; the query (default: the task of $MEMSTORE_EPISODE, "
                   "else of the current episode; no task: the branch and its commit subjects)")
    s.add_argument("--limit", type=int, help="at most this many relevant results")

    s = sub.add_parser("reflect", help="the session-end checklist and digest of an episode")
    s.add_argument("episode", nargs="?", help="episode id or prefix (default: the --session's episode, else "
                   "$MEMSTORE_EPISODE, else the current one, else the newest open one; never an ended one)")
    s.add_argument("--session", metavar="ID", help="the agent's session id (as its hooks send it): reflect on "
                   "the episode the hooks opened for that session")

    s = sub.add_parser("vote", help="record several utility votes at once (reflect's vote requests, filled in); "
                       "all are checked before any is written")
    s.add_argument("--json", metavar="FILE", default="-", help='{"votes": [...]} or a list of utility_vote '
                   "requests (default: - for stdin); a vote left null is skipped")

    s = sub.add_parser("snapshot", help="derived view: current facts, preferences, best solutions, open problems")
    s.add_argument("--markdown", action="store_true", help="print Markdown instead of JSON")
    s.add_argument("--out", metavar="FILE", help="write to FILE instead of printing (inside the repo, never in "
                   ".git/ or a store)")
    s.add_argument("--outside-repo", action="store_true", help="with --out: allow a file outside the repository "
                   "(still never in .git/ or a store)")


def _with_common(sub: Any, common: argparse.ArgumentParser) -> None:
    add = sub.add_parser

    def add_parser(name: str, **kw: Any) -> argparse.ArgumentParser:
        return add(name, parents=[common], **kw)

    sub.add_parser = add_parser


def _content(a: argparse.Namespace) -> str:
    from ..store.files import read_given
    from .wire import MAX_REQUEST_BYTES

    if a.content is not None:
        return str(a.content)
    # A log keeps what it can: bytes that are not UTF-8 (tool output) become U+FFFD, and a long
    # output its first MAX_REQUEST_BYTES (the log caps an event far below that anyway). Only a
    # regular file is read: a FIFO or /dev/zero is refused, never waited on or read forever.
    if a.content_file == "-":
        buffer = getattr(sys.stdin, "buffer", None)
        if buffer is None:
            return sys.stdin.read(MAX_REQUEST_BYTES)
        data = buffer.read(MAX_REQUEST_BYTES)
    else:
        data = read_given(Path(a.content_file), max_bytes=MAX_REQUEST_BYTES, what="--content-file", truncate=True)
    return data.decode("utf-8", errors="replace")


def _check_python(python: str) -> None:
    """``hooks install --python``: the interpreter every commit will run. A control character, or
    a path that exists but is no executable file (/dev/zero, a folder), is refused now rather
    than blocking each commit; a path that does not exist here is taken as meant (a container's)."""
    import os

    from ..store.files import bad_char

    found = bad_char({"--python": python})
    if found is not None:
        raise InvalidRequest(found[1], field="python", code="bad_chars")
    path = Path(python).expanduser()
    if os.path.lexists(path) and not (path.is_file() and os.access(path, os.X_OK)):
        raise InvalidRequest(f"--python {python}: not an executable file; nothing was installed", field="python",
                             code="usage", hint="give the path of a python that has memstore installed")


def dispatch(a: argparse.Namespace, ws: Any, author: str | None, episode: str | None) -> tuple[dict[str, Any], Any]:
    """``author``: MEMSTORE_AUTHOR; ``episode``: MEMSTORE_EPISODE (read once, at the CLI's edge)."""
    if a.cmd == "episode":
        from ..store import episodes

        if a.episode_cmd == "start":
            return episodes.start(ws, agent=a.agent or author, task=a.task, local=a.local, replace=a.replace), None
        if a.episode_cmd == "log":
            return episodes.log(ws, a.source, _content(a), episode_id=a.episode or episode), render.episode_log
        if a.episode_cmd == "end":
            return episodes.end(ws, outcome=a.outcome, episode_id=a.episode or episode), None
        if a.episode_cmd == "show":
            return episodes.show(ws, a.id or episode), render.episode
        return episodes.list_episodes(ws, limit=a.limit), render.episodes
    if a.cmd == "hooks":
        from ..git import hooks

        if a.hooks_cmd == "install":
            if a.python is not None:
                _check_python(a.python)
            return hooks.install(python=a.python, hooks_path_ok=a.hooks_path_ok or a.force), render.hooks
        if a.hooks_cmd == "uninstall":
            return hooks.uninstall(), render.hooks
        return hooks.status(), render.hooks
    if a.cmd == "diff":
        from ..git.review import branch_diff

        return branch_diff(ws, a.rev), render.diff
    if a.cmd == "review":
        from ..verbs.review import review

        if not a.base:
            raise InvalidRequest("review needs --base REV (the branch the PR merges into)", code="usage",
                                 hint="memstore review --base origin/main")
        body = _text_arg(a.body_file) if a.body_file else None
        return review_output(a, review(ws, a.base, a.head, title=a.title, body=body))
    if a.cmd == "guide":
        from ..verbs.guide import guide, install_guide

        if a.install:
            return install_guide(ws, a.file, outside_repo=a.outside_repo), None
        answer = guide(ws)
        if a.json_out:
            return answer, None
        return {**answer, "markdown": answer["text"]}, "markdown"
    if a.cmd == "context":
        from ..verbs.guide import context

        return context(ws, task=a.task, limit=a.limit, episode=episode), render.context
    if a.cmd == "reflect":
        from ..verbs.guide import reflect

        if a.episode:
            return reflect(ws, a.episode), render.reflect
        if a.session is not None:
            return reflect(ws, session=a.session, cwd=Path.cwd()), render.reflect
        return reflect(ws, episode), render.reflect
    if a.cmd == "vote":
        from ..verbs.api import vote

        return vote(ws, _json_arg(a.json), author=_vote_author(ws, author, episode), episode=episode), None
    if a.cmd == "snapshot":
        from ..verbs.snapshot import snapshot, to_markdown, write_out

        snap = snapshot(ws)
        if a.out:
            import json

            text = to_markdown(snap) if a.markdown else json.dumps(snap, indent=2, ensure_ascii=False) + "\n"
            return write_out(ws, Path(a.out), text, outside_repo=a.outside_repo), None
        if a.markdown:
            return {**snap, "markdown": to_markdown(snap)}, "markdown"
        return snap, None
    raise InvalidRequest(f"unknown command {a.cmd!r}", code="usage")


def _vote_author(ws: Any, author: str | None, episode: str | None) -> str | None:
    from ..store.episodes import default_author

    return author or default_author(ws, episode)


def _json_arg(arg: str) -> Any:
    """The JSON value of FILE (``-``: stdin), read with the request cap and only from a regular file."""
    import json

    from ..store.files import given_text, read_given
    from .wire import MAX_REQUEST_BYTES

    if arg == "-":
        raw = sys.stdin.read(MAX_REQUEST_BYTES + 1)
        if len(raw) > MAX_REQUEST_BYTES:
            raise InvalidRequest(f"the request is over {MAX_REQUEST_BYTES} bytes", code="too_large")
    else:
        raw = given_text(read_given(Path(arg), max_bytes=MAX_REQUEST_BYTES, what="--json"), f"--json {arg}")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(f"request is not valid JSON: {exc}", code="invalid_json") from exc


def _text_arg(arg: str) -> str:
    try:
        if arg == "-":
            return sys.stdin.read()
        return Path(arg).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InvalidRequest(f"cannot read {arg}: {exc.strerror}", code="bad_input") from exc


def review_from(a: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """``review --from FILE``: a review JSON made elsewhere (the analysis job), rendered or
    posted here; no store is opened."""
    import json

    try:
        answer = json.loads(_text_arg(a.from_file))
    except ValueError as exc:
        raise InvalidRequest(f"{a.from_file} is not a review JSON: {exc}", code="bad_input") from exc
    if not isinstance(answer, dict) or not isinstance(answer.get("sections", {}), dict):
        raise InvalidRequest(f"{a.from_file} is not a review JSON (no sections object)", code="bad_input")
    return review_output(a, answer)


def review_output(a: argparse.Namespace, answer: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    import os

    from . import reviewfmt

    base = a.link_base
    if base is None and os.environ.get("GITHUB_REPOSITORY"):
        base = os.environ.get("GITHUB_SERVER_URL", "https://github.com") + "/" + os.environ["GITHUB_REPOSITORY"]
    if a.post:
        from ..verbs.prpost import post

        repo = a.repo or os.environ.get("GITHUB_REPOSITORY")
        if not repo or a.pr is None:
            raise InvalidRequest("--post needs --pr N and --repo OWNER/NAME (or $GITHUB_REPOSITORY)", code="usage")
        text = reviewfmt.markdown(answer, link_base=base)
        return post(repo, a.pr, text, nothing_to_say=not answer.get("sections"), marker=reviewfmt.MARKER,
                    resolved_body=reviewfmt.markdown({"sections": {}}), expect_head=a.expect_head), None
    if a.format == "json" or a.json_out:
        from .output import json_text

        return {**answer, "markdown": json_text(answer, indent=2) + "\n"}, "markdown"
    if a.format == "github":
        return {**answer, "markdown": reviewfmt.github(answer)}, "markdown"
    return {**answer, "markdown": reviewfmt.markdown(answer, link_base=base)}, "markdown"


# -- terminal renders --------------------------------------------------------------------------------
