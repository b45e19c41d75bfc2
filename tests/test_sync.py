"""`memstore sync` and `memstore init --global --remote URL`: the global store of two machines
(two homes) kept in step through a real bare remote, with real git, through the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import docs_text, git, make_git_repo, run_cli, run_on_tty, write_req
from quotednames import NAMES, memory_file

from memstore.store.workspace import open_workspace
from memstore.surfaces import client
from memstore.verbs import api

# A GitHub token shape (the secret scan knows it); not a real token.
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


class Home:
    """One machine: its HOME, its global store, and the CLI run as that user."""

    def __init__(self, base: Path, name: str) -> None:
        self.home = base / name
        self.home.mkdir()
        self.store = self.home / ".memory"
        self.cwd = base  # not inside any repository: only the global store is in play
        # autonomous: each global write is committed at once (in review mode it would wait for
        # `memstore approve`, tests/test_pending.py); sync moves what is committed
        self.vars = {"HOME": str(self.home), "MEMSTORE_HOME": str(self.store), "MEMSTORE_WRITE_MODE": "autonomous"}

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.vars}

    def cli(self, *args: str, cwd: Path | None = None) -> tuple[int, Any, str]:
        return run_cli(args, cwd=cwd or self.cwd, env=self.env(), timeout=300)

    def write(self, kind: str, text: str, **extra: Any) -> str:
        """A write through the library, as a long-lived agent process makes it (the global store
        commits each one)."""
        ws = open_workspace(cwd=self.cwd, env=self.vars)
        return api.write(ws, write_req(kind, text, scope="global", **extra))["id"]

    def memory_files(self) -> set[str]:
        return {p.relative_to(self.store).as_posix() for p in self.store.rglob("*.md")
                if ".index" not in p.parts and ".git" not in p.parts}

    def head(self) -> str:
        return git(self.store, "rev-parse", "HEAD").strip()

    def status(self) -> str:
        return git(self.store, "status", "--porcelain")


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    path = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(path))
    return path


@pytest.fixture
def homes(tmp_path: Path, remote: Path) -> tuple[Home, Home]:
    """Machine A sets the remote up (it is empty: A pushes), machine B joins it (a clone)."""
    a, b = Home(tmp_path, "a"), Home(tmp_path, "b")
    code, out, err = a.cli("init", "--global", "--remote", str(remote))
    assert code == 0, err
    assert out["cloned"] is False and out["sync"]["pushed"] == 1
    code, out, err = b.cli("init", "--global", "--remote", str(remote))
    assert code == 0, err
    assert out["cloned"] is True and (b.store / "config.yaml").is_file()
    assert b.head() == a.head()
    return a, b


def remote_head(remote: Path) -> str:
    return git(remote, "rev-parse", "HEAD").strip()


def sync(home: Home) -> dict[str, Any]:
    code, out, err = home.cli("sync")
    assert code == 0, (out, err)
    assert out["ok"] is True
    return out


# -- the scenario ----------------------------------------------------------------------------------
TOPICS = ["postgres", "redis", "nginx", "celery", "kafka", "terraform", "docker", "pytest", "alembic", "grafana"]


def fact_text(side: str, i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return f"On machine {side}, note {i}: the {topic} service of project {side}{i:02d} listens on port {5000 + i}."


@pytest.mark.model
@pytest.mark.slow
def test_fifty_interleaved_writes_on_each_side_converge_without_conflict(homes: tuple[Home, Home],
                                                                        remote: Path) -> None:
    a, b = homes
    ids = {"A": [], "B": []}
    for i in range(50):
        ids["A"].append(a.write("fact", fact_text("A", i)))
        ids["B"].append(b.write("fact", fact_text("B", i)))
        if i == 24:  # a sync on each side half-way, so each side rebases on the other's work
            sync(a)
            sync(b)
    first, second, third = sync(a), sync(b), sync(a)
    assert first["pushed"] >= 25 and second["received"] == 25 and second["pushed"] >= 25
    assert third["received"] == 25 and third["pushed"] == 0

    every = set(ids["A"]) | set(ids["B"])
    assert len(every) == 100
    for home in (a, b):
        code, out, err = home.cli("list", "--scope", "global", "--limit", "500")
        assert code == 0, err
        assert {m["id"] for m in out["memories"]} == every
        assert home.status() == ""  # everything committed, no rebase or conflict left behind
        assert not (home.store / ".git" / "rebase-merge").exists()
    assert a.memory_files() == b.memory_files()
    assert a.head() == b.head() == remote_head(remote)

    # The same question gets the same answer on both machines.
    answers = []
    for home in (a, b):
        code, out, err = home.cli("read", "which port does the celery service of project B13 listen on")
        assert code == 0, err
        answers.append([(r["id"], r["text"]) for r in out["results"]])
    assert answers[0] == answers[1]
    assert fact_text("B", 13) in [text for _, text in answers[0]]


def test_offline_sync_says_so_loses_nothing_and_a_later_sync_pushes(homes: tuple[Home, Home], remote: Path,
                                                                    tmp_path: Path) -> None:
    a, b = homes
    away = tmp_path / "remote-away.git"
    remote.rename(away)  # the remote cannot be reached
    written = [a.write("preference", "Prefer ruff over flake8 for linting Python."),
               a.write("fact", "The shared CI runners have 2 cores and 7 GB of memory.")]
    before = a.head()
    code, out, err = a.cli("sync")
    assert code == 0, err
    assert out["offline"] is True and out["pushed"] == 0 and out["unpushed"] == 2
    assert "cannot be reached" in out["warnings"][0]
    assert a.head() == before and a.status() == ""  # committed here, nothing lost or half-done

    away.rename(remote)
    out = sync(a)
    assert out["offline"] is False and out["pushed"] == 2
    out = sync(b)
    assert out["received"] == 2
    code, listed, err = b.cli("list", "--scope", "global")
    assert set(written) <= {m["id"] for m in listed["memories"]}


def test_pending_files_are_committed_but_a_running_episode_is_not(homes: tuple[Home, Home]) -> None:
    a, b = homes
    (a.store / "facts" / "hand-written-note.md").write_text(
        "---\nkind: fact\nscope: global\n---\nOur VPN needs the split-tunnel profile for the package mirror.\n")
    (a.store / "facts" / "staged-by-hand.md").write_text(
        "---\nkind: fact\nscope: global\n---\nThe home NAS exports its media share over NFSv4 only.\n")
    git(a.store, "add", "facts/staged-by-hand.md")
    code, out, err = a.cli("episode", "start", "--agent", "test", "--task", "tidy the dotfiles")
    assert code == 0, err
    episode_file = next((a.store / "episodes").rglob("*.jsonl"))
    out = sync(a)
    assert out["committed"] == 2 and out["pushed"] == 1
    assert "hand-written-note.md" in git(a.store, "ls-files", "facts")
    assert episode_file.name not in git(a.store, "ls-files", "episodes")  # still being written
    sync(b)
    assert (b.store / "facts" / "hand-written-note.md").is_file()

    code, out, err = a.cli("episode", "end", "--outcome", "success")
    assert code == 0, err
    sync(a)
    sync(b)
    assert (b.store / episode_file.relative_to(a.store)).is_file()


# -- the race ------------------------------------------------------------------------------------------
def _pre_push_moves_remote(home: Home, other: Home, *, every_time: bool) -> None:
    """A pre-push hook in ``home``'s store: between sync's fetch and its push, the other machine
    pushes a commit (the race the issue names), on the first push only or on every one."""
    marker = home.home / "moved-once"
    guard = "" if every_time else f'[ -e "{marker}" ] && exit 0\ntouch "{marker}"\n'
    hook = home.store / ".git" / "hooks" / "pre-push"
    hook.write_text(
        "#!/bin/sh\n" + guard
        + "unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE\n"
        + f'git -C "{other.store}" commit -q --allow-empty -m "elsewhere" >/dev/null\n'
        + f'git -C "{other.store}" push -q origin HEAD:refs/heads/$(git -C "{other.store}" symbolic-ref --short HEAD)\n'
        + "exit 0\n")
    hook.chmod(0o755)


def test_a_race_with_another_push_is_retried_once(homes: tuple[Home, Home], remote: Path) -> None:
    a, b = homes
    written = a.write("fact", "Deploys to the staging cluster go through the blue environment first.")
    _pre_push_moves_remote(a, b, every_time=False)
    out = sync(a)
    assert out["retried"] is True and out["pushed"] == 1 and out["unpushed"] == 0
    assert out["received"] == 0  # the other machine's commit was empty
    assert remote_head(remote) == a.head()
    assert git(remote, "log", "--format=%s", "-2").split("\n")[:2] == [
        f"memstore: add fact {written[:10]}", "elsewhere"]


def test_a_remote_that_keeps_moving_is_retried_once_then_refused(homes: tuple[Home, Home], remote: Path) -> None:
    a, b = homes
    a.write("fact", "The nightly backup job runs at 02:00 UTC on the ops box.")
    _pre_push_moves_remote(a, b, every_time=True)
    code, out, err = a.cli("sync")
    assert code == 4, (out, err)
    assert out["error"]["code"] == "push_rejected"
    assert "moved again" in out["error"]["message"] and "everything is committed here" in out["error"]["message"]
    assert a.status() == ""
    (a.store / ".git" / "hooks" / "pre-push").unlink()
    assert sync(a)["pushed"] == 1  # the next sync pushes it
    assert remote_head(remote) == a.head()


# -- refusals --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["--upload-pack=touch /tmp/memstore-pwned", "ext::sh -c touch% /tmp/memstore-pwned",
                                 "does-not-exist.git", "https://exa mple.invalid/\nrepo.git"])
def test_init_refuses_a_bad_remote_and_writes_nothing(tmp_path: Path, url: str) -> None:
    home = Home(tmp_path, "a")
    code, out, err = home.cli("init", "--global", "--remote", url)
    assert code == 2, (out, err)
    assert out["error"]["code"] == "bad_remote"
    assert not home.store.exists()
    assert not Path("/tmp/memstore-pwned").exists()


def test_init_with_a_bad_remote_leaves_an_existing_store_as_it_was(tmp_path: Path) -> None:
    home = Home(tmp_path, "a")
    assert home.cli("init", "--global")[0] == 0
    home.write("fact", "The laptop's Docker daemon uses the overlay2 storage driver.")
    before = (home.head(), git(home.store, "config", "--list", "--local"))
    code, out, _err = home.cli("init", "--global", "--remote", str(tmp_path / "nowhere.git"))
    assert code == 2 and out["error"]["code"] == "bad_remote"
    assert (home.head(), git(home.store, "config", "--list", "--local")) == before


def test_init_refuses_a_second_remote(homes: tuple[Home, Home], tmp_path: Path) -> None:
    a, _ = homes
    other = tmp_path / "other.git"
    git(tmp_path, "init", "-q", "--bare", str(other))
    code, out, _err = a.cli("init", "--global", "--remote", str(other))
    assert code == 4 and out["error"]["code"] == "remote_set"
    assert git(a.store, "remote", "get-url", "origin").strip() != str(other)


def test_remote_needs_global(tmp_path: Path, remote: Path) -> None:
    home = Home(tmp_path, "a")
    code, out, _ = home.cli("init", "--remote", str(remote), cwd=make_git_repo(tmp_path / "code"))
    assert code == 2 and out["error"]["code"] == "usage"
    assert not (tmp_path / "code" / ".memory").exists()


def test_sync_without_a_remote_says_how_to_add_one(tmp_path: Path) -> None:
    home = Home(tmp_path, "a")
    assert home.cli("init", "--global")[0] == 0
    code, out, _ = home.cli("sync")
    assert code == 3 and out["error"]["code"] == "no_remote"
    assert "--remote" in out["error"]["hint"]


def test_a_repo_store_is_not_synced(tmp_path: Path, remote: Path) -> None:
    """A repo's .memory/ travels with the code: sync would push the user's branch."""
    home = Home(tmp_path, "a")
    code_repo = make_git_repo(tmp_path / "code")
    git(code_repo, "remote", "add", "origin", str(remote))
    assert home.cli("init", cwd=code_repo)[0] == 0
    head = git(code_repo, "rev-parse", "HEAD")
    code, out, _ = home.cli("--store", str(code_repo / ".memory"), "sync", cwd=code_repo)
    assert code == 2 and out["error"]["code"] == "not_standalone"
    assert git(code_repo, "rev-parse", "HEAD") == head
    assert git(remote, "for-each-ref") == ""  # nothing pushed


def test_a_pending_file_with_a_secret_refuses_the_sync_and_nothing_moves(homes: tuple[Home, Home],
                                                                         remote: Path) -> None:
    a, _ = homes
    a.write("fact", "The artifact bucket is in eu-west-1.")
    leaked = a.store / "facts" / "leaked-token.md"
    leaked.write_text(f"---\nkind: fact\nscope: global\n---\nThe deploy token is {TOKEN}\n")
    head, pushed = a.head(), remote_head(remote)
    code, out, err = a.cli("sync")
    assert code == 2, (out, err)
    assert out["error"]["code"] == "secret"
    assert out["error"]["files"][0]["path"] == "facts/leaked-token.md"
    assert TOKEN not in str(out) and TOKEN not in err
    assert a.head() == head and remote_head(remote) == pushed  # nothing committed, nothing pushed
    assert "?? facts/leaked-token.md" in a.status()

    leaked.unlink()
    assert sync(a)["pushed"] == 1


def test_a_secret_committed_by_hand_is_never_pushed(homes: tuple[Home, Home], remote: Path) -> None:
    a, _ = homes
    (a.store / "notes.txt").write_text(f"token: {TOKEN}\n")
    git(a.store, "add", "notes.txt")
    git(a.store, "commit", "-q", "-m", "notes")
    pushed = remote_head(remote)
    code, out, _ = a.cli("sync")
    assert code == 2 and out["error"]["code"] == "secret"
    assert out["error"]["files"][0]["path"] == "notes.txt"
    assert remote_head(remote) == pushed


def test_an_edited_committed_memory_is_not_synced(homes: tuple[Home, Home]) -> None:
    a, _ = homes
    a.write("fact", "The wiki lives at the internal docs host.")
    path = next((a.store / "facts").glob("*.md"))
    path.write_text(path.read_text().replace("wiki", "handbook"))
    head = a.head()
    code, out, _ = a.cli("sync")
    assert code == 2 and out["error"]["code"] == "invalid_file"
    assert out["error"]["files"][0]["code"] == "immutable"
    assert a.head() == head


def _set(home: Home, old: str, new: str) -> str:
    config = home.store / "config.yaml"
    text = config.read_text()
    assert old in text
    config.write_text(text.replace(old, new, 1))
    return config.read_text()


def _no_rebase_or_merge(home: Home) -> None:
    git_dir = home.store / ".git"
    assert not [n for n in ("rebase-merge", "rebase-apply", "MERGE_HEAD", "AUTO_MERGE") if (git_dir / n).exists()]
    assert home.status() == ""


def test_settings_each_machine_changed_merge_by_key_and_keep_the_comments(homes: tuple[Home, Home],
                                                                          remote: Path) -> None:
    a, b = homes
    _set(a, "write_mode: review ", "write_mode: autonomous ")
    sync(a)
    # B changes another setting, and only the comment of the one A changed
    _set(b, "commit: false ", "commit: true  ")
    mine = _set(b, "write_mode: review        # review:", "write_mode: review        # laptop: review:")
    out = sync(b)
    assert out["pushed"] >= 1 and out["received"] >= 1
    merged = (b.store / "config.yaml").read_text()
    assert merged == mine.replace("write_mode: review        #", "write_mode: autonomous    #")
    _no_rebase_or_merge(b)
    sync(a)
    assert (a.store / "config.yaml").read_text() == merged
    assert a.head() == b.head() == remote_head(remote)
    code, out, err = b.cli("check", "--global")
    assert code == 0, (out, err)


def test_the_same_setting_changed_differently_stops_before_anything_changes(homes: tuple[Home, Home],
                                                                             remote: Path) -> None:
    a, b = homes
    _set(a, "write_mode: review ", "write_mode: autonomous ")
    a_text = _set(a, "stage: true ", "stage: false")
    sync(a)
    b_text = _set(b, "stage: true ", "stage: 0   ")
    head = b.head()
    code, out, err = b.cli("sync")
    assert code == 4, (out, err)
    error = out["error"]
    assert error["code"] == "sync_conflict" and error["paths"] == ["config.yaml"]
    assert "`git.stage` is 0 here and false on origin/" in error["message"], error
    assert "(it was true)" in error["message"]
    assert error["keys"] == [{"key": "git.stage", "mine": 0, "theirs": False, "base": True}]
    assert "memstore sync --keep mine" in error["hint"] and "memstore sync --keep theirs" in error["hint"]
    assert "write_mode" not in error["message"]  # A's other change merges: not a conflict
    assert (b.store / "config.yaml").read_text() == b_text
    assert (a.store / "config.yaml").read_text() == a_text
    _no_rebase_or_merge(b)
    # B's edit is committed here (the sync's first step), nothing else moved
    assert git(b.store, "rev-parse", "HEAD~1").strip() == head and remote_head(remote) == a.head()


@pytest.mark.parametrize("keep", ["mine", "theirs"])
def test_keep_settles_the_conflicting_setting_and_merges_the_rest(homes: tuple[Home, Home], remote: Path,
                                                                   keep: str) -> None:
    a, b = homes
    _set(a, "write_mode: review ", "write_mode: autonomous ")
    _set(a, "stage: true ", "stage: false")
    sync(a)
    _set(b, "stage: true ", "stage: 0   ")
    _set(b, "commit: false ", "commit: true  ")
    code, out, _ = b.cli("sync")
    assert code == 4 and "git.stage" in out["error"]["message"]
    code, out, err = b.cli("sync", "--keep", keep)
    assert code == 0, (out, err)
    text = (b.store / "config.yaml").read_text()
    assert ("stage: 0 " if keep == "mine" else "stage: false ") in text
    assert "write_mode: autonomous" in text and "commit: true" in text  # both sides' other changes
    assert "# for a repo store: the global store commits" in text  # comments kept
    _no_rebase_or_merge(b)
    assert b.head() == remote_head(remote)
    sync(a)
    assert (a.store / "config.yaml").read_text() == text


def test_another_file_both_machines_edited_stops_and_keep_takes_one_side(homes: tuple[Home, Home],
                                                                         remote: Path) -> None:
    a, b = homes
    (a.store / ".gitignore").write_text((a.store / ".gitignore").read_text() + "a-notes/\n")
    sync(a)
    (b.store / ".gitignore").write_text((b.store / ".gitignore").read_text() + "b-notes/\n")
    b_text = (b.store / ".gitignore").read_text()
    code, out, err = b.cli("sync")
    assert code == 4, (out, err)
    assert out["error"]["paths"] == [".gitignore"] and "--keep" in out["error"]["hint"]
    assert (b.store / ".gitignore").read_text() == b_text
    _no_rebase_or_merge(b)
    code, out, err = b.cli("sync", "--keep", "theirs")
    assert code == 0, (out, err)
    assert (b.store / ".gitignore").read_text() == (a.store / ".gitignore").read_text()
    assert b.head() == remote_head(remote)


def test_an_existing_global_store_joins_a_remote_with_history(homes: tuple[Home, Home], tmp_path: Path,
                                                             remote: Path) -> None:
    a, _ = homes
    from_a = a.write("fact", "The office printer is on the guest network.")
    sync(a)
    c = Home(tmp_path, "c")
    assert c.cli("init", "--global")[0] == 0
    mine = c.write("preference", "Prefer short commit subjects in the imperative mood.")
    code, out, err = c.cli("init", "--global", "--remote", str(remote))
    assert code == 0, err
    # committed: 1 when C's history is unrelated (its write becomes a new file on top of A's);
    # 0 when both stores were initialised in the same second: the same layout, identity and
    # time make the same first commit, so the histories share it and C's write is rebased.
    assert out["cloned"] is False and out["sync"]["committed"] in (0, 1) and out["sync"]["pushed"] == 1
    code, listed, _ = c.cli("list", "--scope", "global")
    assert {from_a, mine} <= {m["id"] for m in listed["memories"]}
    assert sync(a)["received"] == 1
    # Idempotent: the same command again changes nothing.
    code, out, _ = c.cli("init", "--global", "--remote", str(remote))
    assert code == 0 and out["created"] == [] and out["sync"]["pushed"] == 0


# -- the daemon sees what a pull brought ------------------------------------------------------------------
@pytest.mark.model
@pytest.mark.slow
def test_the_daemon_serves_memories_a_sync_brought(homes: tuple[Home, Home]) -> None:
    a, b = homes
    rdir = Path(f"/tmp/ms-sync-{os.getpid()}-{b.home.parent.name[-8:]}")  # AF_UNIX paths are short
    b.vars.update(MEMSTORE_DAEMON="1", MEMSTORE_RUNTIME_DIR=str(rdir))
    client.ensure_runtime_dir(b.env())
    proc = subprocess.Popen([sys.executable, "-m", "memstore", "serve"], env=b.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert client.wait_until_up(60, env=b.env())
        b.write("fact", "The build cache lives on the NFS share mounted at /srv/cache.")
        query = "where does the grafana dashboard for the payments team live"
        code, out, err = b.cli("read", query)  # the daemon opens B's store and indexes it
        assert code == 0, err
        wanted = a.write("fact", "The grafana dashboard for the payments team lives in the ops folder.")
        sync(a)
        assert sync(b)["received"] == 1
        deadline = time.monotonic() + 20  # the watcher reports within milliseconds; bounded poll
        while True:
            code, out, err = b.cli("read", query)
            assert code == 0, err
            if [r["id"] for r in out["results"]][:1] == [wanted] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [r["id"] for r in out["results"]][:1] == [wanted]
        assert client.status(env=b.env()).get("ok")  # answered by the daemon, which is still up
    finally:
        client.stop(env=b.env())
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        shutil.rmtree(rdir, ignore_errors=True)


def test_sync_is_in_the_error_table_and_commands() -> None:
    readme = docs_text()
    for code in ("no_remote", "not_standalone", "bad_remote", "remote_set", "sync_conflict", "push_rejected"):
        assert f"`{code}`" in readme
    assert "memstore sync" in readme and "--remote URL" in readme


def test_projections_never_travel_even_when_a_pulled_gitignore_forgets_them(homes: tuple[Home, Home]) -> None:
    a, b = homes
    (a.store / ".gitignore").write_text("")  # what a careless (or hostile) machine could push
    a.write("fact", "The package mirror is refreshed every six hours.")
    assert a.cli("list")[0] == 0  # .index/ holds the catalog now
    sync(a)
    sync(b)
    assert (b.store / ".gitignore").read_text() == ""
    b.write("fact", "The staging TLS certificate renews on the first of each month.")
    assert b.cli("list")[0] == 0
    sync(b)
    for home in (a, b):
        tracked = git(home.store, "ls-files").split("\n")
        assert not [p for p in tracked if p.startswith((".index/", ".local/"))]


def test_writes_during_a_sync_wait_their_turn_and_all_arrive(homes: tuple[Home, Home], remote: Path) -> None:
    a, b = homes
    written: list[str] = []
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(20):
                written.append(a.write("fact", f"Concurrent note {i}: queue shard {i} drains into bucket q{i:02d}."))
        except BaseException as exc:  # reported below, not lost in the thread
            failures.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    while thread.is_alive():
        sync(a)
    thread.join()
    assert not failures
    sync(a)
    sync(b)
    assert a.status() == "" and a.head() == remote_head(remote) == b.head()
    _, listed, _ = b.cli("list", "--scope", "global", "--limit", "100")
    assert set(written) <= {m["id"] for m in listed["memories"]} and len(written) == 20




def test_a_terminal_is_told_it_is_offline_and_never_gets_raw_control_characters(homes: tuple[Home, Home],
                                                                                tmp_path: Path) -> None:
    a, _ = homes
    a.write("fact", "The VPN drops idle connections after ten minutes.")
    hostile = str(tmp_path / "gone\x1b]0;owned\x07.git")  # set by hand in .git/config: not checked by init
    git(a.store, "remote", "set-url", "origin", hostile)
    code, text = _run_on_tty(["sync"], a.cwd, a.env())
    assert code == 0
    assert "offline: nothing pushed" in text and "1 commit(s) wait for the next sync" in text
    assert "\x1b" not in text and "\\x1b]0;owned\\x07" in text


def test_credentials_in_a_remote_url_are_never_shown(tmp_path: Path) -> None:
    home = Home(tmp_path, "a")
    code, out, err = home.cli("init", "--global", "--remote", "https://me:s3cretPassw0rd@nonexistent.invalid/m.git")
    assert code == 2 and out["error"]["code"] == "bad_remote"
    assert "s3cretPassw0rd" not in str(out) + err and "***@nonexistent.invalid" in out["error"]["message"]
    assert not home.store.exists()


def _run_on_tty(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    rc, shown, _ = run_on_tty(args, cwd=cwd, env=env)
    return rc, shown.decode()


def test_an_edit_against_a_deletion_stops_and_says_how_to_agree(homes: tuple[Home, Home], remote: Path) -> None:
    a, b = homes
    (a.store / "notes.txt").write_text("shared notes\n")
    sync(a)
    sync(b)
    (a.store / "notes.txt").unlink()
    sync(a)
    (b.store / "notes.txt").write_text("shared notes, edited on b\n")
    code, out, err = b.cli("sync", "--keep", "mine")  # --keep cannot take a side of a deletion
    assert code == 4, (out, err)
    assert out["error"]["paths"] == ["notes.txt"] and "deleted on origin/" in out["error"]["message"]
    assert "rm " in out["error"]["hint"]
    assert (b.store / "notes.txt").read_text() == "shared notes, edited on b\n"
    _no_rebase_or_merge(b)
    (b.store / "notes.txt").unlink()
    sync(b)
    assert b.head() == remote_head(remote) and not (b.store / "notes.txt").exists()


def test_a_merge_a_sync_could_not_push_is_merged_again_never_flattened(homes: tuple[Home, Home], remote: Path,
                                                                       tmp_path: Path) -> None:
    """A sync that merged both machines' settings and then could not push (offline) leaves a merge
    commit here. The next sync rebased it away and replayed the setting it had settled, which
    clashed again on every sync, --keep or not. It now merges again."""
    a, b = homes
    _set(a, "stage: true ", "stage: false")
    sync(a)
    _set(b, "commit: false ", "commit: true  ")
    away = tmp_path / "remote-away.git"
    git(b.store, "config", "remote.origin.pushurl", str(away))  # B can fetch, not push
    code, out, err = b.cli("sync")
    assert code == 0 and out["unpushed"] >= 1, (out, err)
    assert git(b.store, "rev-list", "--merges", "--count", "@{upstream}..HEAD").strip() == "1"
    a.write("fact", "The staging database is reset every Sunday night by the ops cron job.")
    sync(a)
    git(b.store, "config", "--unset", "remote.origin.pushurl")
    out = sync(b)
    assert out["received"] >= 1 and out["unpushed"] == 0
    _no_rebase_or_merge(b)
    text = (b.store / "config.yaml").read_text()
    assert "stage: false" in text and "commit: true" in text
    sync(a)
    assert a.head() == b.head() == remote_head(remote)


@pytest.mark.parametrize("rel", [".local", ".local/pending"])
def test_a_pulled_local_link_gets_no_proposal_written_through_it(homes: tuple[Home, Home], rel: str) -> None:
    """Another machine pushes `.local -> elsewhere` (or `.local/pending`; `git add -f` gets it past
    .gitignore); after the pull, a global write in review mode is refused (`not_regular`, exit 2):
    no `pending/` is made at the link's target, nothing is written or committed, and `pending`
    lists nothing."""
    a, b = homes
    elsewhere = b.home / "elsewhere"
    elsewhere.mkdir()
    (a.store / rel).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(Path(*[".."] * (rel.count("/") + 1)) / "elsewhere", a.store / rel)
    git(a.store, "add", "-f", rel)
    git(a.store, "commit", "-q", "-m", "a link where the per-machine state goes")
    git(a.store, "push", "-q")
    shutil.rmtree(b.store / ".local", ignore_errors=True)  # B has proposed nothing yet
    sync(b)
    assert (b.store / rel).is_symlink()
    head = b.head()

    review = {**b.env(), "MEMSTORE_WRITE_MODE": "review"}
    code, out, err = run_cli(["write", "--kind", "preference", "--scope", "global", "--text",
                              "The user wants British spelling in every answer.", "--evidence", "user:said so",
                              "--allow-duplicate"], cwd=b.cwd, env=review)
    assert code == 2 and out["error"]["code"] == "not_regular" and ".local" in out["error"]["message"], (out, err)
    assert list(elsewhere.iterdir()) == [] and b.head() == head
    code, out, err = run_cli(["pending"], cwd=b.cwd, env=review)
    assert code == 0 and out["pending"] == [] and out["unreadable"] == [], (out, err)


@pytest.mark.parametrize("case", sorted(NAMES))
def test_sync_carries_and_gates_memories_whose_names_git_quotes(homes: tuple[Home, Home], remote: Path,
                                                                case: str) -> None:
    a, b = homes
    rel = memory_file(a.store, case, "The artifact bucket is in eu-west-1.", store="", scope="global")
    assert sync(a)["pushed"] == 1
    sync(b)
    assert rel in b.memory_files() and git(b.store, "status", "--porcelain") == ""

    path = a.store / rel
    path.write_text(path.read_text(encoding="utf-8").replace("eu-west-1", "us-east-1"), encoding="utf-8")
    leaky = memory_file(a.store, case, f"The deploy token is {TOKEN}", serial=1, store="", scope="global")
    head, pushed = a.head(), remote_head(remote)
    code, out, err = a.cli("sync")
    assert code == 2 and out["error"]["code"] == "secret", (out, err)
    assert {(f["path"], f["code"]) for f in out["error"]["files"]} == {(rel, "immutable"), (leaky, "secret")}
    assert a.head() == head and remote_head(remote) == pushed


def test_sync_says_when_proposals_wait_for_approval(homes: tuple[Home, Home]) -> None:
    """In review mode a global write is a proposal outside git: a sync carries none, and says so."""
    a, _ = homes
    a.vars["MEMSTORE_WRITE_MODE"] = "review"
    code, out, err = a.cli("write", "--scope", "global", "--kind", "preference", "--text", "Answer in English.",
                           "--evidence", "user:always English", "--allow-duplicate")
    assert code == 0 and out["pending"] is True, err
    code, out, err = a.cli("sync")
    assert code == 0 and out["pending"] == 1 and out["pushed"] == 0, err
    code, text = _run_on_tty(["sync"], a.cwd, a.env())
    assert code == 0 and "1 proposed memory waits for approval" in text and "memstore approve" in text, text
    (proposal,) = a.cli("pending")[1]["pending"]
    code, _, err = a.cli("approve", proposal["id"])
    assert code == 0, err
    code, out, err = a.cli("sync")
    assert code == 0 and out["pending"] == 0 and out["pushed"] == 1, (out, err)
