"""Faults in and around the canonical files: a hand-broken memory among good ones, two branches
of memories merged and rebased, a full disk. Real CLI processes, real git, a real tmpfs."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import CliResult, git, make_git_repo, store_files

from memstore import gitops
from memstore.store.workspace import open_workspace
from memstore.verbs import api

FACT = ["write", "--kind", "fact", "--evidence", "user:said so", "--text"]


def test_hand_broken_yaml_among_good_files_reads_on_and_check_names_file_and_line(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, good, err = cli(*FACT, "The release branch is cut every second Tuesday.", cwd=repo)
    assert rc == 0, err
    broken = repo / ".memory" / "facts" / "hand-written.md"
    broken.write_text("---\nkind: fact\nscope: repo\nevidence: [user:me]\ntags: a: b\n---\nThe cache is warm.\n")
    rc, out, err = cli("read", "when is the release branch cut", "--no-global", cwd=repo)
    assert rc == 0, err
    assert good["id"] in [r["id"] for r in out["results"]]
    rc, report, err = cli("check", cwd=repo)
    assert rc == 2 and not report["ok"]
    problem = next(p for p in report["problems"] if p["path"].endswith("hand-written.md"))
    assert "line 5" in problem["message"], problem


def _two_branches(repo: Path, cli: Callable[..., CliResult]) -> tuple[str, str]:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memory layout")
    git(repo, "checkout", "-q", "-b", "side")
    rc, side, err = cli(*FACT, "The payments service retries webhooks three times with backoff.", cwd=repo)
    assert rc == 0, err
    git(repo, "commit", "-q", "-m", "side memory")
    git(repo, "checkout", "-q", "main")
    rc, main, err = cli(*FACT, "Feature flags are read from LaunchDarkly at request time.", cwd=repo)
    assert rc == 0, err
    git(repo, "commit", "-q", "-m", "main memory")
    return main["id"], side["id"]


def _both_readable(repo: Path, cli: Callable[..., CliResult], ids: tuple[str, str]) -> None:
    rc, report, err = cli("check", cwd=repo)
    assert rc == 0 and report["ok"], report or err
    for mid, query in zip(ids, ("where are feature flags read from", "how often are payment webhooks retried"),
                          strict=True):
        rc, out, err = cli("read", query, "--no-global", cwd=repo)
        assert rc == 0 and mid in [r["id"] for r in out["results"]], (err, out)


@pytest.mark.model
def test_two_branches_of_memories_merge_without_conflict(repo: Path, cli: Callable[..., CliResult]) -> None:
    ids = _two_branches(repo, cli)
    git(repo, "merge", "-q", "--no-edit", "side")
    _both_readable(repo, cli, ids)


@pytest.mark.model
def test_two_branches_of_memories_rebase_without_conflict(repo: Path, cli: Callable[..., CliResult]) -> None:
    ids = _two_branches(repo, cli)
    git(repo, "checkout", "-q", "side")
    git(repo, "rebase", "-q", "main")
    _both_readable(repo, cli, ids)


@contextlib.contextmanager
def _small_disk(base: Path) -> Iterator[Path | None]:
    """A 2 MB tmpfs where the machine allows mounting one (root), else None."""
    mnt = base / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True,
                          check=False)
    if proc.returncode != 0:
        yield None
        return
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def _no_room_left() -> None:
    """In the child (no tmpfs to fill): every file may hold 0 bytes, as on a full device."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_a_full_disk_refuses_the_write_clearly_and_writes_nothing(tmp_path: Path) -> None:
    with _small_disk(tmp_path) as mnt:
        repo = make_git_repo((mnt or tmp_path) / "repo")
        gitops.toplevel.cache_clear()
        api.init(open_workspace(cwd=repo))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "memory layout")
        before = store_files(repo)
        filler = None
        if mnt is not None:
            filler = mnt / "filler"
            with open(filler, "wb") as fh, contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * 65536)
        env = {**os.environ}
        proc = subprocess.run([sys.executable, "-m", "memstore", *FACT, "The on-call rota changes on Mondays.",
                               "--json-out"], cwd=repo, env=env, capture_output=True, text=True, check=False,
                              preexec_fn=None if mnt is not None else _no_room_left)
        assert proc.returncode == 1, proc.stderr
        assert '"code": "disk_full"' in proc.stdout, proc.stdout
        assert "no space left" in proc.stderr and "Traceback" not in proc.stderr
        assert store_files(repo) == before  # nothing half-written, nothing acknowledged
        assert git(repo, "--no-optional-locks", "status", "--porcelain", "--untracked-files=all", "--", ".memory") == ""
        if filler is not None:  # room again: the same write goes through
            filler.unlink()
            proc = subprocess.run([sys.executable, "-m", "memstore", *FACT, "The on-call rota changes on Mondays."],
                                  cwd=repo, env=env, capture_output=True, text=True, check=False)
            assert proc.returncode == 0, proc.stderr
