"""A three-way merge of a YAML settings file (``config.yaml``) by key, for ``memstore sync``.

Two machines that each changed a different setting both keep their change; the same setting
changed differently on both is a conflict, named by its dotted key. The merged text is this
machine's file with only the lines of the settings taken from the other machine patched, so
this machine's comments and layout stay; a result that does not read back as the merged
settings is refused (``Unpatchable``) rather than written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

_MISSING: Any = object()
_KEY_RE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+|\"[^\"]*\"|'[^']*'):(?=\s|$)")

Key = tuple[str, ...]


@dataclass(frozen=True)
class KeyConflict:
    key: str  # dotted
    mine: Any
    theirs: Any
    base: Any

    def shown(self) -> dict[str, Any]:
        return {"key": self.key, "mine": _shown(self.mine), "theirs": _shown(self.theirs), "base": _shown(self.base)}


class Unpatchable(Exception):
    """The settings merge, but this file's layout cannot be patched line by line."""


def _shown(value: Any) -> Any:
    return "(not set)" if value is _MISSING else value


def _load(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    data = yaml.safe_load(text)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise Unpatchable("not a mapping of settings")
    return data


def _flat(data: dict[str, Any], prefix: Key = ()) -> dict[Key, Any]:
    out: dict[Key, Any] = {}
    for key, value in data.items():
        path = (*prefix, str(key))
        if isinstance(value, dict) and value:
            out.update(_flat(value, path))
        else:
            out[path] = value
    return out


def conflicts_and_takes(base: str | None, mine: str, theirs: str,
                        keep: str | None = None) -> tuple[list[KeyConflict], dict[Key, Any], dict[Key, Any]]:
    """(the keys both sides changed differently, the keys to take from ``theirs`` into ``mine``,
    the merged settings), ``keep`` ("mine" or "theirs") deciding the conflicting keys."""
    b, m, t = _flat(_load(base)), _flat(_load(mine)), _flat(_load(theirs))
    conflicts: list[KeyConflict] = []
    take: dict[Key, Any] = {}
    merged: dict[Key, Any] = {}
    for key in sorted(set(b) | set(m) | set(t)):
        bv, mv, tv = b.get(key, _MISSING), m.get(key, _MISSING), t.get(key, _MISSING)
        if _same(mv, tv) or _same(tv, bv):
            value = mv
        elif _same(mv, bv) or keep == "theirs":
            value = tv
            take[key] = tv
        elif keep == "mine":
            value = mv
        else:
            conflicts.append(KeyConflict(".".join(key), mv, tv, bv))
            continue
        if value is not _MISSING:
            merged[key] = value
    return conflicts, take, merged


def _same(a: Any, b: Any) -> bool:
    return a is b or (a is not _MISSING and b is not _MISSING and type(a) is type(b) and a == b)


def merge_text(base: str | None, mine: str, theirs: str, keep: str | None = None) -> str:
    """``mine`` with the settings only ``theirs`` changed patched in (conflicts decided by
    ``keep``); raises Unpatchable when the patched text does not read back as the merge."""
    conflicts, take, merged = conflicts_and_takes(base, mine, theirs, keep)
    if conflicts:
        raise Unpatchable(f"conflicting keys: {', '.join(c.key for c in conflicts)}")
    lines = mine.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    their_lines = theirs.splitlines(keepends=True)
    if their_lines and not their_lines[-1].endswith("\n"):
        their_lines[-1] += "\n"
    for key, value in take.items():
        lines = _patch(lines, their_lines, key, value is _MISSING)
    text = "".join(lines)
    try:
        if _flat(_load(text)) != merged:
            raise Unpatchable("the patched file does not read back as the merged settings")
    except yaml.YAMLError as exc:
        raise Unpatchable(f"the patched file is not YAML: {exc}") from exc
    return text


# -- locating a key's lines ----------------------------------------------------------------------------
def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _blank(line: str) -> bool:
    return not line.strip()


def _block_end(lines: list[str], at: int) -> int:
    """One past the last line of the block the key on line ``at`` opens (deeper lines, and blank
    lines between them)."""
    indent = _indent(lines[at])
    end = at + 1
    i = at + 1
    while i < len(lines):
        if _blank(lines[i]):
            i += 1
            continue
        if _indent(lines[i]) <= indent:
            break
        i += 1
        end = i
    return end


def _unquote(key: str) -> str:
    return key[1:-1] if key[:1] in "\"'" and key[-1:] == key[:1] else key


def _find(lines: list[str], key: Key) -> tuple[int | None, int, int]:
    """(the line of ``key`` or None, how many of its parts were found, where the deepest found
    part's block ends)."""
    start, stop, depth_indent = 0, len(lines), -1
    found_at: int | None = None
    for depth, part in enumerate(key):
        child_indent: int | None = None
        hit = None
        for i in range(start, stop):
            line = lines[i]
            if _blank(line) or line.lstrip().startswith("#"):
                continue
            ind = _indent(line)
            if ind <= depth_indent:
                break
            if child_indent is None:
                child_indent = ind
            if ind != child_indent:
                continue
            match = _KEY_RE.match(line)
            if match and _unquote(match["key"]) == part:
                hit = i
                break
        if hit is None:
            return None, depth, stop if found_at is not None else len(lines)
        found_at = hit
        depth_indent = _indent(lines[hit])
        start, stop = hit + 1, _block_end(lines, hit)
    return found_at, len(key), stop


def _value_span(line: str) -> tuple[int, int]:
    """Where the inline value of a ``key: value  # comment`` line starts and ends."""
    match = _KEY_RE.match(line)
    assert match is not None
    start = match.end()
    body = line[start:].rstrip("\n")
    # a comment starts at " #" outside quotes
    quote = ""
    end = len(body)
    for i, ch in enumerate(body):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'" and (i == 0 or body[i - 1] in " [{,:"):
            quote = ch
        elif ch == "#" and i > 0 and body[i - 1] in " \t":
            end = i
            break
    value = body[:end].rstrip()
    lead = len(body[:end]) - len(body[:end].lstrip())
    return start + lead, start + len(value)


def _reindent(block: list[str], delta: int) -> list[str]:
    if delta >= 0:
        return [(" " * delta + ln) if not _blank(ln) else ln for ln in block]
    return [ln[-delta:] if ln[: -delta].strip() == "" else ln for ln in block]


def _patch(lines: list[str], theirs: list[str], key: Key, removed: bool) -> list[str]:
    at, depth, _end = _find(lines, key)
    if removed:
        if at is None:
            return lines
        lines = lines[:at] + lines[_block_end(lines, at):]
        for depth in range(len(key) - 1, 0, -1):  # a parent left with no setting goes too
            parent, _, _ = _find(lines, key[:depth])
            if parent is None:
                break
            rest = lines[parent + 1:_block_end(lines, parent)]
            if any(not _blank(ln) and not ln.lstrip().startswith("#") for ln in rest):
                break
            lines = lines[:parent] + lines[parent + 1 + len(rest):]
        return lines
    t_at, t_depth, _t_end = _find(theirs, key)
    if t_at is None or t_depth != len(key):
        raise Unpatchable(f"{'.'.join(key)}: not found in the other machine's file")
    if at is not None:
        t_end = _block_end(theirs, t_at)
        end = _block_end(lines, at)
        single = end == at + 1 or all(_blank(ln) or ln.lstrip().startswith("#") for ln in lines[at + 1:end])
        their_single = t_end == t_at + 1 or all(
            _blank(ln) or ln.lstrip().startswith("#") for ln in theirs[t_at + 1:t_end])
        if single and their_single:
            vs, ve = _value_span(lines[at])
            tvs, tve = _value_span(theirs[t_at])
            value = theirs[t_at][tvs:tve]
            line = lines[at]
            if ve == vs:  # `key:` with nothing after it: the value goes after one space
                new = line[:vs].rstrip(" ") + " " + value + line[vs:]
            else:  # the comment after the value keeps its column
                tail = line[ve:]
                gap = len(tail) - len(tail.lstrip(" "))
                if gap and tail.lstrip(" ").startswith("#"):
                    tail = " " * max(1, gap + (ve - vs) - len(value)) + tail.lstrip(" ")
                new = line[:vs] + value + tail
            return [*lines[:at], new, *lines[at + 1:]]
        block = _reindent(theirs[t_at:t_end], _indent(lines[at]) - _indent(theirs[t_at]))
        return lines[:at] + block + lines[end:]
    # added on the other machine: its block for the first missing part goes under the deepest
    # part this file has (or at the end of the file)
    missing = key[:depth + 1]
    m_at, _, _ = _find(theirs, missing)
    if m_at is None:
        raise Unpatchable(f"{'.'.join(key)}: not found in the other machine's file")
    block = theirs[m_at:_block_end(theirs, m_at)]
    if depth == 0:
        where = len(lines)
        indent = 0
        while where > 0 and _blank(lines[where - 1]):
            where -= 1
    else:
        parent, _, _ = _find(lines, key[:depth])
        assert parent is not None
        where = _block_end(lines, parent)
        children = [ln for ln in lines[parent + 1:where] if not _blank(ln) and not ln.lstrip().startswith("#")]
        indent = _indent(children[0]) if children else _indent(lines[parent]) + 2
    block = _reindent(block, indent - _indent(theirs[m_at]))
    return lines[:where] + block + lines[where:]
