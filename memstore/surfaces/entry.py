"""The console entry point: a verb the daemon serves is sent to it as raw argv, before anything
but the standard library's os/sys and the C halves of json and socket is imported.

A CLI call through the daemon then costs an interpreter start-up plus one round trip; the
daemon parses the arguments with the real parser, runs the verb and sends back the exact
stdout/stderr text and exit code the in-process CLI would have produced. Anything unusual
(no daemon, another code version, `--help`, an argument the daemon cannot parse) falls through
to ``memstore.surfaces.cli.main``, which answers in-process and starts a daemon for next time.

Wire protocol (JSON lines, one request and one answer per connection):
    {"verb": "cli", "version", "cwd", "env", "argv", "stdin", "tty", "new_id", "color"}
    -> {"stdout", "stderr", "exit_code"} | {"fallback": true} | {"restart": true}
"""

from __future__ import annotations

import os
import sys

from .wire import (
    MAX_REQUEST_BYTES,
    READ_TIMEOUT,
    WRITE_TIMEOUT,
    Unavailable,
    Untrusted,
    code_version,
    disabled,
    exchange,
    forwarded_env,
    fresh_id,
    timeout_error,
    verb_of,
    warn_untrusted,
    write_stream,
)

# CLI verbs the daemon runs from argv, and which of them change the store.
REMOTE_VERBS = ("read", "write", "create", "update", "show", "list", "context")
WRITING_VERBS = ("write", "create", "update")


def remote(argv: list[str], stdin: str | None, new_id: str | None = None) -> int | None:
    """Run ``argv`` in the daemon: the exit code once its output is written, or None to run
    in-process (nothing happened in the store, or a write may have happened under ``new_id``,
    the id the in-process run gives it too)."""
    verb = verb_of(argv)
    if verb not in REMOTE_VERBS or disabled() or "-h" in argv or "--help" in argv:
        return None
    timeout = float(os.environ.get("MEMSTORE_CLIENT_TIMEOUT") or 0) or (
        WRITE_TIMEOUT if verb in WRITING_VERBS else READ_TIMEOUT)
    message: dict[str, object] = {
        "verb": "cli", "version": code_version(), "cwd": os.getcwd(), "env": forwarded_env(), "argv": argv,
        "stdin": stdin, "tty": sys.stdout.isatty(), "new_id": new_id,
        # The daemon renders the text: this terminal's colour choice goes along (output.colour_wanted).
        "color": sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb",
    }
    try:
        answer = exchange(message, timeout=timeout)
    except Untrusted as exc:
        warn_untrusted(exc)
        return None
    except Unavailable:
        return None
    except TimeoutError:
        if verb not in WRITING_VERBS:
            return None
        err = timeout_error(timeout)
        write_stream(sys.stderr, f"memstore: daemon_timeout: {err['error']['message']}\n")  # type: ignore[index]
        if "--json-out" in argv or not sys.stdout.isatty():  # the one JSON object every error promises
            import json

            write_stream(sys.stdout, json.dumps(err) + "\n")
        return 1
    except (OSError, ValueError):
        return None
    if answer.get("fallback") or answer.get("restart") or "exit_code" not in answer:
        return None
    write_stream(sys.stdout, str(answer.get("stdout") or ""))
    write_stream(sys.stderr, str(answer.get("stderr") or ""))
    return int(answer["exit_code"])  # type: ignore[call-overload]


def main() -> int:
    argv = sys.argv[1:]
    if len(argv) == 4 and argv[0] == "integrate" and argv[2] == "--hook":
        # An agent hook (every prompt, every file the agent reads): no parser to build for it.
        from .agenthooks import AGENTS, EVENTS, RECALL_EVENTS, run_hook

        if argv[1] in AGENTS and argv[3] in EVENTS:
            code = run_hook(argv[3], agent=argv[1])
            if argv[3] in RECALL_EVENTS:  # the agent waits on these each prompt and tool call
                sys.stdout.flush()
                os._exit(code)
            return code
    stdin = None
    raw: bytes | None = None
    if verb_of(argv) in REMOTE_VERBS and "-" in argv and sys.stdin is not None:
        # A request on stdin (`--json -`, `--text -`) is read once, here: the daemon gets its
        # text, and an in-process fallback reads it again from the same buffer. Bytes that are
        # not UTF-8 stay here: the in-process CLI refuses them with its typed error, and so is
        # a stdin past the cap (one byte more than it is read, so `< /dev/zero` ends there).
        raw = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
        try:
            stdin = raw.decode("utf-8") if len(raw) <= MAX_REQUEST_BYTES else None
        except UnicodeDecodeError:
            stdin = None
    # A write's id is fixed before its first attempt: a daemon killed mid-write answers nothing,
    # and the in-process run below then finds that write instead of making a second one.
    new_id = fresh_id() if verb_of(argv) in WRITING_VERBS else None
    code = remote(argv, stdin, new_id) if raw is None or stdin is not None else None
    if code is not None:
        # The answer is written and flushed and this process holds nothing else: it leaves
        # without the interpreter's teardown (a final collection, every module freed), 2-10 ms
        # of a call that otherwise costs a start-up and one round trip.
        os._exit(code)
    if raw is not None:
        import io

        sys.stdin = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8")
    from .cli import main as cli_main

    return cli_main(argv, new_id=new_id)
