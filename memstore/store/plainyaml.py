"""A fast path for the frontmatter memstore writes itself.

libyaml's parser is C, but the objects it hands back are built by pyyaml's Python constructor,
event by event: ~80 µs for a memory's frontmatter, most of a store's first scan (10k files).
What memstore and its templates write is a small part of YAML: a mapping of plain or quoted
scalars and lists of scalars, one level of nested mapping (``links:``). ``parse`` reads that
part line by line and returns exactly what ``yaml.load(text, CSafeLoader)`` returns; anything
it does not fully recognise (anchors, tags, escapes, comments, block scalars, flow mappings,
duplicate keys, deeper nesting, odd characters) returns ``None`` and the caller goes through
CSafeLoader with every check it had, so hand-written or hostile YAML behaves as before.

Scalars are resolved by pyyaml's own ``Resolver`` (the YAML 1.1 rules CSafeLoader applies);
only the common resolved forms are built here (str, decimal int, plain decimal float, true /
false, null, UTC timestamps and dates), any other resolves to ``None`` (fallback).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"

_resolver = Resolver()


class _Unknown(Exception):
    """Something this parser does not read exactly as CSafeLoader does: fall back."""


# Only characters YAML allows unescaped, and no tab (indentation rules differ around tabs).
# U+2028/2029 break lines in YAML 1.1 and a BOM inside a stream is the reader's to judge.
_BAD_CHARS = re.compile("[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")
# A key: a plain word (resolved as a string below; ``yes:`` is a bool key).
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_\-]*):(?: +|$)")
# A plain scalar in block context that cannot be anything but itself: no indicator first, no
# ``: `` or `` #`` inside, no trailing ``:``.
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")
_INT_RE = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_FLOAT_RE = re.compile(r"-?[0-9]+\.[0-9]+\Z")
_DATETIME_RE = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(Z?)\Z")
_DATE_RE = re.compile(r"(\d{4})-(\d\d)-(\d\d)\Z")


def parse(text: str, *, normalise: bool = False) -> dict[str, Any] | None:
    """The mapping CSafeLoader would build from ``text``, or None: read it with CSafeLoader.
    ``normalise``: with dates and timestamps as ``files.safe_yaml`` hands them on (ISO strings),
    and None for an integer beyond 64 bits (the C path refuses it with its error)."""
    if "\\" in text or _BAD_CHARS.search(text):  # tabs and carriage returns included
        return None
    lines = text.split("\n")
    n = len(lines)
    out: dict[str, Any] = {}
    at = 0
    try:
        # The top level line by line; a value that goes on over more lines (a block list, a
        # nested mapping, a folded scalar) takes the general path below.
        while at < n:
            line = lines[at]
            at += 1
            seen = _LINES.get(line)
            if seen is not None and (at == n or lines[at][:1] != " "):
                # A whole line read before, its value on it alone: most lines of a store's
                # files repeat (kind, scope, author, rationale, tags, a date).
                if seen[0] in out:
                    raise _Unknown
                out[seen[0]] = _built(seen[1], normalise)
                continue
            if not line.strip(" "):
                continue
            m = _KEY.match(line)
            if m is None:
                raise _Unknown
            key = m.group(1)
            if key in out or not _string_key(key):
                raise _Unknown  # a duplicate (pyyaml keeps the last; not worth copying) or a typed key
            rest = line[m.end():]
            if not rest:
                value, at = _block(lines, at, 0)
            elif at < n and lines[at][:1] == " ":
                value, at = _inline(rest, lines, at, 0)
            else:
                out[key] = _one_line(rest, normalise)
                if len(_LINES) >= _SEEN_MAX:
                    _LINES.clear()
                _LINES[line] = (key, _SEEN[rest])
                continue
            out[key] = _norm(value) if normalise else value
    except _Unknown:
        return None
    return out or None


# Values seen before, as built (immutable, or copied on the way out): a store repeats most of its
# frontmatter values (kinds, scopes, authors, dates, tag lists). Bounded; cleared when full.
_SEEN: dict[str, tuple[int, Any, Any]] = {}  # value text -> (kind, value, normalised value)
_KEYS: dict[str, bool] = {}
# A top-level line whose value was read on it alone -> (key, its entry in _SEEN); only lines
# read without fault get here (``_one_line`` raised otherwise).
_LINES: dict[str, tuple[str, tuple[int, Any, Any]]] = {}
_SEEN_MAX = 1 << 16
_FAILED, _SCALAR, _LIST, _MAP = 0, 1, 2, 3


def _one_line(rest: str, normalise: bool) -> Any:
    """The value written after a key on its own line."""
    got = _SEEN.get(rest)
    if got is None:
        try:
            head = rest.rstrip(" ")
            if head[0] == "[":
                value: Any = _flow_list(head)
                got = (_LIST, tuple(value), _frozen(value))
            elif head[0] == "{":
                value = _flow_map(head)
                got = (_MAP, tuple(value.items()), _frozen(value))
            elif head[0] in "'\"":
                value = _quoted(head)
                got = (_SCALAR, value, value)
            else:
                _plain_ok(head)
                value = _scalar(head)
                got = (_SCALAR, value, _frozen(value))
        except _Unknown:
            got = (_FAILED, None, None)
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        _SEEN[rest] = got
    return _built(got, normalise)


def _built(got: tuple[int, Any, Any], normalise: bool) -> Any:
    """The value of a ``_SEEN`` entry, as ``parse`` hands it on (a fresh list or mapping)."""
    kind, value, norm = got
    if normalise:
        value = norm
        if value is _UNFIT:
            raise _Unknown
    if kind == _SCALAR:
        return value
    if kind == _LIST:
        return list(value)
    if kind == _MAP:
        return dict(value)
    raise _Unknown


_UNFIT = object()  # a value the normalised form refuses (the C path then says why)
_MAX_INT = 2**63  # files.MAX_INT


def _frozen(value: Any) -> Any:
    """The normalised form of a one-line value, as cached (lists and mappings as tuples)."""
    try:
        norm = _norm(value)
    except _Unknown:
        return _UNFIT
    if isinstance(norm, list):
        return tuple(norm)
    if isinstance(norm, dict):
        return tuple(norm.items())
    return norm


def _norm(value: Any) -> Any:
    """``files._normalise`` for what this parser builds: ISO strings for dates and timestamps;
    an integer beyond 64 bits or a float that is not finite raises (the C path reports it)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        if not -_MAX_INT <= value < _MAX_INT:
            raise _Unknown
        return value
    if kind is float:
        if not math.isfinite(value):
            raise _Unknown
        return value
    if kind is dt.datetime:
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    if kind is dt.date:
        return value.isoformat()
    if kind is list:
        return [_norm(v) for v in value]
    if kind is dict:
        return {k: _norm(v) for k, v in value.items()}
    raise _Unknown


def _string_key(key: str) -> bool:
    ok = _KEYS.get(key)
    if ok is None:
        if len(_KEYS) >= _SEEN_MAX:
            _KEYS.clear()
        ok = _KEYS[key] = _resolve(key) == _STR
    return ok


# YAML's white space is the space (tabs are refused above); Python's ``strip()`` would also eat
# U+00A0 and the other Unicode spaces, which YAML keeps as content.
def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _skip_blank(lines: list[str], at: int) -> int:
    while at < len(lines) and not lines[at].strip(" "):
        at += 1
    return at


def _mapping(lines: list[str], at: int, indent: int) -> tuple[dict[str, Any], int]:
    """A block mapping whose keys sit at ``indent``; returns it and the first line after it."""
    out: dict[str, Any] = {}
    at = _skip_blank(lines, at)
    while at < len(lines):
        line = lines[at]
        ind = _indent(line)
        if ind < indent:
            break
        if ind > indent:
            raise _Unknown
        m = _KEY.match(line, ind)
        if m is None:
            raise _Unknown
        key = m.group(1)
        if key in out or not _string_key(key):
            raise _Unknown
        rest = line[m.end():]
        at += 1
        if rest:
            value, at = _inline(rest, lines, at, indent)
        else:
            value, at = _block(lines, at, indent)
        out[key] = value
        at = _skip_blank(lines, at)
    return out, at


def _continuation(lines: list[str], at: int, indent: int) -> tuple[list[str], int]:
    """The lines that continue a value begun on a key's line: indented deeper than the key."""
    more: list[str] = []
    while at < len(lines) and lines[at].strip(" ") and _indent(lines[at]) > indent:
        more.append(lines[at].strip(" "))
        at += 1
    if at < len(lines) and not lines[at].strip(" "):
        # A blank line inside a folded scalar is a line break: only when the value goes on.
        nxt = _skip_blank(lines, at)
        if nxt < len(lines) and _indent(lines[nxt]) > indent:
            raise _Unknown
    return more, at


def _inline(rest: str, lines: list[str], at: int, indent: int) -> tuple[Any, int]:
    """A value that starts on its key's line (a scalar or a flow list, maybe over more lines)."""
    more, at = _continuation(lines, at, indent)
    head = rest.rstrip(" ")
    if head.startswith("["):
        return _flow_list(" ".join([head, *more])), at
    if head.startswith("{"):
        return _flow_map(" ".join([head, *more])), at
    if head.startswith('"') or head.startswith("'"):
        return _quoted(" ".join([head, *more]).rstrip(" ")), at
    for part in (head, *more):
        _plain_ok(part)
    value = " ".join([head, *more])
    return _scalar(value), at


def _block(lines: list[str], at: int, indent: int) -> tuple[Any, int]:
    """The value of a key with nothing after its colon: a block list, a nested mapping (one
    level, under a top-level key), or null."""
    nxt = _skip_blank(lines, at)
    if nxt >= len(lines):
        return None, nxt
    line = lines[nxt]
    ind = _indent(line)
    if line.startswith("- ", ind) or line[ind:] == "-":
        if ind < indent:
            return None, at
        return _block_list(lines, nxt, ind)
    if ind <= indent:
        return None, at
    if indent != 0:
        raise _Unknown  # deeper than memstore writes (links.relations holds mappings: C reads it)
    value, end = _mapping(lines, nxt, ind)
    return value, end


def _block_list(lines: list[str], at: int, indent: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    while at < len(lines):
        at = _skip_blank(lines, at)
        if at >= len(lines):
            break
        line = lines[at]
        ind = _indent(line)
        if ind < indent:
            break
        if ind > indent or not line.startswith("- ", ind):
            if ind == indent and not line.startswith("-", ind):
                break  # the next key of a mapping at the same indentation
            raise _Unknown
        item = line[ind + 2:].strip(" ")
        if not item:
            raise _Unknown
        at += 1
        more, at = _continuation(lines, at, indent)
        if item.startswith('"') or item.startswith("'"):
            out.append(_quoted(" ".join([item, *more]).rstrip(" ")))
        else:
            if item.startswith("[") or _KEY.match(item):
                raise _Unknown  # a nested list or a mapping in a list
            for part in (item, *more):
                _plain_ok(part)
            out.append(_scalar(" ".join([item, *more])))
    return out, at


def _plain_ok(text: str) -> None:
    """Raise unless ``text`` is a plain scalar (or a continuation line of one) that reads as
    exactly its characters in block context."""
    if not text or _leading_indicator(text) or ": " in text or " #" in text or text.endswith(":"):
        raise _Unknown
    if text.startswith("---") or text.startswith("..."):
        raise _Unknown


def _quoted(text: str) -> str:
    """A single- or double-quoted scalar filling ``text`` (its lines already folded: no escapes
    in a double-quoted one, the caller refused backslashes)."""
    quote = text[0]
    if len(text) < 2 or text[-1] != quote:
        raise _Unknown
    body = text[1:-1]
    if quote == "'":
        if "'" in body.replace("''", ""):
            raise _Unknown
        return body.replace("''", "'")
    if '"' in body:
        raise _Unknown
    return body


def _flow_items(text: str, opener: str, closer: str) -> list[str]:
    """The comma-separated items of a flow collection of scalars (nothing nested)."""
    if not text.endswith(closer) or text.count(opener) != 1 or text.count(closer) != 1:
        raise _Unknown
    inner = text[1:-1].strip(" ")
    if not inner:
        return []
    if any(c in inner for c in "[]{}") or " #" in inner or inner.startswith("#"):
        raise _Unknown  # nesting or a comment
    parts = [part.strip(" ") for part in inner.split(",")]
    if parts[-1] == "":
        parts.pop()  # a trailing comma is allowed in a flow collection
    return parts


def _flow_scalar(item: str) -> Any:
    if not item or "  " in item:
        raise _Unknown
    if item[0] in "'\"":
        return _quoted(item)
    if _leading_indicator(item) or ":" in item or "'" in item or '"' in item:
        raise _Unknown
    return _scalar(item)


def _leading_indicator(text: str) -> bool:
    """Whether ``text`` starts with a character YAML reads as syntax there (``-3`` is a number)."""
    return text[0] in _INDICATORS and not (text[0] == "-" and text[1:2].isdigit())


def _flow_list(text: str) -> list[Any]:
    """``[a, b, 'c d']``: scalars only, no nesting, no quotes holding separators."""
    return [_flow_scalar(item) for item in _flow_items(text, "[", "]")]


def _flow_map(text: str) -> dict[str, Any]:
    """``{problem: x, via: 'y'}`` (what the dumper writes for a mapping of scalars)."""
    out: dict[str, Any] = {}
    for item in _flow_items(text, "{", "}"):
        key, sep, value = item.partition(": ")
        if not sep or not _KEY.fullmatch(key + ": ") or key in out or not _string_key(key):
            raise _Unknown
        out[key] = _flow_scalar(value.strip(" "))
    if not out:
        raise _Unknown  # ``{}``: rare enough to leave to the C loader
    return out


def _resolve(value: str) -> str:
    return _resolver.resolve(ScalarNode, value, (True, False))


def _scalar(value: str) -> Any:
    """A plain scalar as SafeConstructor builds it (the common forms; others: fallback)."""
    tag = _resolve(value)
    if tag == _STR:
        return value
    if len(value) > 64:
        raise _Unknown  # a number that long: the C path's checks say what is wrong with it
    if tag == _INT and _INT_RE.match(value):
        return int(value)
    if tag == _FLOAT and _FLOAT_RE.match(value):
        return float(value)
    if tag == _BOOL and value in ("true", "false"):
        return value == "true"
    if tag == _NULL and value in ("null", "~"):
        return None
    if tag == _TIMESTAMP:
        m = _DATETIME_RE.match(value)
        if m is not None:
            parts = [int(g) for g in m.groups()[:6]]
            try:
                return dt.datetime(*parts, tzinfo=dt.UTC if m.group(7) else None)  # type: ignore[misc]
            except ValueError:
                raise _Unknown from None
        m = _DATE_RE.match(value)
        if m is not None:
            try:
                return dt.date(*(int(g) for g in m.groups()))
            except ValueError:
                raise _Unknown from None
    raise _Unknown
