"""Long queries (SPEC §10: pasted tracebacks are accepted): what of them a read searches.

A query over ``MAX_QUERY_CHARS`` is condensed: stack frames are dropped (paths, line numbers
and source lines of library code name things no memory mentions, which raises the read's
bar and adds noise to both lanes), then what is left is cut to its head (what the agent wrote
first: the question, the command) plus its error lines (the exception, the failed assertion),
where a traceback's meaning sits. The answer says so in ``warnings``.
"""

from __future__ import annotations

import re

MAX_QUERY_CHARS = 2000
MAX_ERROR_LINES = 12
_ERROR_LINE = re.compile(
    r"(?:^|[\s.:])(?:[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt)|Traceback|FAILED|FAIL|ERROR|Error|error|"
    r"fatal|panic|assert\w*|Caused by)\b"
)
# Python (`File "x.py", line 3, in f`), JVM/JS (`at f (x.js:3:9)`), Go (`\tx.go:12 +0x1d`) frames.
_FRAME = re.compile(r'^\s*(?:File ".*", line \d+|at \S.*[:(]\d+|\S+\.\w+:\d+(?: \+0x[0-9a-f]+)?$)')


def _without_frames(lines: list[str]) -> list[str]:
    out: list[str] = []
    after_python_frame = False
    for line in lines:
        if _FRAME.match(line):
            after_python_frame = line.lstrip().startswith("File ")
            continue
        if after_python_frame and line[:1].isspace():  # the source line Python prints under a frame
            after_python_frame = False
            continue
        after_python_frame = False
        out.append(line)
    return out


def condense(query: str, limit: int = MAX_QUERY_CHARS) -> tuple[str, str | None]:
    """(the text to search, a note for the answer's warnings, or None when it was used whole)."""
    if len(query) <= limit:
        return query, None
    lines = [line.rstrip() for line in _without_frames(query.splitlines()) if line.strip()]
    text = "\n".join(line.strip() for line in lines)
    how = "without its stack frames"
    if len(text) > limit:
        errors: list[str] = []
        for line in reversed(lines):  # the last error lines are the ones that explain the failure
            stripped = line.strip()[:300]
            if _ERROR_LINE.search(stripped) and stripped not in errors and len(errors) < MAX_ERROR_LINES:
                errors.insert(0, stripped)
        kept: list[str] = []
        used = 0
        for line in reversed(errors):  # the last ones first, should half the budget run out
            if used + len(line) + 1 > limit // 2:
                break
            kept.insert(0, line)
            used += len(line) + 1
        head = text[: limit - used].rstrip()
        text = "\n".join([head, *kept])
        how = f"its first {len(head)} characters" + (
            f" and {len(kept)} error line{'s' if len(kept) != 1 else ''}" if kept else "") + ", without stack frames"
    note = f"the query is {len(query)} characters (over {limit}); searched {len(text)} of them: {how}"
    return text, note
