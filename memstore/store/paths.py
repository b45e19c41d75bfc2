"""Bounds on a path memstore is handed (a field of an agent hook's payload, the cwd or ``--store``
a client sends the daemon, an MCP server's ``--store``, a file cited as evidence) before it
reaches the file system.

Resolving a path costs one ``lstat`` per component, each on a longer prefix: quadratic in its
length. ``/proc/self/root`` followed by 300,000 ``/x`` kept ``Path.resolve()`` busy 16-100 s.
No system call takes a path past ``PATH_MAX`` (4096 bytes on Linux, 1024 on macOS), so a longer
one names no file memstore could open anyway: it is refused (or, where a payload may carry
anything, ignored) before anything looks at it, in well under a millisecond.

Standard library only: the agent hooks check their payload's cwd with this before they import
anything else.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..errors import InvalidRequest

MAX_PATH_BYTES = 4096  # Linux's PATH_MAX, the larger of the two
MAX_PATH_PARTS = 512  # separators: far past any real checkout, far below what makes resolving slow


def path_fault(raw: str) -> str | None:
    """Why ``raw`` is past the bounds (its size, its number of parts), or None."""
    if len(raw) > MAX_PATH_BYTES:  # a character is at least a byte: no need to encode a huge one
        return f"it is over {MAX_PATH_BYTES} bytes long ({len(raw)} characters)"
    size = len(raw.encode("utf-8", "surrogateescape"))
    if size > MAX_PATH_BYTES:
        return f"it is over {MAX_PATH_BYTES} bytes long ({size} bytes)"
    parts = raw.count("/") + 1
    if parts > MAX_PATH_PARTS:
        return f"it has over {MAX_PATH_PARTS} parts ({parts})"
    return None


def bounded(raw: object) -> str | None:
    """``raw`` when it is a string within the bounds, else None: for a payload field that may
    carry anything and is ignored when it is no path."""
    return raw if isinstance(raw, str) and path_fault(raw) is None else None


def check_path(raw: str, field: str) -> str:
    """``raw``, or InvalidRequest (``path_too_long``, exit 2) when it is past the bounds."""
    why = path_fault(raw)
    if why is None:
        return raw
    raise _refused(raw, field, why)


def _refused(raw: str, field: str, why: str) -> InvalidRequest:
    from ..errors import InvalidRequest

    shown = raw[:80] + "..." if len(raw) > 80 else raw
    return InvalidRequest(f"the path {shown!r} given as {field} is refused: {why}; no file has such a path",
                          field=field, code="path_too_long",
                          hint=f"a path may be at most {MAX_PATH_BYTES} bytes with at most {MAX_PATH_PARTS} parts")
