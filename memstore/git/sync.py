"""``memstore sync``: a store that is a git repository of its own (the global store,
``~/.memory``) travels between machines through any git remote.

Conflict-free by design: every memory, event and ended episode is a file of its own named by a
ULID, so two machines never write the same path; ``.index/`` and ``.local/`` are gitignored and
never committed. What is left to disagree on is a file both machines edited: ``config.yaml``
merges by key (``confmerge``: a setting changed on one machine only is taken, this machine's
comments stay); the same setting changed differently on both, or any other file both changed,
stops the sync before anything is rewritten (no rebase or merge left in progress), naming the
key or the file, and ``sync --keep mine|theirs`` settles it. When a file was changed on both
sides the histories are joined by one merge commit (whole trees compared, so steps whose ends
agree never clash); otherwise this machine's commits are replayed on the remote's.

A sync: commit what is not committed yet (each file checked first: no likely secret, no
invalid or edited memory), fetch, rebase this machine's commits on the remote's, push; if the
remote moved between the fetch and the push, once more. An unreachable remote is not an error:
everything stays committed here and the next sync pushes it.

A repo's ``.memory/`` is not synced: it travels with the code, reviewed in pull requests, and
pushing it would mean pushing the user's branch.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .. import gitops
from ..errors import Conflict, GitError, InvalidFile, InvalidRequest, MemstoreError, NotFound, SecretError
from ..store.disk import (
    GITIGNORE,
    GLOBAL_CONFIG,
    INDEX_DIRNAME,
    LOCAL_DIRNAME,
    OLD_DEFAULT_CONFIG,
    SHARED_PREFIX,
    Store,
    episode_tail,
)
from ..store.files import atomic_write, file_lock, private_dir
from ..store.model import DIR_KINDS
from ..store.secrets import find_secrets
from ..store.workspace import Workspace, attached_names, shared_root
from .confmerge import Unpatchable, conflicts_and_takes, merge_text

REMOTE = "origin"
# Files both machines start with: a copy still as memstore wrote it gives way to the remote's.
_LAYOUT_DEFAULTS = {"config.yaml": (GLOBAL_CONFIG, OLD_DEFAULT_CONFIG), ".gitignore": (GITIGNORE,)}
# Transports that run a command of the URL's choosing (git refuses them by default too).
_COMMAND_TRANSPORTS = ("ext::", "fd::")
_SHOWN_PROBLEMS = 5


@dataclass(frozen=True)
class Upstream:
    remote: str
    branch: str  # the branch on the remote
    tracked: bool  # the local branch already records it as its upstream

    @property
    def ref(self) -> str:
        return f"refs/remotes/{self.remote}/{self.branch}"


KEEP_CHOICES = ("mine", "theirs")


def sync(ws: Workspace, *, store_given: bool, keep: str | None = None) -> dict[str, Any]:
    """Sync the global store, or the store ``--store`` named (``store_given``); ``keep`` ("mine"
    or "theirs") settles what both machines changed differently. Without ``--store`` the
    attached shared stores are fetched too (``shared``), even when the global store has no
    remote of its own."""
    store = ws.repo if store_given and ws.repo is not None else ws.global_
    if keep is not None and keep not in KEEP_CHOICES:
        raise InvalidRequest(f"--keep takes mine or theirs, not {keep!r}", code="bad_value", field="keep")
    if store_given:
        return sync_store(store, keep=keep)
    names = attached_names(ws.global_.root)
    shared = [sync_shared(name, shared_root(ws.global_.root) / name) for name in names]
    try:
        answer = sync_store(store, keep=keep)
    except (NotFound, InvalidRequest) as exc:
        if not names or exc.code not in ("no_remote", "not_a_repo"):
            raise
        # The shared stores were fetched: a global store kept on this machine only is no failure.
        answer = {"ok": True, "scope": "global", "root": str(store.root), "global_synced": False,
                  "warnings": [f"the global store was not synced: {exc.message}"]}
    answer["shared"] = shared
    return answer


def sync_shared(name: str, root: Path) -> dict[str, Any]:
    """Fetch one attached shared store and move it forward to its remote branch: fast-forward
    only. memstore never writes into a shared store, so a local branch that diverged was changed
    by hand: it is reported and left as it is, never merged."""
    out: dict[str, Any] = {"name": name, "scope": SHARED_PREFIX + name, "received": 0, "offline": False,
                           "diverged": False}
    branch = gitops.current_branch(root)
    if branch is None:
        out.update(diverged=True, problem="not on a branch (a detached HEAD): left as it is")
        return out
    out["branch"] = branch
    unreachable = gitops.fetch(REMOTE, root)
    if unreachable is not None:
        out.update(offline=True, problem=unreachable)
        return out
    theirs = gitops.resolve_commit(f"refs/remotes/{REMOTE}/{branch}", root)
    mine = gitops.resolve_commit("HEAD", root)
    if theirs is None or mine is None or theirs == mine or gitops.is_ancestor(theirs, mine, root):
        return out
    if not gitops.is_ancestor(mine, theirs, root):
        out.update(diverged=True, problem=f"local {branch} and {REMOTE}/{branch} diverged: nothing was merged",
                   hint=f"git -C {root} reset --hard {REMOTE}/{branch} drops the local commits")
        return out
    try:
        gitops.fast_forward(theirs, root)
    except GitError as exc:  # a file changed by hand in the clone stands in the way
        out.update(diverged=True, problem=f"cannot fast-forward: {exc.message}")
        return out
    out["received"] = len(gitops.changed_names(mine, theirs, root))
    return out


def sync_store(store: Store, *, keep: str | None = None) -> dict[str, Any]:
    root = _own_repository(store)
    up = _upstream(root)
    with file_lock(store.index_dir / "sync.lock"):
        return _sync(store, root, up, keep)


def _sync(store: Store, root: Path, up: Upstream, keep: str | None = None) -> dict[str, Any]:
    with store.write_lock():  # a write in flight must not be half-way through its own commit
        committed = _commit_pending(store, root)
    answer: dict[str, Any] = {
        "ok": True, "scope": store.scope, "root": str(root), "remote": up.remote,
        "url": redact_url(gitops.config_get(f"remote.{up.remote}.url", root) or ""), "branch": up.branch,
        "committed": len(committed), "received": 0, "pushed": 0, "unpushed": 0, "retried": False, "offline": False,
        "pending": _proposals_waiting(store),
    }
    received: set[str] = set()
    for attempt in range(2):
        unreachable = gitops.fetch(up.remote, root)
        if unreachable is not None:
            return _offline(answer, root, up, unreachable, received)
        remote_head = gitops.resolve_commit(up.ref, root)
        if remote_head is not None:
            before = gitops.resolve_commit("HEAD", root)
            settled = _settle_both_changed(root, up, keep)  # refuses before anything is rewritten
            if settled is None and gitops.count_merges(up.ref, "HEAD", root):
                # A merge an earlier sync made and could not push: a rebase would flatten it and
                # replay the commits it settled, clashing again however --keep is given.
                settled = {}
            with store.write_lock():
                if settled is None:
                    conflicted = gitops.rebase(up.ref, root)
                else:  # whole trees: a replay commit by commit would clash on steps the ends agree on
                    how = f" ({', '.join(settled)}: {'kept ' + keep if keep else 'merged by key'})" if settled else ""
                    conflicted = gitops.merge_settled(up.ref, root, lambda s=settled: _write_settled(root, s),
                                                      f"memstore: sync with {up.remote}/{up.branch}{how}")
            if conflicted:
                raise Conflict(
                    f"this store and {up.remote}/{up.branch} both changed {', '.join(conflicted[:_SHOWN_PROBLEMS])}: "
                    "nothing was changed here and nothing was pushed", code="sync_conflict",
                    hint="`memstore sync --keep mine` keeps this machine's version, `memstore sync --keep theirs` "
                    f"takes {up.remote}'s", details={"paths": conflicted})
            after = gitops.resolve_commit("HEAD", root)
            if before and after and before != after:
                received.update(gitops.changed_names(before, after, root))
        answer["received"] = len(received)
        outgoing = gitops.count_commits(remote_head, "HEAD", root)
        if outgoing == 0:
            return answer
        _refuse_outgoing_secrets(root, remote_head)
        result = gitops.push(up.remote, up.branch, root)
        if result.status == "ok":
            if not up.tracked:
                branch = gitops.current_branch(root)
                if branch:
                    gitops.set_upstream(branch, up.remote, up.branch, root)
            answer["pushed"] = outgoing
            return answer
        if result.status == "unreachable":
            return _offline(answer, root, up, result.message, received)
        if result.status == "behind" and attempt == 0:
            answer["retried"] = True  # the remote moved since the fetch: fetch and rebase again
            continue
        why = ("moved again while this sync pushed (another machine is syncing)" if result.status == "behind"
               else f"refused the push ({result.message})")
        raise Conflict(f"{up.remote} {why}; everything is committed here", code="push_rejected",
                       hint="run `memstore sync` again; if it keeps failing, check what the remote allows "
                       f"(git -C {root} push)")
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


# -- files both machines changed ------------------------------------------------------------------------
def _proposals_waiting(store: Store) -> int:
    """Global memories proposed in review mode (``verbs/pending``'s folder, ``.local/pending``):
    they live outside git until ``memstore approve``, so a sync carries none of them, which a
    person who just wrote one would not guess."""
    folder = store.local_dir / "pending"
    if folder.is_symlink() or not folder.is_dir():
        return 0
    return sum(1 for p in folder.glob("*.md") if p.is_file() and not p.is_symlink())


def _settle_both_changed(root: Path, up: Upstream, keep: str | None) -> dict[str, str] | None:
    """The final text of each file this machine and the remote both changed since they last
    agreed and that differs (None: no file was changed on both sides), or a ``sync_conflict``
    naming what differs, raised before anything is rewritten. Memories and events never get
    here: each is a file of its own, named by a ULID. ``config.yaml`` merges by key; any other
    file, or a key both changed differently, needs ``keep``; an edit against a deletion needs
    the person (git's merge cannot take either side of it)."""
    base = gitops.merge_base("HEAD", up.ref, root)
    if base is None:
        return None
    both = sorted(set(gitops.changed_names(base, "HEAD", root)) & set(gitops.changed_names(base, up.ref, root)))
    if not both:
        return None
    settled: dict[str, str] = {}
    where = f"{up.remote}/{up.branch}"
    for path in both:
        mine, theirs = gitops.show_file("HEAD", path, root), gitops.show_file(up.ref, path, root)
        if mine == theirs:
            continue
        if path == "config.yaml" and mine is not None and theirs is not None:
            settled[path] = _merged_config(path, gitops.show_file(base, path, root), mine, theirs, keep, where)
            continue
        if mine is None or theirs is None:
            fix = (f"delete it here too (rm {root / path})" if theirs is None
                   else f"take the remote's back (git -C {root} checkout {up.ref} -- {path})")
            raise Conflict(f"{path} was deleted {'here' if mine is None else 'on ' + where} and edited on the other "
                           "machine: nothing was changed here and nothing was pushed", code="sync_conflict",
                           details={"paths": [path]}, hint=f"{fix}, or restore it on the machine that deleted it; "
                           "then sync again")
        if keep is None:
            raise Conflict(f"{path} was edited on this machine and on {where}: nothing was changed here "
                           "and nothing was pushed", code="sync_conflict", details={"paths": [path]},
                           hint=f"`memstore sync --keep mine` keeps this machine's {path}, "
                           f"`memstore sync --keep theirs` takes {up.remote}'s")
        settled[path] = (mine if keep == "mine" else theirs).decode("utf-8", errors="replace")
    return settled


def _merged_config(path: str, base: bytes | None, mine: bytes, theirs: bytes, keep: str | None,
                   where: str) -> str:
    texts = [None if base is None else base.decode("utf-8", errors="replace"),
             mine.decode("utf-8", errors="replace"), theirs.decode("utf-8", errors="replace")]
    try:
        conflicts, _, _ = conflicts_and_takes(*texts)
        if conflicts and keep is None:
            shown = "; ".join(f"`{s['key']}` is {_yaml_value(s['mine'])} here and {_yaml_value(s['theirs'])} on "
                              f"{where} (it was {_yaml_value(s['base'])})"
                              for s in (c.shown() for c in conflicts[:_SHOWN_PROBLEMS]))
            raise Conflict(f"{path}: {shown}: nothing was changed here and nothing was pushed",
                           code="sync_conflict", details={"paths": [path], "keys": [c.shown() for c in conflicts]},
                           hint=f"`memstore sync --keep mine` keeps this machine's value, `memstore sync --keep "
                           f"theirs` takes {where.split('/')[0]}'s; settings only one machine changed merge either way")
        return merge_text(*texts, keep=keep)
    except (Unpatchable, yaml.YAMLError) as exc:
        if keep is not None:
            return texts[1] if keep == "mine" else texts[2]  # type: ignore[return-value]
        raise Conflict(f"{path} was changed on this machine and on {where}, and cannot be merged by key ({exc}): "
                       "nothing was changed here and nothing was pushed", code="sync_conflict",
                       details={"paths": [path]},
                       hint=f"`memstore sync --keep mine` keeps this machine's {path} whole, "
                       f"`memstore sync --keep theirs` takes {where.split('/')[0]}'s") from exc


def _yaml_value(value: Any) -> str:
    if isinstance(value, str) and value == "(not set)":
        return "not set"
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def _write_settled(root: Path, settled: dict[str, str]) -> list[str]:
    """Inside the merge: each file both machines changed gets its final text."""
    for path, text in settled.items():
        atomic_write(root / path, text)
    return list(settled)


def _offline(answer: dict[str, Any], root: Path, up: Upstream, why: str, received: set[str]) -> dict[str, Any]:
    remote_head = gitops.resolve_commit(up.ref, root)
    answer.update(offline=True, received=len(received), pushed=0,
                  unpushed=gitops.count_commits(remote_head, "HEAD", root))
    answer["warnings"] = [f"the remote cannot be reached ({why}): everything is committed in this store; "
                          "the next `memstore sync` pushes it"]
    return answer


# -- the store and its remote -------------------------------------------------------------------------
def _own_repository(store: Store) -> Path:
    """The store's root, if it is the top of its own git repository; else a clear refusal."""
    store.require()
    top = gitops.toplevel(store.root)
    hint = ("memstore init --global --remote URL" if store.scope == "global"
            else f"git -C {store.root} init, then git remote add origin URL")
    if top is None:
        raise InvalidRequest(f"{store.root} is not a git repository, so it has nothing to sync through",
                             code="not_a_repo", hint=f"run `{hint}`")
    if top.resolve() != store.root.resolve():
        raise InvalidRequest(
            f"{store.root} lives in the repository {top}: a repo's memories travel with its code "
            "(commit them and push your branch, reviewed in the pull request); sync moves only a store "
            "that is a repository of its own, such as the global store", code="not_standalone",
            hint="run `memstore sync` without --store for the global store")
    return store.root


def _upstream(root: Path) -> Upstream:
    branch = gitops.current_branch(root)
    if branch is None:
        raise GitError(f"{root} is not on a branch (a detached HEAD): sync does not know what to push",
                       hint=f"git -C {root} switch <branch>")
    remote = gitops.config_get(f"branch.{branch}.remote", root)
    merge = gitops.config_get(f"branch.{branch}.merge", root)
    tracked = remote is not None and merge is not None and merge.startswith("refs/heads/")
    if remote is None and gitops.config_get(f"remote.{REMOTE}.url", root) is not None:
        remote = REMOTE
    if remote is None or remote == "." or remote.startswith("-"):
        raise NotFound(f"the store at {root} has no git remote to sync with", code="no_remote",
                       hint="memstore init --global --remote URL (a new, empty repository is fine)")
    dest = merge.removeprefix("refs/heads/") if tracked and merge else branch
    return Upstream(remote, dest, tracked)


def redact_url(url: str) -> str:
    """``url`` without the credentials it may carry (``https://user:token@host``), for answers."""
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@", r"\1***@", url)


def _checked_url(url: str, cwd: Path) -> str:
    """A remote URL git may be given, or ``bad_remote``: never an option, never a command."""
    if not url or url.startswith("-") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise InvalidRequest(f"{url!r} is not a git remote URL", code="bad_remote", field="remote",
                             hint="give a URL git can clone: https://..., git@host:path, ssh://..., or a path")
    if url.lower().startswith(_COMMAND_TRANSPORTS):
        raise InvalidRequest(f"{url.split('::')[0]}:: remotes run commands; memstore does not use them",
                             code="bad_remote", field="remote")
    scheme = "://" in url
    scp_like = ":" in url and "/" not in url.split(":", 1)[0]
    if not scheme and not scp_like:  # a local path: git would read it relative to the store
        return str((cwd / Path(url).expanduser()).resolve())
    return url


# -- committing what is not committed yet --------------------------------------------------------------
def _commit_pending(store: Store, root: Path) -> list[str]:
    """Commit every change in the store that may travel, after checking each file; any file that
    must not (a likely secret, an invalid memory, an edited committed one) refuses the sync whole,
    with nothing committed."""
    paths: list[str] = []
    problems: list[dict[str, str]] = []
    for xy, rel in gitops.status_entries(root):
        top = rel.split("/", 1)[0]
        if top in (INDEX_DIRNAME, LOCAL_DIRNAME):  # even if a pulled .gitignore forgot them
            continue
        full = root / rel
        record = top in DIR_KINDS or top == "events"
        committed = xy != "??" and "A" not in xy  # "A": staged by hand, never committed
        if committed and record:
            problems.append({"path": rel, "code": "immutable", "message": "a committed memory or event was "
                             + ("deleted" if not full.exists() else "edited") + "; corrections are new "
                             "memories or update events"})
            continue
        if not full.exists() and not full.is_symlink():
            paths.append(rel)  # a deleted file of the user's own (not a memory): the deletion travels
            continue
        if top == "episodes" and rel.endswith(".jsonl") and not _ended(full):
            continue  # a session still running: its log is committed when it ends
        problem = _file_problem(store, rel, top)
        if problem is not None:
            problems.append(problem)
        else:
            paths.append(rel)
    if problems:
        secret = any(p["code"] == "secret" for p in problems)
        shown = "; ".join(f"{p['path']}: {p['message']}" for p in problems[:_SHOWN_PROBLEMS])
        more = f" (and {len(problems) - _SHOWN_PROBLEMS} more)" if len(problems) > _SHOWN_PROBLEMS else ""
        err = (SecretError if secret else InvalidRequest)(
            f"nothing was synced: {shown}{more}", code="secret" if secret else "invalid_file",
            hint="fix or remove the file(s) (`memstore check --global` lists every problem), then sync again",
            details={"files": problems})
        raise err
    gitops.commit_all(paths, f"memstore: sync {len(paths)} file(s)", root)
    return paths


def _ended(path: Path) -> bool:
    try:
        return episode_tail(path)[1]
    except (OSError, ValueError):
        return True  # not an episode memstore is writing: checked like any other file


def _secret_problem(rel: str, text: str) -> dict[str, str] | None:
    found = find_secrets(text)
    if not found:
        return None
    return {"path": rel, "code": "secret",
            "message": f"looks like a secret ({found[0].kind} on line {found[0].line}: {found[0].excerpt})"}


def _file_problem(store: Store, rel: str, top: str) -> dict[str, str] | None:
    try:
        secret = _secret_problem(rel, store.read_file(rel))  # bounded, never through a link
        if secret is not None:
            return secret
        if top in DIR_KINDS and rel.endswith(".md"):
            store.load_memory(rel)
        elif top == "events" and rel.endswith(".yaml"):
            store.load_event(rel)
    except (InvalidFile, InvalidRequest) as exc:
        return {"path": rel, "code": exc.code, "message": exc.message}
    except OSError as exc:
        return {"path": rel, "code": "invalid_file", "message": f"cannot be read ({exc.strerror})"}
    return None


def _refuse_outgoing_secrets(root: Path, base: str | None) -> None:
    """The last gate before anything leaves the machine: commits made by hand in the store skip
    memstore's write gates, so every file the push would carry is scanned."""
    blobs = gitops.changed_blobs(base, "HEAD", root)
    contents = gitops.read_blobs(list(blobs.values()), root)
    problems = [p for rel, sha in sorted(blobs.items())
                if (p := _secret_problem(rel, contents.get(sha, b"").decode("utf-8", errors="replace")))]
    if problems:
        shown = "; ".join(f"{p['path']}: {p['message']}" for p in problems[:_SHOWN_PROBLEMS])
        raise SecretError(f"nothing was pushed: a commit to push carries {shown}", details={"files": problems},
                          hint=f"remove the secret from the store's unpushed commits (git -C {root} rebase -i), "
                          "then sync again")


# -- init --global --remote URL --------------------------------------------------------------------------
def init_global(ws: Workspace, url: str, cwd: Path) -> dict[str, Any]:
    """Set the global store up with ``url`` as its remote: a clone when the remote has history
    and there is no store here yet; otherwise the local store (created if need be) joins the
    remote's history and pushes what it has. A URL git cannot list is refused, nothing written."""
    store = ws.global_
    url = _checked_url(url, cwd)
    try:
        heads, default = gitops.remote_heads(url, cwd)
    except GitError as exc:
        raise InvalidRequest(f"{redact_url(url)} cannot be used as a remote: {exc.message}", code="bad_remote",
                             field="remote", hint="check the URL and your access; nothing was written") from exc
    own_repo = store.root.is_dir() and gitops.toplevel(store.root) == store.root
    current = gitops.config_get(f"remote.{REMOTE}.url", store.root) if own_repo else None
    if current is not None and current != url:
        raise Conflict(f"the global store already syncs with {redact_url(current)}", code="remote_set",
                       hint=f"to change it: git -C {store.root} remote set-url {REMOTE} URL")
    branch = default if default in heads else (sorted(heads)[0] if heads else None)
    cloned = False
    if heads and not store.root.exists():
        store.root.parent.mkdir(parents=True, exist_ok=True)
        gitops.clone(url, store.root, branch, cwd)
        store.root.chmod(0o700)  # the global store is the user's alone, as `init` makes it
        cloned = True
    gitops.toplevel.cache_clear()
    if cloned or own_repo:
        store.worktree = store.root
    created = store.init()  # git init and the layout, each only if missing
    private_dir(store.index_dir)
    if current is None and not cloned:
        gitops.add_remote(REMOTE, url, store.root)
    if heads and branch and not cloned:
        try:
            _join(store, branch)
        except MemstoreError:
            if current is None:
                gitops.remove_remote(REMOTE, store.root)
            raise
    answer = {"ok": True, "scope": "global", "root": str(store.root), "created": created,
              "remote": REMOTE, "url": redact_url(url), "cloned": cloned}
    answer["sync"] = sync_store(store)
    return answer


def _join(store: Store, branch: str) -> None:
    """A local store meeting a remote with history: if they share none, this store takes the
    remote's history and its own files become new files on top (sync commits them); the layout
    files give way to the remote's when they are still as memstore wrote them."""
    root = store.root
    unreachable = gitops.fetch(REMOTE, root)
    if unreachable is not None:
        raise GitError(f"cannot fetch {REMOTE}: {unreachable}")
    ref = f"refs/remotes/{REMOTE}/{branch}"
    local = gitops.current_branch(root) or branch
    if gitops.merge_base("HEAD", ref, root) is None:
        differing, take = [], []
        for name, default in _LAYOUT_DEFAULTS.items():
            theirs = gitops.show_file(ref, name, root)
            with contextlib.suppress(OSError):
                text = (root / name).read_text(encoding="utf-8")
                if theirs is not None and text != theirs.decode("utf-8", errors="replace"):
                    (take if text in default else differing).append(name)
        if differing:
            raise Conflict(f"{', '.join(differing)} differs between this global store and the remote, and both "
                           "were edited: nothing was changed", code="sync_conflict", details={"paths": differing},
                           hint="make the files the same (or restore this store's to the default), then run init "
                           "again")
        gitops.reset_index(ref, root)
        gitops.restore(take, root)
        gitops.restore_missing(root)
    gitops.set_upstream(local, REMOTE, branch, root)


