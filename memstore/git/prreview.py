"""What memory has to say about a change under review (``memstore review``), the git half.

Two of the review's three sections are git questions and live here: which memories cite the
lines a change rewrites (``touched``), and what the change adds to ``.memory/`` (``added``:
``check --base`` and ``diff``). The third, what the change repeats of past problems and failed
tactics, is a read and is asked by ``verbs/review``.

A memory's line citation speaks of the file as it was at its ``@rev``, else at the commit that
added the memory file, else (not committed: written against the work tree of the base) at the
base. When that commit is not the base, its lines are carried to the base through ``git diff
-U0`` before they are compared with the change's hunks: lines rewritten in between land on
what replaced them, and the memory says its lines had moved on already.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import gitops
from ..errors import NotFound, StoreError
from ..store.disk import Store
from ..store.graph import archived_ids
from ..store.model import Memory
from ..store.workspace import Workspace
from .check import _store_prefix
from .staged import in_store
from .stale import HUNK_RE as _HUNK
from .stale import Hunk, StaleChecker, carry_lines, owning_worktree

MAX_HUNK_TEXT = 6000  # characters of changed lines kept for the "seen before" query


@dataclass
class FileChange:
    path: str
    status: str  # A M D T
    hunks: list[Hunk] = field(default_factory=list)
    added: list[str] = field(default_factory=list)  # the change's new lines (for the read)
    removed: list[str] = field(default_factory=list)


@dataclass
class Change:
    """The diff under review: merge-base of base and head, against head."""

    base: str
    head: str
    merge_base: str
    files: dict[str, FileChange]


def resolve(store: Store, base: str, head: str | None) -> tuple[str, str, str]:
    """(base sha, head sha, merge-base sha), or a typed error naming what does not resolve."""
    wt = store.worktree
    if wt is None or not gitops.has_head(wt):
        raise StoreError("the repo has no commits yet, so there is nothing to review")
    shas = []
    for flag, rev in (("base", base), ("head", head or "HEAD")):
        sha = gitops.resolve_commit(rev, wt)
        if sha is None:
            raise NotFound(f"--{flag} {rev!r} does not resolve to a commit", field=flag, code="unknown_rev",
                           hint="fetch it first (CI: actions/checkout with fetch-depth: 0)")
        shas.append(sha)
    return shas[0], shas[1], gitops.merge_base(shas[0], shas[1], wt) or shas[0]


_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_QUOTED = r'"(?:[^"\\]|\\.)*"'


def unquote_path(name: str) -> str:
    """A path as git prints it in a diff: C-quoted (``"a/caf\\303\\251.py"``) when it holds a
    quote, a backslash or a control character (and, unless ``core.quotePath=false``, a byte
    past ASCII), as is otherwise."""
    if len(name) < 2 or not (name.startswith('"') and name.endswith('"')):
        return name
    out = bytearray()
    body, i = name[1:-1], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 == len(body):
            out += ch.encode("utf-8")
            i += 1
        elif body[i + 1] in "01234567":
            out.append(int(body[i + 1:i + 4], 8) & 0xFF)
            i += 4
        else:
            out.append(_C_ESCAPES.get(body[i + 1], ord(body[i + 1])))
            i += 2
    return out.decode("utf-8", "surrogateescape")


def _header_path(rest: str, side: str) -> str:
    """The path of a ``--- a/x`` / ``+++ b/x`` header's ``rest``; "" for /dev/null. Git ends a
    name that holds a space with a TAB (for patch(1)); a quoted name is unquoted first."""
    name = unquote_path(rest[:-1] if rest.endswith("\t") else rest)
    return name[2:] if name.startswith(side + "/") else ""


def parse_diff(text: str) -> dict[str, FileChange]:
    """``git diff -U0 --no-renames`` output as FileChange per path (binary files have no hunks).
    ``---``/``+++`` are headers only between a ``diff --git`` line and that file's first hunk:
    in a hunk they are a removed ``-- comment`` or an added ``++ x``."""
    files: dict[str, FileChange] = {}
    cur: FileChange | None = None
    old_path = ""
    header = False
    for line in text.split("\n"):
        if line.startswith("diff --git "):
            cur = None
            old_path = ""
            header = True
        elif header and line.startswith("--- "):
            old_path = _header_path(line[4:], "a")
        elif header and line.startswith("+++ "):
            new_path = _header_path(line[4:], "b")
            path = new_path or old_path
            status = "A" if not old_path else "D" if not new_path else "M"
            cur = files.setdefault(path, FileChange(path, status))
        elif header and line.startswith("Binary files ") and cur is None:
            m = re.fullmatch(rf"Binary files ({_QUOTED}|a/.+|/dev/null) and ({_QUOTED}|b/.+|/dev/null) differ", line)
            if m:
                old, new = _header_path(m.group(1), "a"), _header_path(m.group(2), "b")
                path = new or old
                files[path] = FileChange(path, "A" if not old else "D" if not new else "M")
        elif cur is not None and line.startswith("@@"):
            header = False
            m = _HUNK.match(line)
            if m:
                cur.hunks.append(Hunk(int(m.group(1)), int(m.group(2) or 1), int(m.group(3)), int(m.group(4) or 1)))
        elif cur is not None and not header and line.startswith("+"):
            cur.added.append(line[1:])
        elif cur is not None and not header and line.startswith("-"):
            cur.removed.append(line[1:])
    return files


def _diff(old: str, new: str, wt: Path, paths: list[str] | None = None) -> dict[str, FileChange]:
    # core.quotePath=false: a name past ASCII (café.py) as itself, not C-quoted octal
    args = ["-c", "core.quotePath=false", "diff", "-U0", "--no-renames", "--no-color", "--no-ext-diff", old, new]
    proc = gitops.run([*args, "--", *paths] if paths is not None else args, wt, check=False)
    return parse_diff(proc.stdout) if proc.returncode == 0 else {}


def change(store: Store, base: str, head: str | None = None) -> Change:
    """The change from the merge-base of ``base`` and ``head`` to ``head``, outside ``.memory/``."""
    b, h, mb = resolve(store, base, head)
    assert store.worktree is not None
    prefix = _store_prefix(store)
    files = {p: fc for p, fc in _diff(mb, h, store.worktree).items() if p != prefix and in_store(p, prefix) is None}
    return Change(b, h, mb, files)


@dataclass
class Citation:
    path: str
    lines: tuple[int, int] | None  # at the base (mapped); None: the citation names the whole file
    cited: str  # the evidence ref as written
    overlaps: list[tuple[int, int]] = field(default_factory=list)  # base lines the change rewrites
    moved_before: bool = False  # the cited lines had already been rewritten before the base
    file_status: str = "M"


class _Carrier:
    """A memory's cited lines as they stand at the change's merge-base (see the module doc)."""

    def __init__(self, ws: Workspace, ch: Change, mems: list[Memory]) -> None:
        store = ws.repo
        assert store is not None and store.worktree is not None
        self.wt = store.worktree
        self.ch = ch
        self.added = StaleChecker(store)._added_in(mems)
        self.revs: dict[str, str | None] = {}
        self.carried: dict[tuple[str, str], dict[str, FileChange]] = {}
        self.base_text: dict[str, list[str]] = {}

    def text(self, path: str) -> list[str]:
        if path not in self.base_text:
            raw_text = gitops.show_file(self.ch.merge_base, path, self.wt) or b""
            self.base_text[path] = raw_text.decode("utf-8", "replace").split("\n")
        return self.base_text[path]

    def standing(self, mem: Memory, ref: Any) -> tuple[list[int], bool]:
        """The non-blank cited base lines still standing, and whether some had moved on before."""
        origin: str | None = None
        if ref.rev:
            if ref.rev not in self.revs:
                self.revs[ref.rev] = gitops.resolve_commit(ref.rev, self.wt)
            origin = self.revs[ref.rev]
        origin = origin or self.added.get(mem.id)
        text = self.text(ref.path)
        # a memory from a clone or a PR can cite L1-L2000000000: never a list that long
        lo, hi = ref.lines
        hi = min(hi, len(text))
        standing = list(range(lo, hi + 1))
        moved_before = False
        if origin and origin != self.ch.merge_base:
            key = (origin, ref.path)
            if key not in self.carried:
                self.carried[key] = _diff(origin, self.ch.merge_base, self.wt, [ref.path])
            between = self.carried[key].get(ref.path)
            if between is not None:
                # the file's length at ``origin``: the base's less what the hunks since added
                hi = min(ref.lines[1], len(text) - sum(hk.new_count - hk.old_count for hk in between.hunks))
                # the file was added since (its lines then were another file's) or
                # rewritten: only the cited lines still standing at the base count
                kept = {} if between.status == "A" else carry_lines(between.hunks, range(lo, hi + 1))
                standing = sorted(kept.values())
                moved_before = len(standing) < hi - lo + 1
        # a blank line carries nothing of what a memory cites: it neither keeps a citation
        # alive nor makes one stale
        return [n for n in standing if n <= len(text) and text[n - 1].strip()], moved_before


def touched(ws: Workspace, ch: Change, *, exclude: set[str] | None = None) -> list[dict[str, Any]]:
    """Memories whose ``file:`` evidence cites a file the change modifies: for line citations
    only when a hunk overlaps the cited lines, for file citations always (and said so)."""
    store = ws.repo
    if store is None or owning_worktree(store) is None or not ch.files:
        return []
    cat = ws.catalog("repo")
    archived = _archived(ws)
    candidates: list[tuple[Memory, list[Any]]] = []
    for mem in cat.memories.values():
        if mem.id in archived or (exclude and mem.id in exclude):
            continue
        refs = [ref for ref in mem.file_evidence() if ref.path in ch.files]
        if refs:
            candidates.append((mem, refs))
    if not candidates:
        return []
    carrier = _Carrier(ws, ch, [m for m, _ in candidates])
    out: list[dict[str, Any]] = []
    for mem, refs in candidates:
        cites: list[Citation] = []
        for ref in refs:
            fc = ch.files[ref.path]
            cite = Citation(ref.path, ref.lines, ref.raw, file_status=fc.status)
            if ref.lines is not None:
                standing, cite.moved_before = carrier.standing(mem, ref)
                if not standing:
                    continue  # every cited line was rewritten before this change: stale already, not by it
                cite.lines = (standing[0], standing[-1])
                if fc.status == "D":
                    cite.overlaps = [cite.lines]
                else:
                    cite.overlaps = _overlaps(fc, set(standing), carrier.text(ref.path))
                if not cite.overlaps:
                    continue
            cites.append(cite)
        if cites:
            out.append(_touched_entry(store, mem, cites, ch))
    # line overlaps first (the sharpest claim), then file-level, then by id: a stable order
    out.sort(key=lambda e: (not any(c["lines"] for c in e["citations"]), e["id"]))
    return out


def distance(ws: Workspace, ch: Change, mems: list[Memory]) -> dict[str, tuple[str, int]]:
    """For each memory citing lines of a file the change modifies: (path, the fewest base lines
    between its cited lines, as they stand at the base, and a hunk of the change), 0 when a
    hunk touches them. A memory whose citations in the changed files are all gone (rewritten
    before this change) or name whole files has no entry."""
    store = ws.repo
    if store is None or owning_worktree(store) is None or not ch.files:
        return {}
    cands = [(m, [r for r in m.file_evidence() if r.path in ch.files and r.lines is not None]) for m in mems]
    cands = [(m, refs) for m, refs in cands if refs]
    if not cands:
        return {}
    carrier = _Carrier(ws, ch, [m for m, _ in cands])
    out: dict[str, tuple[str, int]] = {}
    for mem, refs in cands:
        for ref in refs:
            fc = ch.files[ref.path]
            standing, _ = carrier.standing(mem, ref)
            if not standing or not fc.hunks:
                continue
            lo, hi = standing[0], standing[-1]
            gap = min(max(hk.old_start - hi, lo - (hk.old_start + max(hk.old_count, 1) - 1), 0)
                      for hk in fc.hunks)
            if mem.id not in out or gap < out[mem.id][1]:
                out[mem.id] = (ref.path, gap)
    return out


def _overlaps(fc: FileChange, standing: set[int], text: list[str]) -> list[tuple[int, int]]:
    """The cited base lines (``standing``) the change rewrites, as ranges, one per hunk. A line
    the change deletes but adds again exactly, indentation included (an import moved), is
    moved, not rewritten (reindented into a ``try:`` it is rewritten); an insertion counts only
    between two cited lines."""
    moved = {line.rstrip() for line in fc.added}  # the same line, indentation and all
    out = []
    for hk in fc.hunks:
        if hk.old_count == 0:
            if hk.old_start in standing and hk.old_start + 1 in standing:
                out.append((hk.old_start, hk.old_start))
            continue
        hit = [n for n in range(hk.old_start, hk.old_start + hk.old_count)
               if n in standing and not (n <= len(text) and text[n - 1].rstrip() in moved)]
        if hit:
            out.append((hit[0], hit[-1]))
    return out


def _touched_entry(store: Store, mem: Memory, cites: list[Citation], ch: Change) -> dict[str, Any]:
    citations = []
    for c in cites:
        fc = ch.files[c.path]
        item: dict[str, Any] = {"path": c.path, "evidence": c.cited, "file_status": c.file_status,
                                "lines": list(c.lines) if c.lines else None,
                                "overlap": [list(o) for o in c.overlaps],
                                "head_lines": _head_lines(fc, c.overlaps) if c.overlaps else None}
        if c.lines is None:
            n = len(fc.hunks)
            item["note"] = f"file-level citation: the file changed ({n} hunk{'' if n == 1 else 's'})"
        if c.moved_before:
            item["note"] = "some cited lines had already changed before this change; the others are compared"
        citations.append(item)
    return {"id": mem.id, "kind": mem.kind, "text": mem.text, "author": mem.author, "created": mem.created,
            "path": store.display_path(mem.path) if mem.path else None, "citations": citations}


def _head_lines(fc: FileChange, overlaps: list[tuple[int, int]]) -> list[int] | None:
    """Where on the head side to point an annotation: the new start of the first hunk that
    overlaps (for a deleted file, none)."""
    if fc.status == "D":
        return None
    for hk in fc.hunks:
        if any(hk.old_start <= hi and lo <= hk.old_start + max(hk.old_count, 1) - 1 for lo, hi in overlaps):
            start = max(hk.new_start, 1)
            return [start, start + max(hk.new_count, 1) - 1]
    return None


def _archived(ws: Workspace) -> set[str]:
    return archived_ids(ws.catalog("repo").events.values())


def hunk_text(ch: Change, limit: int = MAX_HUNK_TEXT) -> str:
    """The change's added and removed lines, each distinct line once, in file order, cut at
    ``limit`` characters: what the "seen before" read searches beside the PR's words."""
    seen: set[str] = set()
    parts: list[str] = []
    size = 0
    for path in sorted(ch.files):
        fc = ch.files[path]
        for line in [*fc.added, *fc.removed]:
            s = line.strip()
            if len(s) < 4 or s in seen:
                continue
            seen.add(s)
            if size + len(s) > limit:
                return "\n".join(parts)
            parts.append(s)
            size += len(s) + 1
    return "\n".join(parts)

