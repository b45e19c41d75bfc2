"""Staleness (SPEC §7): a memory whose ``file:`` evidence changed since the memory was written.

The memory's commit is the ``@rev`` in the ref, else the commit that added the memory file. A
citation with lines (``#L7-L8``) is stale when the diff from that commit to the work tree
(uncommitted edits included) rewrites or deletes one of those lines, or inserts a line between
two of them: the cited lines are carried through the diff's hunks, as ``review`` carries them
(``carry_lines``), so an edit elsewhere in the file, or lines added above, leave it current. A
citation of a whole file is stale when the file differs at all. Read answers then carry
``"stale": {"files": [...], "evidence": [...], "commits_since": n, "since": sha}`` (n: commits
touching those files since then) — a cue to verify against the code, never a reason to hide the
memory.

Cheap enough for every read: only the memories being shown are looked at, memories that are
not committed yet are never stale (no git history to compare with), and answers are cached in
``.index/stale.json`` keyed by HEAD: per memory (its citations and the cited files' stat
signature) and per (memory commit, file) the diff's hunks, so a warm read runs no git, and an
edit in the work tree costs one ``git diff`` per memory commit for the files it touched.

A ``repo:NAME@SHA:path`` citation (another repository's code, as a shared store's memories cite
it) is checked the same way against the user's own checkout of NAME (``repos:`` in the global
config.yaml, ``check_repo_refs``), its answers cached per checkout under that checkout's HEAD.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import gitops
from ..store.disk import STORE_DIRNAME, Store
from ..store.files import atomic_write
from ..store.model import EvidenceRef, Memory, parse_evidence

CACHE_NAME = "stale.json"
CACHE_VERSION = 3
# stale.json holds a few hundred bytes per memory shown; a bigger file was not written here (a
# clone may commit one with `git add -f`): it is left unread and the cache starts empty.
MAX_CACHE_BYTES = 64 * 1024 * 1024
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")

Ref = tuple[str, str | None, tuple[int, int] | None, str]  # (path, rev, lines, the ref as written)


@dataclass(frozen=True)
class Hunk:
    """One ``-U0`` hunk: ``old_count`` lines from ``old_start`` in the base became ``new_count``
    lines from ``new_start`` in the head (a count of 0 is a pure insertion or deletion after
    the line named by the start)."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int


def parse_hunk(line: str) -> Hunk | None:
    m = HUNK_RE.match(line)
    if m is None:
        return None
    return Hunk(int(m.group(1)), int(m.group(2) or 1), int(m.group(3)), int(m.group(4) or 1))


def carry_lines(hunks: list[Hunk], lines: range) -> dict[int, int]:
    """Old line -> new line for each of ``lines`` that ``hunks`` leave as they were; a line a
    hunk rewrites or deletes has no entry (what the memory cited there is gone)."""
    out: dict[int, int] = {}
    for n in lines:
        shift = 0
        for hk in hunks:
            if hk.old_count == 0:
                if hk.old_start < n:
                    shift += hk.new_count  # inserted above n
                continue
            if hk.old_start + hk.old_count - 1 < n:
                shift += hk.new_count - hk.old_count
            elif hk.old_start <= n:
                break  # rewritten
        else:
            out[n] = n + shift
    return out


# Past this many cited lines, whether a hunk falls inside the range is asked of the hunks (one
# test each) rather than line by line: a memory from a clone or a PR may cite L1-L2000000000.
CARRY_LINES_MAX = 5000


def lines_moved_on(hunks: list[Hunk], lines: tuple[int, int]) -> bool:
    """Did ``hunks`` rewrite or delete one of the cited ``lines``, or insert a line between two
    of them? Lines added or removed above or below only shift them (``carry_lines``)."""
    lo, hi = lines
    if any(hk.old_count == 0 and lo <= hk.old_start < hi for hk in hunks):
        return True  # an insertion inside the cited block changes what the block says
    if hi - lo < CARRY_LINES_MAX:
        return len(carry_lines(hunks, range(lo, hi + 1))) < hi - lo + 1
    return any(hk.old_count and hk.old_start <= hi and lo <= hk.old_start + hk.old_count - 1 for hk in hunks)


_C_QUOTE = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r", 34: '"', 92: "\\"}


def quote_path(name: str) -> str:
    """``name`` as ``git diff`` prints it in a ``diff --git`` line under ``core.quotePath=true``:
    C-quoted when it holds a quote, a backslash, a control character or a byte past ASCII."""
    raw = name.encode("utf-8", "surrogateescape")
    if not any(b < 0x20 or b >= 0x7F or b in (34, 92) for b in raw):
        return name
    body = "".join(f"\\{_C_QUOTE[b]}" if b in _C_QUOTE else f"\\{b:03o}" if b < 0x20 or b >= 0x7F else chr(b)
                   for b in raw)
    return f'"{body}"'


@dataclass
class FileDiff:
    """What the diff from a memory's commit to the work tree did to one file."""

    status: str = "M"  # A (absent at the memory's commit), D (gone now), M
    binary: bool = False
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.status != "M" or self.binary or bool(self.hunks)  # a mode change alone is no change

    def to_json(self) -> list[Any]:
        return [self.status, self.binary, [[h.old_start, h.old_count, h.new_start, h.new_count] for h in self.hunks]]

    @classmethod
    def from_json(cls, raw: list[Any]) -> FileDiff:
        return cls(str(raw[0]), bool(raw[1]), [Hunk(*map(int, h)) for h in raw[2]])


def split_patch(text: str, paths: list[str]) -> dict[str, FileDiff]:
    """``git -c core.quotePath=true diff -U0 --no-renames`` output for ``paths``, by path. Each
    file's section is known by its ``diff --git`` line, built from the path asked about (so a
    name holding a space, a quote, a tab or a newline is never parsed out of git's text); a type
    change comes as a deletion and an addition of one path."""
    headers = {f"diff --git {quote_path('a/' + p)} {quote_path('b/' + p)}": p for p in paths}
    out: dict[str, FileDiff] = {}
    cur: FileDiff | None = None
    in_header = False
    for line in text.split("\n"):
        if line.startswith("diff --git "):
            path = headers.get(line)
            cur = out.setdefault(path, FileDiff()) if path is not None else None
            in_header = True
        elif cur is None:
            continue
        elif line.startswith("@@"):
            in_header = False
            hk = parse_hunk(line)
            if hk is not None:
                cur.hunks.append(hk)
        elif in_header:
            if line.startswith("new file mode"):
                cur.status = "A" if cur.status == "M" else cur.status
            elif line.startswith("deleted file mode"):
                cur.status = "D"
            elif line.startswith("Binary files "):
                cur.binary = True
    return out


def file_refs(mem: Memory) -> list[Ref]:
    """(path, rev or None, lines or None, raw) for each well-formed ``file:`` evidence ref, in
    order, deduplicated."""
    return list(dict.fromkeys((ref.path or "", ref.rev, ref.lines, ref.raw) for ref in mem.file_evidence()))


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


# Paths per git run: a snapshot of a large store asks about every memory it lists, and git
# diff and log take no list of paths on stdin; this many stay far below any ARG_MAX.
PATHS_PER_RUN = 1000


def _chunks(paths: list[str]) -> list[list[str]]:
    return [paths[i:i + PATHS_PER_RUN] for i in range(0, len(paths), PATHS_PER_RUN)]


def _nul_log(text: str) -> list[tuple[str, list[str]]]:
    """``git log --format=%x01%H --name-only -z`` as (sha, paths) per commit: each field ends
    in NUL, and a commit's names follow its line after one newline."""
    out: list[tuple[str, list[str]]] = []
    after_sha = False
    for item in text.split("\0"):
        if after_sha and item.startswith("\n"):
            item = item[1:]
        after_sha = False
        if item.startswith("\x01"):
            out.append((item[1:].strip(), []))
            after_sha = True
        elif item and out:
            out[-1][1].append(item)
    return out


class _WorkTreeDiffs:
    """The diffs from past commits to one work tree, cached in ``cache_path`` under the work
    tree's HEAD: a new HEAD starts the cache empty, and each file's hunks are kept with its stat
    signature, so an edit in the work tree asks git again."""

    def __init__(self, worktree: Path | None, cache_path: Path | None) -> None:
        self.worktree = worktree
        self.cache_path = cache_path
        self.head: str | None = None
        self._cache: dict[str, Any] = {}
        self._files: dict[str, Any] = {}  # "base\0path" -> {"sig", "diff"}
        self._edited: dict[str, Any] = {}  # memory id -> {"sig", "edited"}: its own file against HEAD
        self._dirty = False
        if self.worktree is not None:
            self.head = gitops.head_sha(self.worktree)
        self._load()

    # -- cache ------------------------------------------------------------------------------------
    def _load(self) -> None:
        if self.cache_path is None:
            return
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            fd = os.open(self.cache_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CACHE_BYTES:
                    return
                raw = json.loads(f.read().decode("utf-8"))
            # Keyed by the work tree too: a setting may point a name at another checkout at one HEAD.
            if (raw.get("version") == CACHE_VERSION and raw.get("head") == self.head
                    and raw.get("worktree") == str(self.worktree)):
                self._cache = dict(raw["entries"])
                self._files = dict(raw["files"])
                self._edited = dict(raw.get("edited") or {})

    def save(self) -> None:
        if not self._dirty or self.head is None or self.cache_path is None:
            return
        data = {"version": CACHE_VERSION, "head": self.head, "worktree": str(self.worktree), "entries": self._cache,
                "files": self._files, "edited": self._edited}
        # A projection: failing to save only costs the next call a few git runs.
        with contextlib.suppress(OSError):
            atomic_write(self.cache_path, json.dumps(data, separators=(",", ":")))
        self._dirty = False

    def _diffs(self, base: str, paths: set[str]) -> dict[str, FileDiff] | None:
        """What the diff from ``base`` to the work tree did to each of ``paths`` (absent:
        nothing), reusing the hunks kept per (base, file) while the file's stat is unchanged;
        None when git could not say."""
        assert self.worktree is not None
        out: dict[str, FileDiff] = {}
        sigs = dict(zip(sorted(paths), _signature(self.worktree, sorted(paths)), strict=True))
        ask: list[str] = []
        for p in sorted(paths):
            hit = self._files.get(f"{base}\0{p}")
            if hit is not None and hit.get("sig") == sigs[p]:
                if hit.get("diff") is not None:
                    out[p] = FileDiff.from_json(hit["diff"])
            else:
                ask.append(p)
        if not ask:
            return out
        found: dict[str, FileDiff] = {}
        for part in _chunks(ask):
            # base tree vs the work tree (staged or not): what the agent would read now
            proc = gitops.run(["--literal-pathspecs", "-c", "core.quotePath=true", "diff", "-U0", "--no-renames",
                               "--no-color", "--no-ext-diff", base, "--", *part], self.worktree, check=False)
            if proc.returncode != 0:
                return None
            found.update(split_patch(proc.stdout, part))
        for p in ask:
            diff = found.get(p)
            self._files[f"{base}\0{p}"] = {"sig": sigs[p], "diff": diff.to_json() if diff is not None else None}
            self._dirty = True
            if diff is not None:
                out[p] = diff
        return out


class StaleChecker(_WorkTreeDiffs):
    """Staleness for one store's work tree at its current HEAD."""

    def __init__(self, store: Store) -> None:
        self.store = store
        super().__init__(store.worktree, store.index_dir / CACHE_NAME)

    # -- the check ----------------------------------------------------------------------------------
    def check(self, mem: Memory) -> dict[str, Any] | None:
        """``{"files", "evidence", "commits_since", "since"}`` or None when not stale."""
        return self.check_many([mem]).get(mem.id)

    def check_many(self, mems: list[Memory]) -> dict[str, dict[str, Any] | None]:
        """``check`` for each memory, by id. After a commit (a new HEAD empties the cache) the
        memories are worked out together: one ``git log`` for when their files were added and
        one ``git diff`` per memory commit, not two or three git runs per memory."""
        out: dict[str, dict[str, Any] | None] = {}
        todo: list[tuple[Memory, list[Ref], list[Any]]] = []
        for mem in mems:
            if self.worktree is None or self.head is None or mem.scope != "repo" or not mem.path:
                out[mem.id] = None
                continue
            refs = file_refs(mem)
            if not refs:
                out[mem.id] = None
                continue
            sig = _signature(self.worktree, [p for p, _, _, _ in refs])
            hit = self._cache.get(mem.id)
            if hit is not None and hit.get("sig") == sig and hit.get("refs") == [r[3] for r in refs]:
                out[mem.id] = hit.get("stale")
            else:
                todo.append((mem, refs, sig))
        if todo:
            computed = self._compute(todo)
            for mem, refs, sig in todo:
                out[mem.id] = computed.get(mem.id)
                self._cache[mem.id] = {"sig": sig, "refs": [r[3] for r in refs], "stale": out[mem.id]}
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
            proc = gitops.run(["--literal-pathspecs", "diff", "--name-only", "--no-renames", "--diff-filter=M", "-z",
                               "HEAD", "--", *todo], self.worktree, check=False)
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
        added: dict[str, str] = {}
        for part in _chunks(list(shown)):
            proc = gitops.run(["--literal-pathspecs", "log", "--diff-filter=A", "--no-renames", "--format=%x01%H",
                               "--name-only", "-z", "--", *part], self.worktree, check=False)
            for sha, names in _nul_log(proc.stdout):
                for name in names:
                    if name in shown and shown[name] not in added:
                        added[shown[name]] = sha  # newest first: the last time the file was added
        return added

    def _compute(self, todo: list[tuple[Memory, list[Ref], list[Any]]]) -> dict[str, dict[str, Any] | None]:
        assert self.worktree is not None
        added = self._added_in([m for m, _, _ in todo])
        revs: dict[str, str | None] = {}
        wanted: dict[str, set[str]] = {}  # base commit -> files asked about against it
        plans: list[tuple[Memory, list[tuple[str, Ref]]]] = []
        for mem, refs, _sig in todo:
            if mem.id not in added:
                continue  # not committed yet: written against the code as it is now
            plan: list[tuple[str, Ref]] = []
            for ref in refs:
                path, rev = ref[0], ref[1]
                if rev and rev not in revs:
                    revs[rev] = gitops.resolve_commit(rev, self.worktree)
                base = (revs[rev] if rev else None) or added[mem.id]
                plan.append((base, ref))
                wanted.setdefault(base, set()).add(path)
            plans.append((mem, plan))
        diffs = {base: self._diffs(base, paths) for base, paths in wanted.items()}
        commits_since: dict[tuple[str, tuple[str, ...]], set[str]] = {}
        out: dict[str, dict[str, Any] | None] = {}
        for mem, plan in plans:
            moved: dict[str, list[str]] = {}  # base -> files whose cited part moved on
            evidence: list[str] = []
            for base, (path, _rev, lines, raw) in plan:
                got = diffs[base]
                diff = got.get(path) if got is not None else None
                if diff is None or not diff.changed:
                    continue
                if lines is not None and diff.status == "M" and not diff.binary and not lines_moved_on(diff.hunks,
                                                                                                      lines):
                    continue
                evidence.append(raw)
                if path not in moved.setdefault(base, []):
                    moved[base].append(path)
            if not evidence:
                out[mem.id] = None
                continue
            commits: set[str] = set()
            for base, paths in moved.items():
                key = (base, tuple(paths))
                if key not in commits_since:
                    log = gitops.run(["--literal-pathspecs", "rev-list", f"{base}..HEAD", "--", *paths],
                                     self.worktree, check=False)
                    commits_since[key] = {line for line in log.stdout.split() if line}
                commits |= commits_since[key]
            files = list(dict.fromkeys(p for paths in moved.values() for p in paths))
            out[mem.id] = {"files": files, "evidence": evidence, "commits_since": len(commits),
                           "since": next(iter(moved))[:12]}
        return out


# -- repo: evidence against the user's checkouts ------------------------------------------------------
REPO_CACHE_PREFIX = "stale-repo-"


def repo_refs(mem: Memory) -> list[EvidenceRef]:
    """The well-formed ``repo:`` evidence refs, in order, each once."""
    out: dict[str, EvidenceRef] = {}
    for raw in mem.evidence:
        if raw.startswith("repo:") and raw not in out:
            with contextlib.suppress(ValueError):
                out[raw] = parse_evidence(raw)
    return list(out.values())


class CheckoutDiffs(_WorkTreeDiffs):
    """One configured checkout (``repos:`` in the user's config.yaml) of the repository a
    ``repo:`` citation names. What git answers once about a commit stays true (a commit that
    resolves keeps resolving, its tree never changes), so that is kept under the checkout's
    HEAD with the diffs; a commit not found is asked again on every call, since a fetch makes
    it known without moving HEAD."""

    def __init__(self, worktree: Path, cache_path: Path | None) -> None:
        super().__init__(worktree, cache_path)

    def commit(self, rev: str) -> str | None:
        key = f"commit\0{rev}"
        if key not in self._cache:
            assert self.worktree is not None
            full = gitops.resolve_commit(rev, self.worktree)
            if full is None:
                return None
            self._cache[key] = full
            self._dirty = True
        return str(self._cache[key])

    def holds(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], bool]:
        """Whether each (commit, path) names a file of that commit: the ones not known yet asked
        of git at once (a process per citation would cost ~5 ms each)."""
        ask = [(c, p) for c, p in dict.fromkeys(pairs) if f"path\0{c}\0{p}" not in self._cache]
        if ask:
            assert self.worktree is not None
            for (commit, path), there in zip(ask, gitops.objects_exist([f"{c}:{p}" for c, p in ask], self.worktree),
                                             strict=True):
                self._cache[f"path\0{commit}\0{path}"] = there
            self._dirty = True
        return {(c, p): bool(self._cache[f"path\0{c}\0{p}"]) for c, p in pairs}

    def commits_since(self, base: str, paths: list[str]) -> int:
        assert self.worktree is not None
        log = gitops.run(["--literal-pathspecs", "rev-list", f"{base}..HEAD", "--", *paths], self.worktree, check=False)
        return len([line for line in log.stdout.split() if line])


@dataclass
class RepoCheck:
    """What the user's checkouts say about one memory's ``repo:`` citations: ``stale`` as
    ``check`` answers it (None: none moved on), and each citation that could not be checked
    with the reason (a citation in neither was checked and still holds)."""

    stale: dict[str, Any] | None = None
    unverified: dict[str, str] = field(default_factory=dict)


def _checkout(path: Path) -> Path | None:
    """``path`` when it is the top of a git work tree, else None."""
    with contextlib.suppress(OSError, ValueError):
        if path.is_dir() and not path.is_symlink():
            top = gitops.toplevel(path)
            if top is not None and top.resolve() == path.resolve():
                return path.resolve()
    return None


def check_repo_refs(mems: list[Memory], checkouts: Mapping[str, Path],
                    cache_dir: Path | None) -> dict[str, RepoCheck]:
    """Each memory's ``repo:NAME@SHA:path[#La-Lb]`` citations checked as a ``file:`` one is, in
    the checkout ``checkouts`` names for NAME: the cited lines carried through the diff from SHA
    to that checkout's work tree (HEAD and uncommitted edits). By memory id, for the memories
    that cite another repository; ``cache_dir`` (the global store's ``.index/``) keeps the
    answers per checkout under its HEAD, None keeps nothing."""
    out: dict[str, RepoCheck] = {}
    diffs: dict[str, CheckoutDiffs | None] = {}
    plans: list[tuple[Memory, list[tuple[str, str, EvidenceRef]]]] = []
    wanted: dict[tuple[str, str], set[str]] = {}
    for mem in mems:
        refs = repo_refs(mem)
        if not refs:
            continue
        check = out[mem.id] = RepoCheck()
        plan: list[tuple[str, str, EvidenceRef]] = []
        for ref in refs:
            name, rev = ref.repo or "", ref.rev or ""
            if name not in checkouts:
                check.unverified[ref.raw] = f"no checkout of {name} is configured (repos: in your config.yaml)"
                continue
            if name not in diffs:
                top = _checkout(checkouts[name])
                cache = cache_dir / f"{REPO_CACHE_PREFIX}{name}.json" if cache_dir is not None else None
                diffs[name] = CheckoutDiffs(top, cache) if top is not None else None
            repo = diffs[name]
            if repo is None or repo.head is None:
                check.unverified[ref.raw] = f"the checkout of {name} ({checkouts[name]}) is not a git work tree"
                continue
            full = repo.commit(rev)
            if full is None:
                check.unverified[ref.raw] = (f"commit {rev[:12]} is not in the checkout of {name} "
                                             "(fetch it there)")
                continue
            plan.append((name, full, ref))
        plans.append((mem, plan))
    held: dict[tuple[str, str, str], bool] = {}
    for name, repo in diffs.items():
        pairs = [(full, ref.path or "") for _, plan in plans for n, full, ref in plan if n == name]
        if repo is not None and pairs:
            held.update({(name, c, p): there for (c, p), there in repo.holds(pairs).items()})
    for mem, plan in plans:
        kept = []
        for name, full, ref in plan:
            if held.get((name, full, ref.path or "")):
                kept.append((name, full, ref))
                wanted.setdefault((name, full), set()).add(ref.path or "")
            else:
                out[mem.id].unverified[ref.raw] = f"{ref.path} is not in commit {(ref.rev or '')[:12]} of {name}"
        plan[:] = kept
    found: dict[tuple[str, str], dict[str, FileDiff] | None] = {}
    for (name, base), paths in wanted.items():
        repo = diffs[name]
        assert repo is not None
        found[(name, base)] = repo._diffs(base, paths)
    for mem, plan in plans:
        check = out[mem.id]
        moved: dict[tuple[str, str], list[str]] = {}
        evidence: list[str] = []
        for name, base, ref in plan:
            got = found[(name, base)]
            if got is None:
                check.unverified[ref.raw] = f"git could not diff commit {base[:12]} in the checkout of {name}"
                continue
            diff = got.get(ref.path or "")
            if diff is None or not diff.changed:
                continue
            lines = ref.lines
            if lines is not None and diff.status == "M" and not diff.binary and not lines_moved_on(diff.hunks, lines):
                continue
            evidence.append(ref.raw)
            moved.setdefault((name, base), []).append(ref.path or "")
        if evidence:
            since = 0
            for (name, base), paths in moved.items():
                repo = diffs[name]
                since += repo.commits_since(base, paths) if repo is not None else 0
            check.stale = {"files": [f"{name}:{p}" for (name, _), paths in moved.items() for p in paths],
                           "evidence": evidence, "commits_since": since, "since": next(iter(moved))[1][:12]}
    for repo in diffs.values():
        if repo is not None:
            repo.save()
    return out


def with_stale(found: dict[str, Any] | None, check: RepoCheck | None) -> dict[str, Any] | None:
    """A memory's ``stale`` (its own repo's ``file:`` citations) joined with what its ``repo:``
    citations' checkouts found."""
    extra = check.stale if check is not None else None
    if not extra:
        return found
    if not found:
        return extra
    return {"files": [*found.get("files", []), *extra["files"]], "evidence": [*found.get("evidence", []),
            *extra["evidence"]], "commits_since": int(found.get("commits_since") or 0) + extra["commits_since"],
            "since": found.get("since") or extra["since"]}


def repo_stale(found: dict[str, Any], mems: list[Memory], checkouts: Mapping[str, Path],
               cache_dir: Path | None) -> dict[str, dict[str, str]]:
    """``found`` (memory id -> ``stale``, as ``stale_of`` answers) joined in place with what the
    checkouts say of ``mems``' ``repo:`` citations; answers, by id, the citations they could not
    check (``relations.doubts``' ``unverified``). Without a checkout configured, or on any git
    trouble, nothing was checked: {} (every ``repo:`` citation stays unverified)."""
    cited = [m for m in mems if repo_refs(m)]
    if not cited or not checkouts:
        return {}
    try:
        checks = check_repo_refs(cited, checkouts, cache_dir)
    except Exception:  # a cue beside a memory must never fail what shows it
        return {}
    for mid, check in checks.items():
        found[mid] = with_stale(found.get(mid), check)
    return {mid: check.unverified for mid, check in checks.items()}


def annotate_repo_refs(results: list[dict[str, Any]], memories: Mapping[str, Memory], checkouts: Mapping[str, Path],
                       cache_dir: Path | None) -> dict[str, dict[str, str]]:
    """``repo_stale`` for read results: their ``stale`` filled in place."""
    mems = [m for r in results if (m := memories.get(r["id"])) is not None]
    found = {r["id"]: r.get("stale") for r in results}
    unverified = repo_stale(found, mems, checkouts, cache_dir)
    for r in results:
        if r["id"] in unverified:
            r["stale"] = found[r["id"]]
    return unverified


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


def stale_of(repo: Store | None, mems: list[Memory]) -> dict[str, dict[str, Any] | None]:
    """``check_many`` against ``repo``'s work tree for whoever shows memories outside a read
    (``context``, ``snapshot``, the file hook); {} without a repo store or on any git trouble."""
    if not any(m.scope == "repo" for m in mems):
        return {}
    with contextlib.suppress(Exception):
        sc = checker(repo)
        if sc is None:
            return {}
        found = sc.check_many(mems)
        sc.save()
        return found
    return {}


def annotate(repo: Store | None, results: list[dict[str, Any]], memories: dict[str, Memory]) -> list[str]:
    """Fill ``stale`` in read results in place, against ``repo``'s work tree (the repo store, or
    None without one); any git trouble leaves them as they are. Returns the ids of the results
    that are committed memories edited in the work tree since."""
    if not any(r.get("scope") == "repo" for r in results):
        return []
    mems = [m for r in results if (m := memories.get(r["id"])) is not None]
    edited: list[str] = []
    with contextlib.suppress(Exception):
        sc = checker(repo)
        if sc is None:
            return []
        found = sc.check_many(mems)
        for r in results:
            if r["id"] in found:
                r["stale"] = found[r["id"]]
        edited = sc.edited(mems)
        sc.save()
    return edited
