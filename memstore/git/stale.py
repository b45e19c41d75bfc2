"""Staleness (SPEC §7): a memory whose ``file:`` evidence changed since the memory was written.

The memory's commit is the ``@rev`` in the ref, else the commit that added the memory file. If
the file differs between that commit and the work tree, read answers carry
``"stale": {"files": [...], "commits_since": n}`` (n: commits touching those files since then)
— a cue to verify against the code, never a reason to hide the memory.

Cheap enough for every read: only the results being returned are looked at, memories that are
not committed yet are never stale (no git history to compare with), and answers are cached in
``.index/stale.json`` keyed by (HEAD, memory id) plus the evidence files' stat signature, so
an edit in the work tree is noticed without re-running git for unchanged files.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from .. import gitops
from ..store.disk import STORE_DIRNAME, Store
from ..store.files import atomic_write
from ..store.model import Memory

CACHE_NAME = "stale.json"
CACHE_VERSION = 2


def file_refs(mem: Memory) -> list[tuple[str, str | None]]:
    """(path, rev or None) for each well-formed ``file:`` evidence ref, in order, deduplicated."""
    return list(dict.fromkeys((ref.path or "", ref.rev) for ref in mem.file_evidence()))


def _signature(worktree: Path, paths: list[str]) -> list[Any]:
    sig: list[Any] = []
    for p in paths:
        try:
            st = os.stat(worktree / p)
        except OSError:
            sig.append(None)
        else:
            sig.append([st.st_mtime_ns, st.st_size])
    return sig


class StaleChecker:
    """Staleness for one store's work tree at its current HEAD."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.worktree = store.worktree
        self.head: str | None = None
        self._cache: dict[str, Any] = {}
        self._edited: dict[str, Any] = {}  # memory id -> {"sig", "edited"}: its own file against HEAD
        self._dirty = False
        if self.worktree is not None:
            self.head = gitops.head_sha(self.worktree)
        self._load()

    # -- cache ------------------------------------------------------------------------------------
    @property
    def _cache_path(self) -> Path:
        return self.store.index_dir / CACHE_NAME

    def _load(self) -> None:
        with contextlib.suppress(OSError, ValueError, TypeError):
            raw = json.loads(self._cache_path.read_text(encoding="utf-8"))
            if raw.get("version") == CACHE_VERSION and raw.get("head") == self.head:
                self._cache = dict(raw["entries"])
                self._edited = dict(raw.get("edited") or {})

    def save(self) -> None:
        if not self._dirty or self.head is None:
            return
        data = {"version": CACHE_VERSION, "head": self.head, "entries": self._cache, "edited": self._edited}
        # A projection: failing to save only costs the next call a few git runs.
        with contextlib.suppress(OSError):
            atomic_write(self._cache_path, json.dumps(data, separators=(",", ":")))
        self._dirty = False

    # -- the check ----------------------------------------------------------------------------------
    def check(self, mem: Memory) -> dict[str, Any] | None:
        """``{"files": [...], "commits_since": n, "since": sha}`` or None when not stale."""
        return self.check_many([mem]).get(mem.id)

    def check_many(self, mems: list[Memory]) -> dict[str, dict[str, Any] | None]:
        """``check`` for each memory, by id. After a commit (a new HEAD empties the cache) a
        read's results are worked out together: one ``git log`` for when their files were
        added and one ``git diff`` per base commit, not two or three git runs per result
        (~24 runs, ~75 ms, for ten results citing files)."""
        out: dict[str, dict[str, Any] | None] = {}
        todo: list[tuple[Memory, list[tuple[str, str | None]], list[Any]]] = []
        for mem in mems:
            if self.worktree is None or self.head is None or mem.scope != "repo" or not mem.path:
                out[mem.id] = None
                continue
            refs = file_refs(mem)
            if not refs:
                out[mem.id] = None
                continue
            sig = _signature(self.worktree, [p for p, _ in refs])
            hit = self._cache.get(mem.id)
            if hit is not None and hit.get("sig") == sig:
                out[mem.id] = hit.get("stale")
            else:
                todo.append((mem, refs, sig))
        if todo:
            computed = self._compute(todo)
            for mem, _refs, sig in todo:
                out[mem.id] = computed.get(mem.id)
                self._cache[mem.id] = {"sig": sig, "stale": out[mem.id]}
            self._dirty = True
        return out

    def edited(self, mems: list[Memory]) -> list[str]:
        """The ids of committed memories whose own file in the work tree differs from HEAD's: an
        edit the pre-commit hook will refuse, which a read meanwhile serves as written. One
        ``git diff`` for the files whose stat changed since they were last asked about."""
        if self.worktree is None or self.head is None:
            return []
        out: list[str] = []
        todo: dict[str, tuple[str, list[Any]]] = {}
        for mem in mems:
            if mem.scope != "repo" or not mem.path:
                continue
            shown = self.store.display_path(mem.path)
            sig = _signature(self.worktree, [shown])
            hit = self._edited.get(mem.id)
            if hit is not None and hit.get("sig") == sig:
                out += [mem.id] if hit.get("edited") else []
            else:
                todo[shown] = (mem.id, sig)
        if todo:
            # Modified against HEAD only: a memory not committed yet is added, and may be edited.
            proc = gitops.run(["diff", "--name-only", "--no-renames", "--diff-filter=M", "-z", "HEAD", "--", *todo],
                              self.worktree, check=False)
            changed = set(proc.stdout.split("\0")) if proc.returncode == 0 else set()
            for shown, (mid, sig) in todo.items():
                self._edited[mid] = {"sig": sig, "edited": shown in changed}
                out += [mid] if shown in changed else []
            self._dirty = True
        return out

    def _added_in(self, mems: list[Memory]) -> dict[str, str]:
        """The commit that last added each memory's file (``git log --diff-filter=A -1`` per
        file, asked once for all): memory id -> sha; a memory not committed yet is absent."""
        assert self.worktree is not None
        shown = {self.store.display_path(m.path): m.id for m in mems if m.path}
        proc = gitops.run(["log", "--diff-filter=A", "--no-renames", "--format=%x01%H", "--name-only", "--",
                           *shown], self.worktree, check=False)
        added: dict[str, str] = {}
        sha = ""
        for line in proc.stdout.split("\n"):
            if line.startswith("\x01"):
                sha = line[1:]
            elif line in shown and shown[line] not in added and sha:
                added[shown[line]] = sha  # newest first: the last time the file was added
        return added

    def _compute(self, todo: list[tuple[Memory, list[tuple[str, str | None]], list[Any]]]
                 ) -> dict[str, dict[str, Any] | None]:
        assert self.worktree is not None
        added = self._added_in([m for m, _, _ in todo])
        revs: dict[str, str | None] = {}
        wanted: dict[str, set[str]] = {}  # base commit -> files asked about against it
        plans: list[tuple[Memory, dict[str, list[str]]]] = []
        for mem, refs, _sig in todo:
            if mem.id not in added:
                continue  # not committed yet: written against the code as it is now
            by_base: dict[str, list[str]] = {}
            for path, rev in refs:
                if rev and rev not in revs:
                    revs[rev] = gitops.resolve_commit(rev, self.worktree)
                base = (revs[rev] if rev else None) or added[mem.id]
                by_base.setdefault(base, []).append(path)
                wanted.setdefault(base, set()).add(path)
            plans.append((mem, by_base))
        changed: dict[str, set[str] | None] = {}
        for base, paths in wanted.items():
            # base tree vs the work tree (staged or not): what the agent would read now
            proc = gitops.run(["diff", "--name-only", "--no-renames", base, "--", *sorted(paths)], self.worktree,
                              check=False)
            changed[base] = set(proc.stdout.split("\n")) if proc.returncode == 0 else None
        commits_since: dict[tuple[str, tuple[str, ...]], set[str]] = {}
        out: dict[str, dict[str, Any] | None] = {}
        for mem, by_base in plans:
            moved_all: list[str] = []
            commits: set[str] = set()
            since: str | None = None
            for base, paths in by_base.items():
                moved_set = changed[base]
                moved = [p for p in paths if moved_set is not None and p in moved_set]
                if not moved:
                    continue
                moved_all += moved
                since = since or base
                key = (base, tuple(moved))
                if key not in commits_since:
                    log = gitops.run(["rev-list", f"{base}..HEAD", "--", *moved], self.worktree, check=False)
                    commits_since[key] = {line for line in log.stdout.split() if line}
                commits |= commits_since[key]
            out[mem.id] = ({"files": moved_all, "commits_since": len(commits), "since": (since or added[mem.id])[:12]}
                           if moved_all else None)
        return out


def owning_worktree(store: Store) -> Path | None:
    """The work tree whose code a store's ``file:`` evidence speaks of: the one the store is the
    ``.memory/`` folder of. A store merely lying in a checkout (memstore's own bundled example,
    a store copied into a fixtures folder, ``--store`` pointing elsewhere) describes some other
    code base, so its staleness is not computed at all rather than against the wrong history."""
    if store.worktree is None or store.scope != "repo":
        return None
    return store.worktree if store.root == store.worktree.resolve() / STORE_DIRNAME else None


def checker(store: Store | None) -> StaleChecker | None:
    """A checker for the repo store's work tree (global memories have no work tree to compare)."""
    if store is None or owning_worktree(store) is None or not store.exists():
        return None
    return StaleChecker(store)


def annotate(repo: Store | None, results: list[dict[str, Any]], memories: dict[str, Memory]) -> list[str]:
    """Fill ``stale`` in read results in place, against ``repo``'s work tree (the repo store, or
    None without one); any git trouble leaves them as they are. Returns the ids of the results
    that are committed memories edited in the work tree since."""
    if not any(r.get("scope") == "repo" for r in results):
        return []
    edited: list[str] = []
    with contextlib.suppress(Exception):
        sc = checker(repo)
        if sc is None:
            return []
        mems = [m for r in results if (m := memories.get(r["id"])) is not None]
        found = sc.check_many(mems)
        for r in results:
            if r["id"] in found:
                r["stale"] = found[r["id"]]
        edited = sc.edited(mems)
        sc.save()
    return edited
