"""``memstore import --from markdown|jsonl``: bring notes kept elsewhere into memstore.

- **markdown**: a file or a folder of notes (CLAUDE.md, AGENTS.md, a memory-bank folder, Cursor
  rules). Each bullet and each prose paragraph becomes one memory: a ``preference`` when it reads
  like one ("prefer", "always", "never", "don't", "avoid", "use X instead"), else a ``fact``. Its
  evidence is the line it came from, ``file:<repo-relative path>#L<n>`` (``#L<a>-L<b>`` for an
  item spanning lines), so staleness tracking notices when the note changes. Headings, rules,
  tables, HTML comments, front matter, task checkboxes and trivial lines are skipped; a code
  block goes with the item it follows. memstore's own generated guide section is skipped too.
- **jsonl**: an export of generic memories, one ``{"text": ..., "metadata": {...}}`` per line
  (``memory`` / ``content`` are accepted for ``text``). ``metadata`` may carry ``kind`` (default
  ``fact``), ``tags``, ``created``, ``source``, ``scope`` and ``confidence``. Evidence is the
  source when it is a valid evidence ref or a URL, else ``user:imported from <source or file>``.

Every item is an ordinary write request through ``api.write``: the same validation gates and the
same duplicate gate (a note already remembered is reported as a duplicate, not written twice).
Written memories are staged like any other write, so they are reviewed before they are
committed; ``--dry-run`` shows what would be written and writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest, MemstoreError
from ..store.files import MAX_IMPORT_BYTES, given_text, read_given
from ..store.model import EVIDENCE_KINDS, SCOPES, parse_evidence
from ..store.workspace import Workspace
from . import api

FORMATS = ("markdown", "jsonl")
MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdc")
SKIP_DIRS = frozenset({".git", ".memory", "node_modules", ".venv", "venv", "__pycache__"})
IMPORT_TAG = "imported"
IMPORT_AUTHOR = "import"

PREFERENCE_RE = re.compile(
    r"\b(prefer(s|red|ably)?|always|never|don'?t|do not|dont|avoid|instead|rather than|must not|mustn'?t|"
    r"should not|shouldn'?t)\b",
    re.IGNORECASE,
)
_BULLET_RE = re.compile(r"^(?P<indent>\s*)(?:[-*+]|\d{1,3}[.)])\s+(?P<text>.*)$")
_CHECKBOX_RE = re.compile(r"^\[[ xX]\]\s")
_HEADING_RE = re.compile(r"^\s{0,3}(?P<hashes>#{1,6})\s+(?P<text>.*?)\s*#*\s*$")
_RULE_RE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_FENCE_RE = re.compile(r"^\s*(?P<fence>`{3,}|~{3,})")
_MEMSTORE_BEGIN = "<!-- memstore:begin"
_MEMSTORE_END = "<!-- memstore:end"
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/+-]{0,63}$")


def classify(text: str) -> str:
    """``preference`` when the note reads like one (a rule about how to work), else ``fact``."""
    return "preference" if PREFERENCE_RE.search(text) else "fact"


def trivial(text: str) -> bool:
    """Too little to be worth a memory: fewer than three words or ten letters once the markup is gone."""
    plain = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [label](url) -> label
    plain = re.sub(r"[`*_~>#|]", " ", plain)
    words = re.findall(r"[^\W\d_][\w'.-]*", plain)
    return len(words) < 3 or sum(len(w) for w in words) < 10


# -- markdown -------------------------------------------------------------------------------------------
@dataclass
class Block:
    """One importable item of a Markdown file: a bullet or a paragraph, with its line span."""

    lines: list[str]
    first: int
    last: int
    section: str
    checkbox: bool = False

    @property
    def text(self) -> str:
        head, code = [], []
        for line in self.lines:
            (code if code or line.startswith("\x00") else head).append(line.lstrip("\x00"))
        prose = " ".join(part.strip() for part in head if part.strip())
        return prose + ("\n\n" + "\n".join(code) if code else "")


def parse_markdown(text: str) -> list[Block]:
    """The bullets and paragraphs of a Markdown document, in order (see the module docstring)."""
    lines = text.splitlines()
    start = 0
    if lines and lines[0].strip() == "---":  # YAML front matter (also Cursor's .mdc rules)
        for n in range(1, len(lines)):
            if lines[n].strip() in ("---", "..."):
                start = n + 1
                break
    blocks: list[Block] = []
    headings: list[tuple[int, str]] = []
    current: Block | None = None
    attach: Block | None = None  # the item a following code block belongs to
    fence: str | None = None
    fence_lines: list[str] = []
    in_comment = in_generated = False

    def flush() -> None:
        nonlocal current, attach
        if current is not None:
            blocks.append(current)
            attach = current
            current = None

    def section() -> str:
        return " > ".join(h for _, h in headings)

    for n, line in enumerate(lines[start:], start=start + 1):
        stripped = line.strip()
        if fence is not None:
            fence_lines.append(line)
            if stripped.startswith(fence):
                fence = None
                if attach is not None:
                    attach.lines += ["\x00" + code for code in fence_lines]
                    attach.last = n
            continue
        if in_generated:
            in_generated = not stripped.startswith(_MEMSTORE_END)
            continue
        if in_comment:
            in_comment = "-->" not in stripped
            continue
        if stripped.startswith(_MEMSTORE_BEGIN):  # memstore's own guide (`memstore guide --install`)
            flush()
            attach = None
            in_generated = True
            continue
        if stripped.startswith("<!--"):
            flush()
            attach = None
            in_comment = "-->" not in stripped
            continue
        m = _FENCE_RE.match(line)
        if m:
            flush()
            fence, fence_lines = m.group("fence"), [line]
            continue
        if not stripped:
            flush()
            continue
        m = _HEADING_RE.match(line)
        if m:
            flush()
            attach = None
            level = len(m.group("hashes"))
            headings = [(lv, h) for lv, h in headings if lv < level] + [(level, m.group("text").strip())]
            continue
        if _RULE_RE.match(line) or stripped.startswith("|"):
            flush()
            attach = None
            continue
        if stripped.startswith(">"):
            stripped = stripped.lstrip("> ").strip()
            if not stripped:
                continue
        m = _BULLET_RE.match(line)
        if m:
            flush()
            body = m.group("text").strip()
            current = Block([body], n, n, section(), checkbox=bool(_CHECKBOX_RE.match(body)))
            continue
        if current is None:
            current = Block([stripped], n, n, section())
        else:  # a wrapped line of the item being read (indented or lazy continuation)
            current.lines.append(stripped)
            current.last = n
    flush()  # an unclosed code fence is simply not imported
    return blocks


def read_import(file: str | Path, what: str, *, bom: bool = False) -> str:
    """The text of a file to import (``-``: stdin), capped at MAX_IMPORT_BYTES and read only from
    a regular file: /dev/zero, a FIFO or a /proc file is refused (``bad_input``), a larger file
    is ``too_large``; every error names ``field`` file."""
    try:
        if file == "-":
            buffer = getattr(sys.stdin, "buffer", None)
            data = buffer.read(MAX_IMPORT_BYTES + 1) if buffer is not None else \
                sys.stdin.read(MAX_IMPORT_BYTES + 1).encode("utf-8", "surrogateescape")
            if len(data) > MAX_IMPORT_BYTES:
                raise InvalidRequest(f"stdin is over the {MAX_IMPORT_BYTES}-byte cap on an import; not read",
                                     code="too_large")
            return given_text(data, "stdin", bom=bom)
        path = Path(file).expanduser()
        return given_text(read_given(path, max_bytes=MAX_IMPORT_BYTES, what=what), f"{what} {file}", bom=bom)
    except InvalidRequest as exc:
        exc.field = "file"
        raise


def markdown_files(path: Path) -> list[Path]:
    """The notes to import: ``path`` itself, or the Markdown files under the folder ``path``.
    Inside a folder (a clone's, maybe) no symlink is followed, to a file or a folder: a link to
    ~/.ssh/config or /dev/zero is not a note of that folder's."""
    if path.is_symlink():
        raise InvalidRequest(f"cannot read {path}: it is a symbolic link; memstore reads no link a person names, "
                             "give the file or folder itself", code="bad_input", field="file")
    if path.is_file() or not path.is_dir():
        if not path.exists() and not path.is_symlink():
            raise InvalidRequest(f"cannot read {path}: no such file or folder", code="bad_input", field="file")
        return [path]  # read_import refuses what is not a regular file
    out = []
    for folder, dirs, files in os.walk(path):  # os.walk does not descend into linked folders
        rel = Path(folder).relative_to(path).parts
        if any(part in SKIP_DIRS or part.startswith(".") for part in rel):
            dirs[:] = []
            continue
        for name in files:
            found = Path(folder) / name
            if found.suffix.lower() in MARKDOWN_SUFFIXES and not found.is_symlink() and found.is_file():
                out.append(found)
    return sorted(out)


def _shown_path(file: Path, worktree: Path | None, root: Path) -> tuple[str, bool]:
    """(path to show and cite, whether it is inside the repository, i.e. citable as ``file:``).
    Outside the repository it is the path from the imported folder's parent (``notes.md``,
    ``memory-bank/progress.md``): a memory goes into git, and an absolute path would carry this
    machine's layout (and user name) to every clone, where it means nothing."""
    resolved = file.resolve()
    if worktree is not None and resolved.is_relative_to(worktree.resolve()):
        return resolved.relative_to(worktree.resolve()).as_posix(), True
    base = root.resolve().parent if root.is_dir() else resolved.parent
    return (resolved.relative_to(base).as_posix() if resolved.is_relative_to(base) else file.name), False


def markdown_requests(ws: Workspace, root: str, *, scope: str) -> tuple[list[dict[str, Any]], int]:
    """(one item per importable note, number of files read)."""
    worktree = ws.repo.worktree if ws.repo is not None else None
    top = Path(root).expanduser()
    files = markdown_files(top)
    items: list[dict[str, Any]] = []
    for file in files:
        text = read_import(file, "import --from markdown", bom=True)
        shown, in_repo = _shown_path(file, worktree, top)
        for block in parse_markdown(text):
            body = block.text
            if block.checkbox or trivial(body.split("\n\n", 1)[0]):
                continue
            lines = f"L{block.first}" if block.first == block.last else f"L{block.first}-L{block.last}"
            source = f"{shown}#{lines}"
            evidence = f"file:{source}" if in_repo else f"user:imported from {source}"
            where = f" (section {block.section!r})" if block.section else ""
            memory: dict[str, Any] = {
                "kind": classify(body.split("\n\n", 1)[0]), "scope": scope, "text": body,
                "rationale": f"Imported from {shown} line {block.first}{where}.",
                "evidence_refs": [evidence], "tags": [IMPORT_TAG],
            }
            items.append({"source": source, "request": {"op": "write", "memory": memory}})
    return items, len(files)


# -- jsonl ------------------------------------------------------------------------------------------------
def _tags(value: Any) -> list[str]:
    raw = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else []
    out = [IMPORT_TAG]
    for tag in raw:
        if not isinstance(tag, str):
            continue
        tag = re.sub(r"[^A-Za-z0-9_.:/+-]+", "-", tag.strip()).strip("-._:/+")[:64]
        if tag and _TAG_RE.match(tag) and tag not in out:
            out.append(tag)
    return out[:32]


def _evidence(source: Any, file_label: str) -> str:
    if isinstance(source, str) and source.strip():
        source = source.strip()
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://\S+$", source):
            return f"url:{source}"
        with contextlib.suppress(ValueError):
            if source.split(":", 1)[0] in EVIDENCE_KINDS and parse_evidence(source):
                return source
        return f"user:imported from {source[:200]}"
    return f"user:imported from {file_label}"


def jsonl_requests(file: str, *, scope: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(one item per memory line, lines refused before any write: not JSON, no text)."""
    lines = read_import(file, "import --from jsonl", bom=True).splitlines()
    label = "stdin" if file == "-" else Path(file).name
    items: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        source = f"{label}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            refused.append({"source": source, "line": n, "code": "invalid_json",
                            "message": f"not valid JSON: {exc.msg} at column {exc.colno}"})
            continue
        text = next((obj.get(k) for k in ("text", "memory", "content") if isinstance(obj, dict)
                     and isinstance(obj.get(k), str) and obj[k].strip()), None)
        if not isinstance(obj, dict) or text is None:
            refused.append({"source": source, "line": n, "code": "schema",
                            "message": "each line must be an object with a non-empty text"})
            continue
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        meta = {**{k: v for k, v in obj.items() if k not in ("text", "memory", "content", "metadata")}, **meta}
        memory: dict[str, Any] = {"kind": meta.get("kind") or "fact",
                                  "scope": meta["scope"] if meta.get("scope") in SCOPES else scope,
                                  "text": text.strip(), "tags": _tags(meta.get("tags")),
                                  "evidence_refs": [_evidence(meta.get("source"), label)]}
        created = meta.get("created") or meta.get("created_at")
        memory["rationale"] = f"Imported from {label} line {n}" + (f"; originally recorded {created}." if
                                                                  isinstance(created, str) and created else ".")
        if isinstance(meta.get("confidence"), int | float) and not isinstance(meta["confidence"], bool):
            memory["confidence"] = meta["confidence"]
        items.append({"source": source, "line": n, "request": {"op": "write", "memory": memory}})
    return items, refused


# -- writing ----------------------------------------------------------------------------------------------
@dataclass
class _Tally:
    items: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    duplicates: int = 0
    written: int = 0


def _write_all(ws: Workspace, items: list[dict[str, Any]], *, dry_run: bool, author: str | None) -> _Tally:
    tally = _Tally()
    with contextlib.ExitStack() as batch:
        if not dry_run:  # one `git add` for the whole import, as `memstore import` does
            for store in (ws.repo, ws.global_):
                if store is not None:
                    batch.enter_context(store.batch_git("memstore: import notes"))
        for scope in ws.scopes():
            batch.enter_context(ws.catalog(scope, refresh=False).deferred_save())
        for item in items:
            req = item["request"]
            req["mode"] = "dry_run" if dry_run else "commit"
            mem = req["memory"]
            shown: dict[str, Any] = {"source": item["source"], "kind": mem.get("kind"), "scope": mem.get("scope"),
                                     "text": mem.get("text"), "evidence": mem.get("evidence_refs")}
            try:
                answer = api.write(ws, req, author=author or IMPORT_AUTHOR)
            except MemstoreError as exc:
                err = exc.to_json()["error"]
                if exc.code == "duplicate":
                    tally.duplicates += 1
                    dup = (err.get("duplicates") or [{}])[0]
                    shown.update(status="duplicate", duplicate_of=dup.get("id"))
                else:
                    shown.update(status="refused", code=exc.code, message=exc.message)
                    tally.refused.append({"source": item["source"], "code": exc.code, "message": exc.message,
                                          "field": exc.field})
                tally.items.append(shown)
                continue
            shown.update(status="written" if answer.get("mode") != "dry_run" else "would_write", id=answer["id"],
                         path=answer.get("path"))
            tally.written += answer.get("mode") != "dry_run"
            tally.items.append(shown)
    return tally


def import_notes(ws: Workspace, file: str, fmt: str, *, scope: str = "repo", dry_run: bool = False,
                 author: str | None = None) -> dict[str, Any]:
    """Convert ``file`` (format ``markdown`` or ``jsonl``) and write each note. The answer lists
    every item with its status: written / would_write (dry run), duplicate, or refused."""
    if fmt not in FORMATS:
        raise InvalidRequest(f"unknown import format {fmt!r}; use {' or '.join(FORMATS)}", field="from", code="usage")
    if scope not in SCOPES:
        raise InvalidRequest(f"scope must be repo or global, not {scope!r}", field="scope", code="usage")
    pre_refused: list[dict[str, Any]] = []
    files = 1
    if fmt == "markdown":
        if file == "-":
            raise InvalidRequest("--from markdown reads files, not stdin: give a .md file or a folder",
                                 field="file", code="usage")
        items, files = markdown_requests(ws, file, scope=scope)
    else:
        items, pre_refused = jsonl_requests(file, scope=scope)
    tally = _write_all(ws, items, dry_run=dry_run, author=author)
    refused = pre_refused + tally.refused
    items_out = [*({"source": r["source"], "status": "refused", "code": r["code"], "message": r["message"]}
                   for r in pre_refused), *tally.items]
    return {"ok": not refused, "format": fmt, "mode": "dry_run" if dry_run else "commit", "files": files,
            "candidates": len(items) + len(pre_refused), "written": tally.written, "duplicates": tally.duplicates,
            "refused": refused, "ids": [i["id"] for i in tally.items if i.get("id")], "items": items_out}


__all__ = ["FORMATS", "classify", "import_notes", "parse_markdown"]
