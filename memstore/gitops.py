"""Every git call memstore makes. The git binary, not GitPython's index code: ``git add`` is
~30 ms where GitPython rewrites the index in Python (~270 ms in a 10k-file repo), and the
import alone costs ~90 ms on every CLI call."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import GitError, UnsafeRepo

_LOCK_RETRIES = 20


def run(
    args: list[str], cwd: Path, *, check: bool = True, input_text: str | None = None,
    env: dict[str, str] | None = None, timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    try:
        # UTF-8 with surrogateescape, as the file system names files: a name git lists that is
        # not UTF-8 still names its file (and reaches git again as the same bytes), never a crash.
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, encoding="utf-8", errors="surrogateescape",
            input=input_text, check=False, env=env, timeout=timeout,
        )
    except FileNotFoundError as exc:
        raise GitError("git is not installed or not on PATH", hint="install git") from exc
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise GitError(f"git {' '.join(args[:2])} failed: {msg[-1] if msg else 'exit ' + str(proc.returncode)}")
    return proc


def _run_retrying(args: list[str], cwd: Path, input_text: str | None = None) -> None:
    """git refuses to work while another process holds index.lock; concurrent writers take turns."""
    for attempt in range(_LOCK_RETRIES):
        proc = run(args, cwd, check=False, input_text=input_text)
        if proc.returncode == 0:
            return
        if "index.lock" not in proc.stderr or attempt == _LOCK_RETRIES - 1:
            msg = proc.stderr.strip().splitlines()
            raise GitError(f"git {args[0]} failed: {msg[-1] if msg else proc.returncode}")
        time.sleep(0.05 * (attempt + 1))


@functools.lru_cache(maxsize=64)
def toplevel(path: Path) -> Path | None:
    """The work tree root containing ``path``, or None outside a repository."""
    probe = path if path.is_dir() else path.parent
    while not probe.exists():
        probe = probe.parent
    proc = run(["rev-parse", "--show-toplevel"], probe, check=False)
    if proc.returncode != 0:
        refuse_unsafe(proc.stderr, probe)
        return None
    return Path(proc.stdout.strip())


_UNSAFE = re.compile(r"dubious ownership in repository at '(?P<at>[^']*)'|unsafe repository \('(?P<old>[^']*)'")


def refuse_unsafe(stderr: str, probe: Path) -> None:
    """Raise UnsafeRepo when git's ``stderr`` says it refuses the repository at ``probe`` as
    owned by another user (``safe.directory``). Treated as no repository, such a checkout would
    answer reads from the global store alone and send writes there: git says so, and so do we."""
    m = _UNSAFE.search(stderr)
    if m is None:
        return
    repo = m.group("at") or m.group("old") or str(probe)
    raise UnsafeRepo(
        f"git refuses the repository at {repo}: it is owned by another user (git's \"dubious ownership\"), so "
        "memstore neither reads its .memory/ nor writes in its place",
        hint=f"if you trust it: git config --global --add safe.directory {shlex.quote(repo)}",
        details={"repo": repo})


def user_name(cwd: Path) -> str | None:
    """``git config user.name`` as seen from ``cwd`` (repo, then global config), or None."""
    try:
        proc = run(["config", "--get", "user.name"], cwd, check=False)
    except GitError:
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def init(path: Path) -> None:
    run(["init", "-q"], path)


# A long list of paths goes to git on stdin, NUL-separated: an import of ~17k memories passed the
# system's limit on a command line (ARG_MAX, 2 MB on Linux) as absolute paths. A short one stays
# on the command line, which every git takes (--pathspec-from-file needs 2.25, for rm 2.26).
_ARGS_CHARS = 100_000


def _pathspec(paths: list[Path]) -> tuple[list[str], str | None]:
    """(arguments, stdin) that hand git exactly ``paths``."""
    names = [str(p) for p in paths]
    if sum(len(n) + 1 for n in names) < _ARGS_CHARS:
        return ["--", *names], None
    return ["--pathspec-from-file=-", "--pathspec-file-nul"], "".join(f"{n}\0" for n in names)


def stage(paths: list[Path], cwd: Path) -> None:
    if paths:
        args, stdin = _pathspec(paths)
        _run_retrying(["add", *args], cwd, stdin)


def unstage(paths: list[Path], cwd: Path) -> bool:
    """Take ``paths`` out of git's index again (their files stay); False when git could not."""
    if not paths:
        return True
    args, stdin = _pathspec(paths)
    return run(["rm", "--cached", "-q", "--ignore-unmatch", *args], cwd, check=False, input_text=stdin).returncode == 0


def changed(paths: list[Path], cwd: Path) -> bool:
    """Whether git sees any of ``paths`` as untracked, staged or modified against HEAD."""
    spec, stdin = _pathspec(paths)
    out = run(["status", "--porcelain", "-z", "--untracked-files=all", *spec], cwd, input_text=stdin).stdout
    return bool(out.strip("\0"))


def commit(paths: list[Path], message: str, cwd: Path) -> None:
    """Commit exactly ``paths``; works with no user identity configured (a store is often new)."""
    stage(paths, cwd)
    spec, stdin = _pathspec(paths)
    _run_retrying([*ident_args(cwd), "commit", "-q", "--no-verify", "-m", message, *spec], cwd, stdin)


def ident_args(cwd: Path) -> list[str]:
    """An identity for commits memstore makes (a write, a sync's rebase) where the user has none."""
    if run(["config", "user.email"], cwd, check=False).returncode == 0:
        return []
    return ["-c", "user.name=memstore", "-c", "user.email=memstore@localhost"]


def resolve_commit(rev: str, cwd: Path) -> str | None:
    proc = run(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def has_head(cwd: Path) -> bool:
    return run(["rev-parse", "--verify", "--quiet", "HEAD"], cwd, check=False).returncode == 0


def show_file(rev: str, path: str, cwd: Path) -> bytes | None:
    """A file's content at ``rev`` (repo-relative path), or None if it was not there."""
    proc = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=cwd, capture_output=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


def staged_entries(prefix: str, cwd: Path) -> list[tuple[str, str, str]]:
    """(mode, blob sha, repo-relative path) of every file under ``prefix`` in the index."""
    proc = run(["ls-files", "-s", "-z", "--", prefix], cwd, check=False)
    out: list[tuple[str, str, str]] = []
    for item in proc.stdout.split("\0"):
        meta, _, path = item.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and path:
            out.append((parts[0], parts[1], path))
    return out


def objects_exist(names: list[str], cwd: Path) -> list[bool]:
    """Whether each object name (``SHA:path``, ...) names an object, in one ``git cat-file
    --batch-check``; a name holding a newline (which would split the request) never does."""
    asked = [n for n in names if "\n" not in n]
    if not asked:
        return [False] * len(names)
    proc = run(["cat-file", "--batch-check"], cwd, check=False, input_text="".join(f"{n}\n" for n in asked))
    lines = proc.stdout.split("\n")
    if proc.returncode != 0 or len(lines) < len(asked):
        return [False] * len(names)
    # One line per name, in order: "<sha> <type> <size>", or "<name> missing" / "<name> ambiguous".
    found = iter(not line.endswith((" missing", " ambiguous")) for line in lines[:len(asked)])
    return [False if "\n" in n else next(found) for n in names]


def read_blobs(shas: list[str], cwd: Path) -> dict[str, bytes]:
    """The content of each blob, in one ``git cat-file --batch`` (a process per file costs ~5 ms)."""
    wanted = list(dict.fromkeys(shas))
    if not wanted:
        return {}
    proc = subprocess.run(["git", "cat-file", "--batch"], cwd=cwd, input="".join(f"{s}\n" for s in wanted).encode(),
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise GitError(f"git cat-file failed: {proc.stderr.decode(errors='replace').strip()}")
    data, pos, out = proc.stdout, 0, {}
    for sha in wanted:
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        pos = end + 1
        if len(header) != 3:  # "<sha> missing"
            continue
        size = int(header[2])
        out[sha] = data[pos:pos + size]
        pos += size + 1
    return out


def git_dir(worktree: Path, *, common: bool = False) -> Path:
    """The work tree's git directory, absolute; ``common``: the one its linked worktrees share
    (hooks live there)."""
    out = run(["rev-parse", "--git-common-dir" if common else "--git-dir"], worktree).stdout.strip()
    path = Path(out)
    return path if path.is_absolute() else worktree / path


def merge_base(a: str, b: str, cwd: Path) -> str | None:
    proc = run(["merge-base", a, b], cwd, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def head_sha(worktree: Path) -> str | None:
    """HEAD's commit, read from ``.git`` directly in the common layouts (a read pays this on
    every call; a ``git`` process costs ~5 ms), else asked of git."""
    gitdir = worktree / ".git"
    try:
        head = (gitdir / "HEAD").read_text(encoding="ascii").strip()
        if not head.startswith("ref: "):
            return head if len(head) == 40 else resolve_commit("HEAD", worktree)
        ref = head[5:]
        loose = gitdir / ref
        if loose.is_file():
            sha = loose.read_text(encoding="ascii").strip()
            if len(sha) == 40:
                return sha
        packed = gitdir / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="ascii").splitlines():
                if line.endswith(" " + ref) and len(line) > 41:
                    return line[:40]
        return None if not loose.exists() and not packed.exists() else resolve_commit("HEAD", worktree)
    except (OSError, UnicodeDecodeError):
        return resolve_commit("HEAD", worktree)


# -- remotes (memstore sync) ------------------------------------------------------------------------
# A network call must never wait on a prompt nobody can answer (an agent runs sync), nor hang
# for ever on a dead connection: past this it counts as unreachable.
NETWORK_TIMEOUT = 300.0


def _network(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        return run(args, cwd, check=False, env=env, timeout=NETWORK_TIMEOUT)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(["git", *args], 124, "", f"timed out after {NETWORK_TIMEOUT:.0f} s")


def last_line(proc: subprocess.CompletedProcess[str]) -> str:
    """git's last line of complaint (the fatal one), for an answer or an error message."""
    lines = [line.strip() for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
    fatal = [line for line in lines if line.startswith(("fatal:", "error:"))]
    return (fatal or lines or [f"exit {proc.returncode}"])[0 if fatal else -1]


def config_get(key: str, cwd: Path) -> str | None:
    proc = run(["config", "--get", key], cwd, check=False)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def current_branch(cwd: Path) -> str | None:
    """The checked-out branch (also before its first commit), or None on a detached HEAD."""
    proc = run(["symbolic-ref", "--quiet", "--short", "HEAD"], cwd, check=False)
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def add_remote(name: str, url: str, cwd: Path) -> None:
    run(["remote", "add", "--", name, url], cwd)


def remove_remote(name: str, cwd: Path) -> None:
    run(["remote", "remove", "--", name], cwd, check=False)


def set_upstream(branch: str, remote: str, remote_branch: str, cwd: Path) -> None:
    run(["config", f"branch.{branch}.remote", remote], cwd)
    run(["config", f"branch.{branch}.merge", f"refs/heads/{remote_branch}"], cwd)


def remote_heads(url: str, cwd: Path) -> tuple[dict[str, str], str | None]:
    """(branch -> sha, the branch the remote's HEAD names) of the repository at ``url``; empty
    for a repository without commits. Raises GitError when ``url`` cannot be listed."""
    proc = _network(["ls-remote", "--symref", "--", url], cwd)
    if proc.returncode != 0:
        raise GitError(last_line(proc))
    heads: dict[str, str] = {}
    default = None
    for line in proc.stdout.splitlines():
        value, _, ref = line.partition("\t")
        if value.startswith("ref: ") and ref == "HEAD":
            default = value[5:].removeprefix("refs/heads/")
        elif ref.startswith("refs/heads/"):
            heads[ref.removeprefix("refs/heads/")] = value
    return heads, default


def clone(url: str, dest: Path, branch: str | None, cwd: Path) -> None:
    args = ["clone", "--quiet", "--no-tags"] + ([f"--branch={branch}"] if branch else []) + ["--", url, str(dest)]
    proc = _network(args, cwd)
    if proc.returncode != 0:
        raise GitError(f"git clone failed: {last_line(proc)}")


def fetch(remote: str, cwd: Path) -> str | None:
    """Fetch ``remote``'s branches; None on success, else git's complaint (the remote cannot be
    reached: offline, gone, refused)."""
    proc = _network(["fetch", "--quiet", "--no-tags", remote], cwd)
    return None if proc.returncode == 0 else last_line(proc)


def rebase(onto: str, cwd: Path) -> list[str] | None:
    """Replay this branch's own commits on ``onto`` (uncommitted changes are set aside and put
    back). None on success; on a conflict the rebase is aborted, so the branch is as it was,
    and the conflicting paths are returned."""
    proc = run([*ident_args(cwd), "rebase", "--quiet", "--autostash", "--no-verify", onto], cwd, check=False)
    if proc.returncode == 0:
        return None
    conflicted = run(["diff", "--name-only", "--diff-filter=U", "-z"], cwd, check=False).stdout.split("\0")
    if run(["rebase", "--abort"], cwd, check=False).returncode != 0 and not any(conflicted):
        raise GitError(f"git rebase failed: {last_line(proc)}")
    return [p for p in conflicted if p] or [last_line(proc)]


def merge_settled(onto: str, cwd: Path, settle: Callable[[], list[str]], message: str) -> list[str] | None:
    """Join ``onto`` to this branch in one merge commit, compared as whole trees (base, this
    branch, ``onto``), never commit by commit; ``settle`` writes the files both sides changed
    and returns their paths, and until it has, a clashing hunk takes this branch's side
    (``-X ours``). None on success; on a conflict or any failure the merge is aborted, so the
    branch is as it was, and the conflicting paths are returned (or the failure raised)."""
    proc = run([*ident_args(cwd), "merge", "--quiet", "--no-ff", "--no-commit", "--no-verify", "-X", "ours", onto],
               cwd, check=False)
    conflicted = [p for p in run(["diff", "--name-only", "--diff-filter=U", "-z"], cwd, check=False).stdout.split("\0")
                  if p]
    if proc.returncode != 0 or conflicted:
        run(["merge", "--abort"], cwd, check=False)
        return conflicted or [last_line(proc)]
    try:
        written = settle()
        if written:
            run(["--literal-pathspecs", "add", "--all", "--pathspec-from-file=-", "--pathspec-file-nul"], cwd,
                input_text="\0".join(written))
        run([*ident_args(cwd), "commit", "--quiet", "--no-verify", "-m", message], cwd)
    except BaseException:
        run(["merge", "--abort"], cwd, check=False)
        raise
    return None


@dataclass(frozen=True)
class PushResult:
    status: str  # "ok", "behind" (the remote moved: fetch and retry), "refused", "unreachable"
    message: str = ""


def push(remote: str, dest_branch: str, cwd: Path) -> PushResult:
    """Push HEAD to ``dest_branch`` of ``remote``, never forced."""
    proc = _network(["push", "--porcelain", "--quiet", remote, f"HEAD:refs/heads/{dest_branch}"], cwd)
    if proc.returncode == 0:
        return PushResult("ok")
    # --porcelain reports each ref as "<flag>\t<from>:<to>\t<summary>"; "!" is a rejected ref.
    rejected = [line.split("\t")[-1] for line in proc.stdout.splitlines() if line.startswith("!")]
    if not rejected:
        return PushResult("unreachable", last_line(proc))
    summary = rejected[0]
    # "fetch first" / "non-fast-forward": the remote moved before the push began; "failed to
    # update ref" ("cannot lock ref ... but expected"): it moved while the push was under way.
    if any(s in summary for s in ("fetch first", "non-fast-forward", "stale info", "failed to update ref")):
        return PushResult("behind", summary)
    return PushResult("refused", f"{summary}: {last_line(proc)}" if proc.stderr.strip() else summary)


def reset_index(rev: str, cwd: Path) -> None:
    """Point the branch and index at ``rev``, leaving the work tree's files as they are."""
    run(["reset", "--quiet", "--mixed", rev], cwd)


def restore(paths: list[str], cwd: Path) -> None:
    """Make the work tree's copy of ``paths`` the index's."""
    if paths:
        run(["--literal-pathspecs", "checkout", "--pathspec-from-file=-", "--pathspec-file-nul", "--"],
            cwd, input_text="\0".join(paths))


def restore_missing(cwd: Path) -> None:
    """Check out the files the index has and the work tree lacks (and nothing else)."""
    missing = [p for p in run(["ls-files", "--deleted", "-z"], cwd).stdout.split("\0") if p]
    restore(missing, cwd)


def status_entries(cwd: Path) -> list[tuple[str, str]]:
    """(XY status, repo-relative path) of every change git sees: untracked files one by one,
    ignored ones left out, renames as a deletion and an addition."""
    proc = run(["status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames"], cwd)
    return [(item[:2], item[3:]) for item in proc.stdout.split("\0") if len(item) > 3]


def commit_all(paths: list[str], message: str, cwd: Path) -> None:
    """Record ``paths`` (repo-relative; new, changed or deleted) in one commit. Paths go on
    stdin, literally: any number of them, and a name is never read as an option or a glob."""
    if not paths:
        return
    listed = "\0".join(paths)
    base = ["--literal-pathspecs"]
    run([*base, "add", "--all", "--pathspec-from-file=-", "--pathspec-file-nul"], cwd, input_text=listed)
    run([*base, *ident_args(cwd), "commit", "--quiet", "--no-verify", "-m", message,
         "--pathspec-from-file=-", "--pathspec-file-nul"], cwd, input_text=listed)


def count_commits(base: str | None, head: str, cwd: Path) -> int:
    spec = f"{base}..{head}" if base else head
    return int(run(["rev-list", "--count", spec], cwd).stdout.strip() or 0)


def count_merges(base: str, head: str, cwd: Path) -> int:
    """Merge commits in ``base..head``."""
    return int(run(["rev-list", "--merges", "--count", f"{base}..{head}"], cwd).stdout.strip() or 0)


def changed_blobs(base: str | None, head: str, cwd: Path) -> dict[str, str]:
    """repo-relative path -> blob sha of every file ``head`` adds or changes since ``base``
    (every file of ``head`` without a base)."""
    if base is None:
        out = run(["ls-tree", "-r", "-z", head], cwd).stdout
        return {item.partition("\t")[2]: item.split()[2] for item in out.split("\0")
                if item and item.split()[1] == "blob"}
    out = run(["diff", "--raw", "--no-abbrev", "-z", "--no-renames", "--diff-filter=AMT", base, head], cwd).stdout
    parts = out.split("\0")
    # --raw -z: ":<old mode> <new mode> <old sha> <new sha> <status>" NUL "<path>" NUL ...
    return {parts[i + 1]: parts[i].split()[3] for i in range(0, len(parts) - 1, 2) if parts[i].startswith(":")}


# Every listing of paths memstore reads is read with -z. Without it git C-quotes a name holding a
# byte past ASCII, a quote, a backslash or a control character ("caf\303\251.md"), which then
# matches no path memstore knows; core.quotePath=false spares only the bytes past ASCII (a tab,
# a newline, a quote are quoted whatever it says).
def changed_names(base: str, head: str, cwd: Path) -> list[str]:
    out = run(["diff", "--name-only", "-z", "--no-renames", base, head], cwd).stdout
    return [p for p in out.split("\0") if p]


def name_status(old: str, new: str | None, paths: list[str], cwd: Path, *, cached: bool = False) -> dict[str, str]:
    """repo-relative path -> status letter (A, M, D, T) of every file under ``paths`` that
    differs between ``old`` and ``new`` (None: the work tree; ``cached``: the index)."""
    args = ["diff", *(["--cached"] if cached else []), "--name-status", "-z", "--no-renames", old,
            *([new] if new else []), "--", *paths]
    parts = run(args, cwd).stdout.split("\0")
    # -z: "<status>" NUL "<path>" NUL ...
    return {parts[i + 1]: parts[i][:1] for i in range(0, len(parts) - 1, 2) if parts[i + 1]}


def staged_changes(paths: list[str], cwd: Path) -> list[str]:
    """The files under ``paths`` the next commit would add, change or delete (before the first
    commit: every staged file)."""
    proc = run(["diff", "--cached", "--name-only", "-z", "--", *paths], cwd, check=False)
    return [p for p in proc.stdout.split("\0") if p]


def untracked(paths: list[str], cwd: Path) -> list[str]:
    """Files under ``paths`` that git does not track and does not ignore."""
    out = run(["ls-files", "--others", "--exclude-standard", "-z", "--", *paths], cwd).stdout
    return [p for p in out.split("\0") if p]


def commit_names(rev: str, cwd: Path) -> list[str] | None:
    """The paths commit ``rev`` changes (all of its files for a root commit); None when git
    cannot tell."""
    proc = run(["diff-tree", "--no-commit-id", "--name-only", "-z", "-r", "--root", rev], cwd, check=False)
    return [p for p in proc.stdout.split("\0") if p] if proc.returncode == 0 else None


def is_ancestor(a: str, b: str, cwd: Path) -> bool:
    """Is commit ``a`` an ancestor of (or the same as) ``b``?"""
    return run(["merge-base", "--is-ancestor", a, b], cwd, check=False).returncode == 0


def fast_forward(rev: str, cwd: Path) -> None:
    """Move the checked-out branch and its files to ``rev``, which must be ahead of it."""
    run(["merge", "--ff-only", "--quiet", rev], cwd)
