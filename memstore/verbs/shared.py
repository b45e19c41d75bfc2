"""``memstore attach``, ``detach`` and ``attached``: shared stores, git repositories of memories
that many repos and people read.

A shared store is cloned under the global store's folder (``.shared/NAME``), never inside a
repo, and memstore only reads it: what it holds changes in its own repository, through review.
Its files are hostile input, as a clone's are (the catalog parses them under the user's caps);
its ``config.yaml`` is never read. ``memstore sync`` moves each clone forward (fast-forward only).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .. import gitops
from ..errors import Conflict, GitError, InvalidRequest, NotFound
from ..git.sync import REMOTE, _checked_url, redact_url
from ..store.catalog import Catalog
from ..store.config import own_settings, shared_settings
from ..store.disk import INDEX_DIRNAME, LOCAL_DIRNAME, SHARED_PREFIX, Store
from ..store.files import private_dir
from ..store.model import KIND_DIRS
from ..store.workspace import SHARED_DIRNAME, Workspace, attached_names, shared_root, valid_shared_name

NAME_RULE = "1 to 40 characters: lowercase letters, digits, - and _, starting with a letter or digit"


def attach(ws: Workspace, url: str, name: str | None, cwd: Path) -> dict[str, Any]:
    """Clone the shared store at ``url`` as ``name`` (default: the URL's last part). A clone
    that fails, or that is not a store, leaves nothing behind."""
    name = name if name is not None else _name_from(url)
    if not valid_shared_name(name):
        raise InvalidRequest(f"{name!r} is not a usable shared store name ({NAME_RULE})", code="bad_name",
                             field="name", hint="pass --name NAME")
    source = _checked_url(url, cwd)
    ws.global_.require()  # the clone lives in the global store's folder, excluded from its git
    base = shared_root(ws.global_.root)
    dest = base / name
    if base.is_symlink() or dest.is_symlink() or dest.exists():
        raise Conflict(f"a shared store named {name!r} is already attached ({dest})", code="already_attached",
                       field="name", hint=f"memstore detach {name}, or pass another --name")
    created_base = not base.exists()
    private_dir(base)
    _exclude(ws.global_.root, f"/{SHARED_DIRNAME}/")
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=base))
    try:
        gitops.clone(source, tmp / "store", None, cwd)
        if not store_at_root(tmp / "store"):
            raise InvalidRequest(f"{redact_url(url)} is not a memstore store: none of the kind folders "
                                 f"({', '.join(KIND_DIRS.values())}) is at its root", code="not_a_store",
                                 field="url", hint="make one with `memstore --store DIR init`, commit and push it")
        # The index and local state memstore keeps in the clone never show as changes there.
        _exclude(tmp / "store", f"/{INDEX_DIRNAME}/", f"/{LOCAL_DIRNAME}/")
        os.rename(tmp / "store", dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created_base:
            with contextlib.suppress(OSError):
                base.rmdir()
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    return {"ok": True, "name": name, "scope": SHARED_PREFIX + name, "url": redact_url(url), "root": str(dest),
            "head": gitops.resolve_commit("HEAD", dest)}


def detach(ws: Workspace, name: str) -> dict[str, Any]:
    """Remove the clone of shared store ``name`` (its memories stay in its own repository)."""
    if not valid_shared_name(name):
        raise InvalidRequest(f"{name!r} is not a shared store name ({NAME_RULE})", code="bad_name", field="name")
    dest = shared_root(ws.global_.root) / name
    if name not in attached_names(ws.global_.root):
        raise NotFound(f"no shared store named {name!r} is attached", code="not_attached", field="name",
                       hint="see `memstore attached`")
    shutil.rmtree(dest)  # never follows a link: attached_names lists real folders only
    return {"ok": True, "name": name, "detached": True, "root": str(dest)}


def attached(ws: Workspace) -> dict[str, Any]:
    """Every attached shared store: its remote, its commit, whether this repo sees it (the
    ``shared:`` setting of the user's config.yaml), the globs that decide it and the files its
    catalog set aside."""
    rules = shared_settings(own_settings(ws.global_.root))
    out = []
    for name in attached_names(ws.global_.root):
        root = shared_root(ws.global_.root) / name
        try:
            head = gitops.resolve_commit("HEAD", root)
            url = gitops.config_get(f"remote.{REMOTE}.url", root) or ""
        except GitError:
            head, url = None, ""
        invalid, count = _set_aside(ws, name, root)
        out.append({"name": name, "scope": SHARED_PREFIX + name, "url": redact_url(url), "root": str(root),
                    "head": head, "in_scope": name in ws.shared_stores, "repos": rules.get(name),
                    "invalid": invalid, "invalid_count": count})
    return {"ok": True, "stores": out}


def _set_aside(ws: Workspace, name: str, root: Path) -> tuple[list[dict[str, str]], int]:
    """The files of a shared store that reads leave out (a link, a file past the caps, one that
    does not parse), as ``list`` names them for the user's own stores: ``list`` never walks a
    shared store, so this is where its are named. (the first ``max_listed_invalid``, the count)"""
    scope = SHARED_PREFIX + name
    if name in ws.shared_stores:
        cat = ws.catalog(scope)
    else:
        resolved = root.resolve()
        store = Store(root=resolved, scope=scope, config=ws.config, worktree=resolved)
        if not store.exists():
            return [], 0
        cat = Catalog(store, ws.key)
        cat.refresh()
    shown = ws.config.cap("max_listed_invalid", 50)
    invalid = [{"path": cat.store.display_path(p), "error": cat.invalid[p]} for p in sorted(cat.invalid)[:shown]]
    return invalid, len(cat.invalid) + cat.over_cap


def store_at_root(root: Path) -> bool:
    """Whether the repository at ``root`` is a store itself, as a shared store's is: a kind
    folder at its top (and the top no link)."""
    return not root.is_symlink() and any(
        (root / folder).is_dir() and not (root / folder).is_symlink() for folder in KIND_DIRS.values())


def _name_from(url: str) -> str:
    last = re.split(r"[/:\\]", url.rstrip("/\\"))[-1].removesuffix(".git").lower()
    return re.sub(r"[^a-z0-9_-]+", "-", last).strip("-_")[:40] or "shared"


def _exclude(root: Path, *patterns: str) -> None:
    """Add ``patterns`` to the git repository at ``root``'s own exclude file (``.git/info/exclude``,
    never committed nor cloned), once each; nothing when ``root`` is not a repository's top."""
    top = gitops.toplevel(root)
    if top is None or top.resolve() != root.resolve():
        return
    path = gitops.git_dir(root) / "info" / "exclude"
    if path.is_symlink():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    have = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    new = [p for p in patterns if p not in have]
    if new:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("".join(f"{p}\n" for p in new))
