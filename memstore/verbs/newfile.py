"""``memstore new KIND``: a person writes a memory by hand from a template, in their editor.

The template opens as ``<ULID>-new.md`` in the store's kind folder. Once saved with some text,
the file gets what every written memory has: that ULID as its ``id``, a ``created`` time, and
the name ``<id>-<slug of its text>.md`` (a file that does not parse is kept as it is, to fix).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import gitops
from ..errors import InvalidFile, InvalidRequest, MemstoreError, StoreError
from ..store import ids
from ..store.data import data_text
from ..store.disk import Store, memory_from_file, slugify
from ..store.files import atomic_write, parse_markdown
from ..store.model import KIND_DIRS, KINDS, SCOPES
from ..store.workspace import Workspace

_COMMENT_RE = re.compile(r"<!--.*?-->", re.S)
_FM_END_RE = re.compile(r"^---[ \t]*$", re.M)


class Aborted(MemstoreError):
    """The person left the editor without writing a memory; nothing was kept."""

    code = "aborted"
    exit_code = 2  # the request to save a memory came to nothing: nothing was written


def template_text(kind: str) -> str:
    """The template for ``kind``: package data in a wheel, the repo's ``templates/`` when editable."""
    return data_text("templates", f"{kind}.md")


def _with_scope(text: str, scope: str) -> str:
    # Templates say `scope: repo`; a global file must say global or it fails the store's scope check.
    return re.sub(r"^scope:[ \t]*\w+", f"scope: {scope}", text, count=1, flags=re.M)


def _editor_command(env: Mapping[str, str], stdin_is_tty: bool) -> list[str]:
    editor = (env.get("VISUAL") or env.get("EDITOR") or "").strip()
    if not editor:
        if not stdin_is_tty:
            raise InvalidRequest("no editor: set $VISUAL or $EDITOR (stdin is not a terminal, so vi cannot run)",
                                 code="no_editor", hint="or write the memory with `memstore write`")
        editor = "vi"
    try:
        return shlex.split(editor)  # `code --wait`, `emacsclient -t`
    except ValueError as exc:
        raise InvalidRequest(f"cannot parse the editor command {editor!r}: {exc}", code="no_editor") from exc


def _fresh_path(store: Store, kind: str, mid: str) -> Path:
    return store.root / KIND_DIRS[kind] / f"{mid}-new.md"


def _named(store: Store, path: Path, text: str, mid: str) -> tuple[Path, str]:
    """The saved file as a written memory is: its id (``mid`` unless the person gave a valid
    one) and created time in the frontmatter, named ``<id>-<slug>.md``. A file that does not
    parse stays as it is, for the person to fix."""
    from ..git.check import fixed_text

    rel = store.relpath(path)
    try:
        mem = memory_from_file(rel, text, store.scope)
    except InvalidFile:
        return path, text
    if mem.id_derived:
        mem.id = mid
        text = fixed_text(text, mem)
    elif not ids.is_id(mem.id):
        return path, text  # check names the bad id
    target = path.with_name(f"{mem.id}-{slugify(mem.text)}.md")
    if target == path:
        return path, text
    atomic_write(target, text, exclusive=True)  # never over another file, never through a link
    path.unlink(missing_ok=True)
    return target, text


def _body(text: str) -> str | None:
    """The raw body, or None when the frontmatter does not parse."""
    try:
        return parse_markdown(text)[1]
    except InvalidFile:
        return None


def _strip_body_comments(text: str) -> str:
    """Drop the template's guidance comments from the body (not from the frontmatter)."""
    text = text.lstrip("\ufeff")
    ends = list(_FM_END_RE.finditer(text))
    if len(ends) < 2:
        return text
    cut = ends[1].end()
    return text[:cut] + "\n" + _COMMENT_RE.sub("", text[cut:]).strip("\n") + "\n"


def new_memory_file(ws: Workspace, kind: str, scope: str, *, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Create a memory file from the template for ``kind``, open it in the editor, and keep it
    only if the person wrote something. Validation problems are reported, the file is kept."""
    if kind not in KINDS:
        raise InvalidRequest(f"kind {kind!r} is not one of {', '.join(KINDS)}", field="kind", code="schema")
    if scope not in SCOPES:
        raise InvalidRequest(f"scope {scope!r} is not repo or global", field="scope", code="schema")
    env = os.environ if env is None else env
    command = _editor_command(env, sys.stdin.isatty())
    store = ws.store(scope)
    template = _with_scope(template_text(kind), scope)
    if not store.exists():
        store.init()
    mid = ids.new_id()
    path = _fresh_path(store, kind, mid)
    atomic_write(path, template, exclusive=True)
    rel = store.relpath(path)
    shown = store.display_path(rel)
    try:
        proc = subprocess.run([*command, str(path)], check=False)
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise InvalidRequest(f"cannot run the editor {command[0]!r}: {exc.strerror or exc}", code="no_editor",
                             hint="set $VISUAL or $EDITOR to an editor on PATH") from exc
    except BaseException:  # Ctrl-C while the editor is open: leave no template behind
        path.unlink(missing_ok=True)
        raise
    if proc.returncode != 0:
        path.unlink(missing_ok=True)
        raise Aborted(f"the editor exited with status {proc.returncode}; {shown} was discarded")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise Aborted(f"{shown} was deleted in the editor; nothing was written") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"cannot read {shown}: {exc}") from exc
    body = _body(text)
    if text == template or (body is not None and not _COMMENT_RE.sub("", body).strip()):
        path.unlink(missing_ok=True)
        why = "the template was left unchanged" if text == template else "the memory has no text"
        raise Aborted(f"{why}; {shown} was discarded", hint="write the memory below the frontmatter and save")
    if body is not None and _COMMENT_RE.search(body):
        text = _strip_body_comments(text)
        atomic_write(path, text)
    path, text = _named(store, path, text, mid)
    rel = store.relpath(path)
    shown = store.display_path(rel)
    answer: dict[str, Any] = {"ok": True, "path": shown, "kind": kind, "scope": scope, "id": None}
    problems: list[dict[str, str]] = []
    try:
        mem = memory_from_file(rel, text, store.scope)
    except InvalidFile as exc:
        problems.append({"severity": "error", "path": shown, "code": "invalid_file", "message": exc.message})
    else:
        from ..git.check import check_memory

        answer["id"] = mem.id
        problems += [f.to_json() for f in check_memory(ws, store, mem)]
    if store.worktree is not None and ws.config.get("git", "stage", True):
        with contextlib.suppress(MemstoreError):  # staging is a convenience; the file is what counts
            gitops.stage([path], store.worktree)
            answer["staged"] = True
    answer["problems"] = problems
    answer["valid"] = not any(p["severity"] == "error" for p in problems)
    answer["next"] = "commit it" if answer["valid"] else "fix the problems above, then commit it"
    return answer
