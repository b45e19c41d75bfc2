"""``memstore import FILE.jsonl``: many write requests, one per line, each all-or-nothing.

Every line goes through ``api.write`` (the same gates as a single write); a refused line is
reported with its number and never stops the others. Git staging is batched: one ``git add``
for the whole import instead of one per memory.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from ..errors import DiskFull, MemstoreError
from ..store.workspace import Workspace
from . import api


def _read_lines(file: str) -> list[str]:
    from .importers import read_import

    return read_import(file, "import").splitlines()


def _refusal(line: int, code: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"line": line, "code": code, "message": message, "field": field}


def _prewarm(ws: Workspace, numbered: list[tuple[int, str]]) -> None:
    """Embed every line's text in batches up front: each write's duplicate check then finds its
    vector in the embedding cache instead of running the model once per line."""
    by_scope: dict[str, list[str]] = {}
    for _, line in numbered:
        try:
            req = json.loads(line)
        except json.JSONDecodeError:
            continue
        mem = req.get("memory") if isinstance(req, dict) else None
        if isinstance(mem, dict) and isinstance(mem.get("text"), str) and not req.get("allow_duplicate"):
            by_scope.setdefault(str(mem.get("scope")), []).append(mem["text"].strip())
    if not by_scope:
        return
    from ..index.embedder import EmbedderUnavailable
    from ..read.indexes import prewarm_embeddings

    for scope, texts in by_scope.items():
        if scope not in ("repo", "global"):
            continue
        try:
            prewarm_embeddings(ws, scope, texts)
        except (EmbedderUnavailable, MemstoreError):
            return  # each write still checks on its own; this was only a speed-up


def import_jsonl(ws: Workspace, file: str, *, dry_run: bool, author: str | None,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Write each line's request; answer a summary naming every refused line. ``progress`` is
    told (lines done, lines) as the import goes (the CLI shows it on a terminal)."""
    lines = _read_lines(file)
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    mode = "dry_run" if dry_run else "commit"
    ids: list[str] = []
    refused: list[dict[str, Any]] = []
    _prewarm(ws, numbered)
    try:
        written = _write_lines(ws, numbered, dry_run, author, progress, ids, refused)
    except DiskFull as exc:
        # The batched `git add` at the end found no room: the memories written were removed
        # again (Store.batch_git), so the summary would name files that are gone.
        raise DiskFull(f"no space left on the device for git to record the import: none of its "
                       f"{len(ids)} memories was kept ({exc.message})", field=exc.field,
                       hint="free some space and run the same import again") from exc
    return {"ok": not refused, "written": written, "refused": refused, "ids": ids, "mode": mode,
            "lines": len(numbered)}


def _write_lines(ws: Workspace, numbered: list[tuple[int, str]], dry_run: bool, author: str | None,
                 progress: Callable[[int, int], None] | None, ids: list[str],
                 refused: list[dict[str, Any]]) -> int:
    """Write each line, collecting ids and refusals; the number written (not dry runs)."""
    written = 0
    with contextlib.ExitStack() as batch:
        if not dry_run:
            for store in (ws.repo, ws.global_):
                if store is not None:
                    batch.enter_context(store.batch_git("memstore: import memories"))
        for scope in ws.scopes():
            batch.enter_context(ws.catalog(scope, refresh=False).deferred_save())
        for done, (n, line) in enumerate(numbered, start=1):
            if progress is not None:
                progress(done, len(numbered))
            try:
                req = json.loads(line)
            except json.JSONDecodeError as exc:
                refused.append(_refusal(n, "invalid_json", f"not valid JSON: {exc.msg} at column {exc.colno}"))
                continue
            if not isinstance(req, dict):
                refused.append(_refusal(n, "schema", "each line must be a JSON object (a write request)"))
                continue
            if dry_run:
                req["mode"] = "dry_run"
            try:
                answer = api.write(ws, req, author=author)
            except MemstoreError as exc:
                refused.append(_refusal(n, exc.code, exc.message, exc.field))
                continue
            ids.append(answer["id"])
            written += answer.get("mode") == "commit"
    return written
