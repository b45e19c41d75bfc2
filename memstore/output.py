"""The only writer of stdout/stderr: one JSON object when piped (or ``--json-out``), readable
text on a terminal. Errors also get one human line on stderr."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Callable
from typing import Any, TextIO


def want_json(force: bool, stream: TextIO | None = None) -> bool:
    stream = stream or sys.stdout
    return force or not stream.isatty()


# A render is a name known to ``pretty``, a function answer -> text (verbs defined outside this
# module bring their own), or "markdown": ``answer["markdown"]`` is a document, printed as is.
Render = str | Callable[[dict[str, Any]], str] | None


def emit(answer: dict[str, Any], *, as_json: bool, render: Render = None) -> None:
    _write(format_answer(answer, as_json=as_json, render=render, tty=sys.stdout.isatty()))


def format_answer(answer: dict[str, Any], *, as_json: bool, render: Render, tty: bool) -> str:
    """What ``emit`` prints; ``tty`` is whether stdout is a terminal (JSON is indented there)."""
    if render == "markdown":
        return str(answer["markdown"])
    if as_json:
        return json.dumps(answer, ensure_ascii=False, indent=2 if tty else None) + "\n"
    return pretty(answer, render)


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # `memstore list | head`: the reader left; that is not an error worth a traceback.
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def emit_error(answer: dict[str, Any], *, as_json: bool) -> None:
    err_text, out_text = format_error(answer, as_json=as_json)
    sys.stderr.write(err_text)
    if out_text:
        _write(out_text)


def format_error(answer: dict[str, Any], *, as_json: bool) -> tuple[str, str]:
    """(stderr, stdout) of an error answer: one human line, and the JSON too when wanted."""
    err = answer["error"]
    where = f" [{err['field']}]" if err.get("field") else ""
    hint = f"\n  hint: {err['hint']}" if err.get("hint") else ""
    line = f"memstore: {err['code']}: {err['message']}{where}{hint}\n"
    return line, (json.dumps(answer, ensure_ascii=False) + "\n") if as_json else ""


def info(message: str) -> None:
    sys.stderr.write(message + "\n")


def _wrap(text: str, indent: str = "    ", width: int = 100) -> str:
    lines = []
    for para in text.splitlines() or [""]:
        lines.append(textwrap.fill(para, width=width, initial_indent=indent, subsequent_indent=indent) or indent)
    return "\n".join(lines)


def _short(text: str, n: int = 90) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 1] + "…"


def pretty(answer: dict[str, Any], render: Render) -> str:
    if callable(render):
        return render(answer).rstrip("\n") + "\n"
    out: list[str] = []
    if render == "list":
        for m in answer["memories"]:
            flag = " (archived)" if m.get("archived") else ""
            out.append(f"{m['id'][:10]}  {m['kind']:<13} {m['scope']:<6} {_short(m['text'], 80)}{flag}")
        out.append(f"{answer['count']} memor{'y' if answer['count'] == 1 else 'ies'}")
        for bad in answer.get("invalid", []):
            out.append(f"invalid: {bad['path']}: {bad['error']}")
    elif render == "show":
        m = answer["memory"]
        d = m.get("derived", {})
        when = m.get("created") or "not yet committed"
        out.append(f"{m['kind']} {m['id']}  ({m['scope']}, {when}, {m.get('author')})")
        out.append(f"  path: {m['path']}")
        out.append(_wrap(m["text"]))
        for key in ("links", "evidence", "tags"):
            if m.get(key):
                out.append(f"  {key}: {json.dumps(m[key], ensure_ascii=False)}")
        for key in ("solutions", "failed_tactics", "changes"):
            if d.get(key):
                out.append(f"  {key}: {', '.join(d[key])}")
        if d.get("superseded_by"):
            out.append(f"  superseded by: {d['superseded_by']} (current: {d.get('head')})")
        if d.get("archived"):
            out.append("  archived")
        u = d.get("utility", {})
        out.append(f"  utility: {u.get('global', 0):+.2f} from {u.get('votes', 0)} vote(s)")
    elif render == "read":
        out.append(answer.get("guidance", ""))
        for w in answer.get("warnings", []):
            out.append(f"warning: {w}")
        if not answer["results"]:
            out.append("(no memory clears the bar: nothing relevant is known)")
        for r in answer["results"]:
            tag = "WATCH-OUT " if r["kind"] == "failed_tactic" else ""
            sup = f"  superseded by {r['links']['superseded_by']}" if r.get("links", {}).get("superseded_by") else ""
            stale = "  (stale: verify against the code)" if r.get("stale") else ""
            out.append(f"\n{tag}{r['kind']} {r['id'][:10]}  score {r['score']:.2f}{sup}{stale}")
            out.append(_wrap(r["text"]))
            out.append(f"    why: {', '.join(r.get('reasons', []))}")
            for h in r.get("history", []):
                via = f", change {h['change'][:10]}" if h.get("change") else ""
                out.append(f"    history: superseded {h['id'][:10]} (replaced by {h['superseded_by'][:10]}{via})")
                out.append(_wrap(h["text"], indent="      "))
        st = answer.get("stats", {})
        out.append(f"\n{len(answer['results'])} result(s) from {st.get('candidates', 0)} candidates "
                   f"in {st.get('elapsed_ms', 0)} ms")
    elif render == "check":
        for f in answer.get("problems", []):
            out.append(f"{f['severity']}: {f['path']}: {f['message']}")
        for f in answer.get("fixed", []):
            out.append(f"fixed: {f['path']}: {f['message']}")
        n_err = sum(1 for f in answer.get("problems", []) if f["severity"] == "error")
        n_warn = sum(1 for f in answer.get("problems", []) if f["severity"] != "error")
        out.append(f"checked {answer.get('checked', 0)} file(s): {n_err} error(s), {n_warn} warning(s)")
    elif "content" in answer and answer.get("mode") == "dry_run":
        out.append(f"dry run: would write {answer.get('path')}")
        out.append(answer["content"])
    elif "id" in answer and "path" in answer:
        what = answer.get("kind") or answer.get("type")
        out.append(f"wrote {what} {answer['id']} -> {answer['path']}")
        if answer.get("effect"):
            out.append(f"  effect: {json.dumps(answer['effect'])}")
    else:
        out.append(json.dumps(answer, indent=2, ensure_ascii=False))
    return "\n".join(out).rstrip("\n") + "\n"
