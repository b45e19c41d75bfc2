"""The only writer of stdout/stderr: one JSON object when piped (or ``--json-out``), readable
text on a terminal. Errors also get one human line on stderr."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from ..store.relations import doubt_label
from .render import read_expected, read_explain

# Text from memory files (and their authors, dates, tags, paths) is untrusted: raw, a control
# character (ESC, CSI, OSC ...) could clear the screen, hide text, retitle the window or plant a
# hyperlink, and a bidi control could make text read differently from what it is. On a terminal
# they are shown as escapes; newline and tab stay.
_CONTROLS = [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)]
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_VISIBLE = {c: f"\\x{c:02x}" for c in _CONTROLS} | {c: f"<U+{c:04X}>" for c in _BIDI}
# JSON escapes C0 itself but leaves DEL, C1 and bidi controls raw; a \u escape is the same data.
_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in [0x7F, *range(0x80, 0xA0), *_BIDI]}
# Searching for each character (a memchr-like scan) finds the rare text that needs escaping;
# translate or a regex scan cost several times that on every answer (~8 ms for 14 kB of text
# that is not ASCII, against ~0.1 ms).
_RAW_VISIBLE = tuple(chr(c) for c in _VISIBLE)
_RAW_JSON = tuple(chr(c) for c in _JSON_ESCAPES)


def visible(text: str) -> str:
    """``text`` with control and bidi characters made visible, for a terminal."""
    return text.translate(_VISIBLE) if any(c in text for c in _RAW_VISIBLE) else text


def json_text(answer: dict[str, Any], indent: int | None = None) -> str:
    """One answer as JSON whose text carries no raw control or bidi character (the parsed data is
    unchanged: those characters are \\u escapes)."""
    text = json.dumps(answer, ensure_ascii=False, indent=indent)
    if text.isascii() and "\x7f" not in text:
        return text
    text = escape_surrogates(text)
    if not any(c in text for c in _RAW_JSON):
        return text
    return text.translate(_JSON_ESCAPES)


_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """JSON ``text`` with each lone surrogate written as its ``\\u`` escape. A file name that
    is not UTF-8 reaches an answer as surrogate escapes (``caf\\udce9`` for the byte 0xE9); raw,
    they would leave the output as bytes no JSON reader takes. Escaped, the answer is valid
    UTF-8 and ``os.fsencode`` of the parsed path gives the name's bytes back."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


# Colour on a terminal: a few SGR codes, nothing else (no cursor movement, no hyperlinks). They
# are laid over text that ``visible`` has already escaped, so memory text can never carry one.
# NO_COLOR (https://no-color.org) or TERM=dumb turns them off; piped output never has them.
RESET = "\x1b[0m"
COLOURS = {"dim": "\x1b[2m", "bold": "\x1b[1m", "red": "\x1b[31m", "green": "\x1b[32m", "yellow": "\x1b[33m",
           "blue": "\x1b[34m", "magenta": "\x1b[35m", "cyan": "\x1b[36m"}
SGR_CODES = (RESET, *COLOURS.values())
KIND_COLOUR = {"problem": "yellow", "solution": "green", "failed_tactic": "red", "fact": "cyan",
               "preference": "magenta", "change": "blue"}


def colour_wanted(tty: bool, env: Mapping[str, str] | None = None) -> bool:
    """Colour for a terminal whose user has not turned it off (NO_COLOR, TERM=dumb)."""
    env = os.environ if env is None else env
    return tty and not env.get("NO_COLOR") and env.get("TERM") != "dumb"


def paint(text: str, colour: str) -> str:
    return f"{COLOURS[colour]}{text}{RESET}"


_KIND_WORD = re.compile(r"^(\s*)(WATCH-OUT )?(problem|solution|failed_tactic|fact|preference|change)"
                        r"( +)([0-9a-z]{10,26})\b", re.M)
_DIM_LINE = re.compile(r"^(\s+(?:why|evidence|history|path|links|tags|similar to)\b.*|\d+ result\(s\).*|"
                       r"\d+ memor(?:y|ies)$|Groups best first.*)$", re.M)
_WARN_LINE = re.compile(r"^(warning: .*|DISPUTE .*|\s*archived\b.*)$", re.M)


def colourise(text: str) -> str:
    """``text`` (already made visible) with its kind words, ids, warnings and side notes coloured."""
    def kind(m: re.Match[str]) -> str:
        watch = paint(m.group(2), "red") if m.group(2) else ""
        return (f"{m.group(1)}{watch}{paint(m.group(3), KIND_COLOUR[m.group(3)])}{m.group(4)}"
                f"{paint(m.group(5), 'dim')}")

    text = _KIND_WORD.sub(kind, text)
    text = _DIM_LINE.sub(lambda m: paint(m.group(1), "dim"), text)
    return _WARN_LINE.sub(lambda m: paint(m.group(1), "yellow"), text)


def want_json(force: bool, stream: TextIO | None = None) -> bool:
    stream = stream or sys.stdout
    return force or not stream.isatty()


# A render is a name known to ``pretty``, a function answer -> text (verbs defined outside this
# module bring their own), or "markdown": ``answer["markdown"]`` is a document, printed as is.
Render = str | Callable[[dict[str, Any]], str] | None


def emit(answer: dict[str, Any], *, as_json: bool, render: Render = None) -> None:
    _write(format_answer(answer, as_json=as_json, render=render, tty=sys.stdout.isatty()))


def format_answer(answer: dict[str, Any], *, as_json: bool, render: Render, tty: bool,
                  colour: bool | None = None) -> str:
    """What ``emit`` prints; ``tty`` is whether stdout is a terminal (JSON is indented there).
    ``colour``: None decides from ``tty`` and this process's NO_COLOR / TERM (the daemon passes
    its client's choice)."""
    if isinstance(render, str) and render.startswith("field:"):
        # ``--print id``: the one value a script captures, the same piped or on a terminal.
        return visible(str(answer.get(render[len("field:"):], ""))) + "\n"
    if render == "markdown":
        return visible(str(answer["markdown"])) if tty else str(answer["markdown"])
    if as_json:
        return json_text(answer, indent=2 if tty else None) + "\n"
    text = pretty(answer, render)
    if render in ("read", "show", "list", "history", None) and (colour_wanted(tty) if colour is None else colour):
        return colourise(text)
    return text


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
    hint = f" (hint: {err['hint']})" if err.get("hint") else ""
    # One line, as promised: a message may quote the offending input, newlines and all.
    line = visible(" ".join(f"memstore: {err['code']}: {err['message']}{where}{hint}".splitlines())) + "\n"
    if not as_json:
        return line, ""
    out = json_text(answer)
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:  # a message quoting undecodable input: escaped, still one JSON object
        out = json.dumps(answer)
    return line, out + "\n"


def info(message: str) -> None:
    sys.stderr.write(visible(message) + "\n")


def _wrap(text: str, indent: str = "    ", width: int = 100) -> str:
    # A line the writer already kept to the width stays whole: filled again at a deeper indent,
    # it would leave a word alone on the next line.
    lines = []
    for para in text.splitlines() or [""]:
        lines.append(indent + para if len(para) <= width else
                     textwrap.fill(para, width=width + len(indent), initial_indent=indent,
                                   subsequent_indent=indent) or indent)
    return "\n".join(lines)


def _not_active(entry: dict[str, str]) -> str:
    return f" ({entry['state']})" if entry.get("state", "active") != "active" else ""


def _short(text: str, n: int = 90) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 1] + "…"


def _groups(results: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The results in groups, best group first: a problem with its solutions and failed tactics
    (and what the answer attached to them), each group ranked by its best score."""
    ids = {r["id"] for r in results}
    parent: dict[str, str] = {}
    for r in results:
        up = r.get("links", {}).get("problem") if r["kind"] in ("solution", "failed_tactic") else None
        att = (r.get("attached_to") or {}).get("id")
        if up in ids:
            parent[r["id"]] = up
        elif att in ids and att != r["id"]:
            parent[r["id"]] = att

    def root(mid: str) -> str:
        seen = {mid}
        while mid in parent and parent[mid] not in seen:
            mid = parent[mid]
            seen.add(mid)
        return mid

    groups: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault(root(r["id"]), []).append(r)
    order = {"problem": 0, "solution": 1, "failed_tactic": 2}
    out = []
    for rid, members in groups.items():
        lead = [m for m in members if m["id"] == rid]
        rest = sorted((m for m in members if m["id"] != rid), key=lambda m: (order.get(m["kind"], 3), -m["score"]))
        out.append(lead + rest)
    return sorted(out, key=lambda g: -max(m["score"] for m in g))


def _result_lines(r: dict[str, Any], indent: str) -> list[str]:
    sup_id = r.get("links", {}).get("superseded_by")
    # a failed tactic a later, voted-up solution overtook is history, not a full-weight watch-out
    tag = ("HISTORY " if sup_id else "WATCH-OUT ") if r["kind"] == "failed_tactic" else ""
    sup = f"  superseded by {sup_id[:10]}" if sup_id else ""
    doubts = doubt_label(r.get("doubts")) or ("  (stale: verify against the code)" if r.get("stale") else "")
    att = r.get("attached_to")
    placed = f"  ({att['type'].replace('_', ' ')} {att['id'][:10]})" if att else ""
    out = [f"{indent}{tag}{r['kind']} {r['id'][:10]}  score {r['score']:.2f}{sup}{doubts}{placed}",
           _wrap(r["text"], indent=indent + "    "),
           f"{indent}    why: {', '.join(r.get('reasons', []))}"]
    if r.get("explain"):
        out += [indent + line for line in read_explain(r["explain"])]
    for h in r.get("history", []):
        via = f", change {h['change'][:10]}" if h.get("change") else ""
        out.append(f"{indent}    history: superseded {h['id'][:10]} (replaced by {h['superseded_by'][:10]}{via})")
        out.append(_wrap(h["text"], indent=indent + "      "))
    return out


def _read_lines(answer: dict[str, Any]) -> list[str]:
    """A read for a person: the agents' guidance left out (``--json-out`` has it), results
    grouped and ranked so the order explains itself."""
    out = [f"warning: {w}" for w in answer.get("warnings", [])]
    if not answer["results"]:
        out.append("(no memory clears the bar: nothing relevant is known)")
    else:
        out.append("Groups best first (by their best score); a problem's solutions and failed tactics "
                   "(watch-outs) are listed under it. Memories are hypotheses: check them against the code.")
    for group in _groups(answer["results"]):
        out.append("")
        out.extend(_result_lines(group[0], ""))
        for member in group[1:]:
            out.extend(_result_lines(member, "  "))
    for dispute in answer.get("disputes", []):
        out.append(f"\nDISPUTE {' vs '.join(i[:10] for i in dispute['ids'])}: {dispute['guidance']}")
        for sd in dispute["sides"]:
            out.append(f"  {sd['kind']} {sd['id'][:10]} by {sd.get('author') or '?'}, {sd.get('created') or '?'}, "
                       f"evidence: {', '.join(sd.get('evidence', [])) or '-'}")
            out.append(_wrap(sd["text"], indent="      "))
    out += read_expected(answer.get("expected", []))
    if answer.get("partial"):
        p = answer["partial"]
        out.append(f"\n(partial: {p.get('embedded')} of {p.get('total')} memories embedded so far; the rest "
                   "answer by keyword until then)")
    st = answer.get("stats", {})
    out.append(f"\n{len(answer['results'])} result(s) from {st.get('candidates', 0)} candidates "
               f"in {st.get('elapsed_ms', 0)} ms")
    return out


def pretty(answer: dict[str, Any], render: Render) -> str:
    """Readable text of an answer, every field with control and bidi characters made visible."""
    if callable(render):
        return visible(render(answer).rstrip("\n")) + "\n"
    out: list[str] = []
    if render == "list":
        for m in answer["memories"]:
            flag = " (archived)" if m.get("archived") else ""
            out.append(f"{m['id'][:10]}  {m['kind']:<13} {m['scope']:<6} {_short(m['text'], 80)}{flag}")
        out.append(f"{answer['count']} memor{'y' if answer['count'] == 1 else 'ies'}")
        for bad in answer.get("invalid", []):
            out.append(f"invalid: {bad['path']}: {bad['error']}")
        more = answer.get("invalid_count", 0) - len(answer.get("invalid", []))
        if more > 0:
            out.append(f"... and {more} more invalid files (`memstore check` lists every one)")
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
            arch = d.get("archive") or {}
            why = f": {arch['why']}" if arch.get("why") else ""
            ev = f" (evidence: {', '.join(arch['evidence'])})" if arch.get("evidence") else ""
            by = f" by {arch.get('by') or '?'} at {arch.get('at') or '?'}" if arch else ""
            out.append(f"  archived{by}{why}{ev}")
        rels = d.get("relations") or {}
        for entry in rels.get("out", []):
            out.append(f"  {entry['type']} -> {entry['id']}{_not_active(entry)}")
        for entry in rels.get("in", []):
            out.append(f"  {entry['type']} <- {entry['id']}{_not_active(entry)}")
        u = d.get("utility", {})
        out.append(f"  utility: {u.get('global', 0):+.2f} from {u.get('votes', 0)} vote(s)")
    elif render == "read":
        out.extend(_read_lines(answer))
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
        verb = "proposed (waits for `memstore approve`)" if answer.get("pending") else "wrote"
        out.append(f"{verb} {what} {answer['id']} -> {answer['path']}")
        if answer.get("review"):
            out.append("  flagged for review: its confidence is low")
        if answer.get("effect"):
            out.append(f"  effect: {json.dumps(answer['effect'])}")
        for sim in answer.get("similar", []):
            doubt = "  MAY CONTRADICT it" if sim.get("may_contradict") else ""
            out.append(f"  similar to {sim['kind']} {sim['id'][:10]} ({sim['similarity']:.2f}){doubt}: "
                       f"{_short(sim['text'], 70)}")
        if answer.get("similar"):
            out.append("  (supersede, link or vote on it if it is the same knowledge: docs/writing.md)")
    else:
        out.append(json.dumps(answer, indent=2, ensure_ascii=False))
    return visible("\n".join(out).rstrip("\n")) + "\n"
