"""``memstore import FILE.jsonl``: many write requests, one per line, each all-or-nothing.

Every line goes through ``api.write`` (the same gates as a single write); a refused line is
reported with its number and never stops the others. Git staging is batched: one ``git add``
for the whole import instead of one per memory.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from types import TracebackType
from typing import Any

from ..errors import DiskFull, MemstoreError
from ..store.disk import Store
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


class _Recorded:
    """One store's ``batch_git`` for an import, noting instead of raising that git found no room
    to record its files (they are removed again): the other store's memories may be kept."""

    def __init__(self, store: Store, failed: dict[str, DiskFull]) -> None:
        self.store, self.failed = store, failed
        self._batch = store.batch_git("memstore: import memories")

    def __enter__(self) -> None:
        self._batch.__enter__()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> bool:
        try:
            return bool(self._batch.__exit__(et, ev, tb))
        except DiskFull as exc:
            if et is not None:
                raise  # the import failed anyway; its error stands beside this one
            self.failed[self.store.scope] = exc
            return False


def import_jsonl(ws: Workspace, file: str, *, dry_run: bool, author: str | None,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Write each line's request; answer a summary naming every refused line. ``progress`` is
    told (lines done, lines) as the import goes (the CLI shows it on a terminal)."""
    lines = _read_lines(file)
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    mode = "dry_run" if dry_run else "commit"
    written: list[tuple[int, dict[str, Any]]] = []  # (line, answer) of every line written
    refused: list[dict[str, Any]] = []
    failed: dict[str, DiskFull] = {}  # scope -> why git could not record that store's files
    _prewarm(ws, numbered)
    with contextlib.ExitStack() as batch:
        if not dry_run:
            for store in (ws.repo, ws.global_):
                if store is not None:
                    batch.enter_context(_Recorded(store, failed))
        for scope in ws.scopes():
            batch.enter_context(ws.catalog(scope, refresh=False).deferred_save())
        _write_lines(ws, numbered, dry_run, author, progress, written, refused)
    if failed:
        # A store's one `git add` at the end found no room: its memories were removed again
        # (Store.batch_git). What another store took (or holds as pending proposals) stays.
        gone = {n for n, a in written if a["scope"] in failed and not a.get("pending")}
        lost = [(n, a) for n, a in written if n in gone]
        kept = [(n, a) for n, a in written if n not in gone]
        first = next(iter(failed.values()))
        raise DiskFull(
            f"no space left on the device for git to record the import: {len(lost)} of its memories were "
            f"removed again ({', '.join(sorted(failed))} store), {len(kept)} kept ({first.message})",
            hint="free some space, then import again only the lines listed under `removed`",
            details={"removed": [{"line": n, "id": a["id"]} for n, a in lost],
                     "kept": [{"line": n, "id": a["id"]} for n, a in kept]})
    return {"ok": not refused, "written": sum(a.get("mode") != "dry_run" for _, a in written), "refused": refused,
            "ids": [a["id"] for _, a in written], "mode": mode, "lines": len(numbered)}


def _write_lines(ws: Workspace, numbered: list[tuple[int, str]], dry_run: bool, author: str | None,
                 progress: Callable[[int, int], None] | None, written: list[tuple[int, dict[str, Any]]],
                 refused: list[dict[str, Any]]) -> None:
    """Write each line, collecting (line, answer) of those written and the refusals."""
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
        written.append((n, dict(answer)))
