"""``memstore review``'s three ways out: a PR comment in Markdown, GitHub workflow-command
annotations, and the JSON answer (docs/review.md).

Memory text comes from files a PR can write: in a comment it could ping people (``@team``),
close issues (``fixes #1``), forge the comment's hidden marker or inject HTML. Every piece of
it is shown as inert text: HTML escaped, mentions, issue references (``#1``, ``GH-1``), commit
SHAs and bare links broken with a zero-width joiner, on one line, cut to a length. The answer may
come from an artifact written by a job that ran a fork's code, so each field is read defensively:
a wrong type is refused, not rendered, and the only links the comment makes go to this
repository's blob at a reviewed commit, from a plain relative path (``repo_path``).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any
from urllib.parse import quote

from ..errors import InvalidRequest
from ..store.relations import DOUBTS, doubt_label

MARKER = "<!-- memstore-review -->"  # the posted comment is found again by this first line
RESOLVED = "memstore: nothing left to say about this change."
MAX_COMMENT = 60_000  # GitHub refuses a comment body over 65,536 characters
MAX_TEXT = 400  # characters of one memory's text in the comment
MAX_ANNOTATIONS = 50  # GitHub shows at most 10 warnings per step and 50 per job
_ZWJ = "\u200d"
_HEX_RUN = re.compile(r"(?i)\b[0-9a-f]{7,}\b")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_NOT_IN_PATH = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def inert(text: Any, limit: int = MAX_TEXT) -> str:
    """Untrusted text as one line of Markdown that links, pings and renders nothing."""
    s = " ".join(str(text).split())
    if len(s) > limit:
        s = s[: limit - 1].rstrip() + "…"
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = re.sub(r"([@#])(?=\w)", lambda m: m.group(1) + _ZWJ, s)
    # GitHub links GH-123 to an issue and 7 to 40 hex digits to the commit they name: the GH- is
    # cut from its number, a hex run into pieces of six (too short for GitHub to take for a SHA)
    s = re.sub(r"(?i)\b(gh)-(?=\d)", rf"\1-{_ZWJ}", s)
    s = _HEX_RUN.sub(lambda m: _ZWJ.join(m.group(0)[i:i + 6] for i in range(0, len(m.group(0)), 6)), s)
    # GitHub links a bare URL or www. name by itself: a memory (or a path) could plant a link
    s = re.sub(r"(?i)\b(www)\.", rf"\1{_ZWJ}.", s).replace("://", f":{_ZWJ}//")
    # Markdown punctuation that could open a link, an image, emphasis or a code span
    return re.sub(r"([\\`*_\[\]|!])", r"\\\1", s)


def _code(text: Any) -> str:
    s = " ".join(str(text).split())[:200].replace("`", "'")
    return f"`{s}`"


def _get(d: Any, key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    if not isinstance(d, dict):
        raise InvalidRequest("the review answer is not a JSON object where one is expected", code="bad_input")
    v = d.get(key, default)
    if v is not None and not isinstance(v, kind):
        raise InvalidRequest(f"the review answer's {key!r} has the wrong type", code="bad_input")
    return v


def _pair(d: Any, key: str) -> list[int] | None:
    """A line range ``[lo, hi]`` of the review answer, or None when it has none. The answer can
    come from a fork's job (``--from``): anything else is refused, as ``_get`` refuses a type."""
    v = _get(d, key, list)
    if not v:
        return None
    if not (len(v) == 2 and all(type(x) is int for x in v) and 1 <= v[0] <= v[1]):
        raise InvalidRequest(f"the review answer's {key!r} is not a line range [first, last]", code="bad_input")
    return list(v)


def repo_path(path: str | None) -> str | None:
    """``path`` when it is a plain relative path inside the repository, the only thing a link is
    built from; else None. The answer may come from a fork's job: ``../../../../attacker/x``
    after ``/blob/SHA/`` is a link to another repository once a browser resolves it."""
    if not path or path.startswith("/") or "\\" in path or _SCHEME.match(path):
        return None
    if any(part in ("", ".", "..") for part in path.split("/")):
        return None
    if any(unicodedata.category(ch) in _NOT_IN_PATH for ch in path):
        return None
    return path


def _blob(text: str, path: str | None, sha: str, link_base: str | None, anchor: str = "") -> str:
    """``text`` linked to this repository's ``path`` at commit ``sha``, or ``text`` alone (it is
    already inert) when any of them is not what a link may be built from."""
    safe = repo_path(path)
    if not link_base or safe is None or not re.fullmatch(r"[0-9a-f]{40}", sha or ""):
        return text
    return f"[{text}]({link_base}/blob/{sha}/{quote(safe)}{anchor})"


def _link(path: str, lines: list[int] | None, sha: str, link_base: str | None) -> str:
    shown = _code(path + (f"#L{lines[0]}" + (f"-L{lines[1]}" if lines[1] != lines[0] else "") if lines else ""))
    return _blob(shown, path, sha, link_base, f"#L{lines[0]}-L{lines[1]}" if lines else "")


def _mem(e: dict[str, Any], ans: dict[str, Any], link_base: str | None) -> str:
    """A memory's id, linked to its file at the head when there is a place to link to."""
    mid, path, sha = _get(e, "id", str, "?"), _get(e, "path", str), _get(ans, "head_sha", str, "")
    return _blob(_code(mid), path, sha, link_base)


def _range(r: Any) -> str:
    if not (isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r)):
        return "?"
    return f"L{r[0]}" if r[0] == r[1] else f"L{r[0]}-L{r[1]}"


def _doubts(e: dict[str, Any]) -> str:
    """The memory's doubts (``relations.doubts``) in words; only the known names are shown."""
    known = [d for d in _get(e, "doubts", list, []) if isinstance(d, dict) and d.get("doubt") in DOUBTS]
    return f" *{doubt_label(known).strip()}*" if known else ""


def _touched_item(e: dict[str, Any], ans: dict[str, Any], link_base: str | None) -> str:
    kind, text = inert(_get(e, "kind", str, "?"), 20), inert(_get(e, "text", str, ""))
    lines = [f"- **{kind}** {_mem(e, ans, link_base)}: {text}{_doubts(e)}"]
    for c in _get(e, "citations", list, []):
        path = _get(c, "path", str, "?")
        overlap = _get(c, "overlap", list, [])
        if _get(c, "lines", list) is None:
            where = _link(path, None, _get(ans, "head_sha", str, ""), link_base)
            what = inert(_get(c, "note", str, "file-level citation: the file changed"), 120)
        else:
            status = _get(c, "file_status", str, "M")
            sha = _get(ans, "merge_base", str, "") if status == "D" else _get(ans, "head_sha", str, "")
            where = _link(path, _pair(c, "head_lines") if status != "D" else _pair(c, "lines"), sha, link_base)
            cited = _range(_get(c, "lines", list))
            what = (f"cites {cited}; this change rewrites " + ", ".join(_range(o) for o in overlap)
                    + (" (the file is deleted)" if status == "D" else ""))
            note = _get(c, "note", str)
            if note:
                what += f"; {inert(note, 120)}"
        lines.append(f"  - {where}: {what}")
    who = [x for x in (_get(e, "author", str), _get(e, "created", str)) if x]
    if who:
        lines.append(f"  - written by {inert(' on '.join(who), 80)}")
    return "\n".join(lines)


def _seen_item(e: dict[str, Any], ans: dict[str, Any], link_base: str | None) -> str:
    kind = _get(e, "kind", str, "?")
    label = {"failed_tactic": "failed tactic", "problem": "problem", "solution": "solution"}.get(kind, inert(kind, 20))
    s = f"- **{label}** {_mem(e, ans, link_base)}: {inert(_get(e, 'text', str, ''))}{_doubts(e)}"
    if kind == "failed_tactic":
        s += " *(tried before and failed here: is this change different?)*"
    why = _get(e, "reason", str)
    if why:
        s += f"\n  - why: {inert(why, 200)}"
    return s


def _line(kind: str, mid: str, text: str) -> str:
    return f"- **{inert(kind, 20)}** {_code(mid)}: {inert(text)}"


def _added_item(m: dict[str, Any]) -> str:
    who = [x for x in (_get(m, "author", str), _get(m, "episode", str)) if x]
    s = _line(_get(m, "kind", str, "?"), _get(m, "id", str, "?"), _get(m, "text", str, ""))
    if who:
        s += f" ({inert(', episode '.join(who), 80)})"
    return s


def markdown(ans: dict[str, Any], *, link_base: str | None = None, budget: int = MAX_COMMENT) -> str:
    """The PR comment: the marker line, then each section that has something to say, items in a
    stable order and each memory once, cut to ``budget`` characters with a count of the rest."""
    sections = _get(ans, "sections", dict, {})
    head = [MARKER, "### memstore: memory on this change"]
    if not sections:
        return "\n".join([*head, "", RESOLVED]) + "\n"
    blocks: list[tuple[str, list[str]]] = []
    seen_ids: set[str] = set()

    def fresh(items: list[Any]) -> list[Any]:
        out = []
        for it in items:
            mid = _get(it, "id", str, "")
            if mid and mid in seen_ids:
                continue
            seen_ids.add(mid)
            out.append(it)
        return out

    touched = fresh(_get(sections, "touched", list, []))
    if touched:
        blocks.append(("#### Memories this change may make stale\nTheir evidence cites code this change "
                       "rewrites: check that each still holds, or supersede it.",
                       [_touched_item(e, ans, link_base) for e in touched]))
    seen = fresh(_get(sections, "seen_before", list, []))
    if seen:
        blocks.append(("#### Seen before\nPast problems, solutions and failed tactics like this change.",
                       [_seen_item(e, ans, link_base) for e in seen]))
    added = _get(sections, "added", dict)
    if added:
        items = [_added_item(m) for m in fresh(_get(added, "memories", list, []))]
        for ev in _get(added, "events", list, []):
            items.append(f"- event {inert(_get(ev, 'type', str, '?'), 20)} on "
                         f"{_code(_get(ev, 'memory', str) or _get(ev, 'new_fact', str) or '?')}")
        for ep in _get(added, "episodes", list, []):
            agent = inert(_get(ep, "agent", str) or "?", 60)
            items.append(f"- episode {_code(_get(ep, 'episode', str, '?'))} by {agent}: "
                         f"{inert(_get(ep, 'task', str) or '', 160)}")
        for p in [*_get(added, "problems", list, []), *_get(added, "check", list, [])]:
            sev = _get(p, "severity", str, "error")
            items.append(_line(sev, _get(p, "path", str, "?"), _get(p, "message", str, "")))
        if items:
            blocks.append(("#### Memories added or changed by this PR", items))
    out = "\n".join(head)
    left = sum(len(items) for _, items in blocks)
    tail = "\n\n<sub>memory is a hypothesis from earlier work, not ground truth: the code is.</sub>\n"
    for title, items in blocks:
        piece = "\n\n" + title + "\n\n"
        if len(out) + len(piece) + len(tail) + 200 > budget:
            break
        out += piece
        for i, item in enumerate(items):
            if len(out) + len(item) + len(tail) + 200 > budget:
                out += f"\n…and {left} more not shown here (the comment's size limit): run `memstore review` locally."
                return out + tail
            out += ("\n" if i else "") + item
            left -= 1
    return out + tail


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def github(ans: dict[str, Any], limit: int = MAX_ANNOTATIONS) -> str:
    """Workflow commands (``::warning file=...,line=...::``) on the changed lines, at most
    ``limit``; one ``::notice::`` counts the rest."""
    sections = _get(ans, "sections", dict, {})
    notes: list[str] = []
    for e in _get(sections, "touched", list, []):
        text = " ".join(str(_get(e, "text", str, "")).split())[:300]
        for c in _get(e, "citations", list, []):
            path = _get(c, "path", str, "")
            hl = _pair(c, "head_lines")
            props = f"file={_escape_prop(path)}"
            if hl:
                props += f",line={hl[0]},endLine={hl[1]}"
            props += ",title=" + _escape_prop(f"memstore: memory {_get(e, 'id', str, '?')} may be stale")
            kind = _get(e, "kind", str, "?")
            notes.append(f"::warning {props}::{_escape_data(kind + ': ' + text)}")
    for e in _get(sections, "seen_before", list, []):
        text = " ".join(str(_get(e, "text", str, "")).split())[:300]
        what = f"{_get(e, 'kind', str, '?')} {_get(e, 'id', str, '?')}"
        props = "title=" + _escape_prop(f"memstore: seen before ({what})")
        notes.append(f"::notice {props}::{_escape_data(text)}")
    added = _get(sections, "added", dict) or {}
    for p in [*_get(added, "problems", list, []), *_get(added, "check", list, [])]:
        level = "error" if _get(p, "severity", str, "error") == "error" else "warning"
        props = f"file={_escape_prop(_get(p, 'path', str, ''))},title=memstore check"
        notes.append(f"::{level} {props}::{_escape_data(str(_get(p, 'message', str, '')))}")
    out = notes[:limit]
    if len(notes) > limit:
        out.append(f"::notice title=memstore::{len(notes) - limit} more memory notes not annotated "
                   "(see the review comment or `memstore review`)")
    return "\n".join(out) + ("\n" if out else "")
