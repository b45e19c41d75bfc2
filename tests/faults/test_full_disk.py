"""A full device, on a real small filesystem (a 3 MB tmpfs): every write that fails is
`disk_full` and leaves nothing behind (no file, nothing staged), whichever step ran out of room;
reads answer while the device is full (the index held in memory, unsaved, with a warning) and
answer as they do once there is room again. Real CLI processes, real git."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import git, make_git_repo, run_cli, store_files

pytestmark = [pytest.mark.slow, pytest.mark.model]

FACT = ["write", "--kind", "fact", "--evidence", "user:said so", "--allow-duplicate", "--text"]
# Room left on the device before a write, in KiB: from none (the memory file cannot be written)
# through enough for the file but not for git's object and index (staging fails) to enough.
GAPS = [0, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128]


@contextlib.contextmanager
def _small_disk(base: Path) -> Iterator[Path]:
    mnt = base / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def _fill(filler: Path, leave_kib: int) -> None:
    """Fill the device, then give back ``leave_kib`` KiB."""
    with contextlib.suppress(FileNotFoundError):
        filler.unlink()
    # The close raises ENOSPC too (its buffer flushes): both inside the suppress.
    with contextlib.suppress(OSError), open(filler, "wb") as fh:
        while True:
            fh.write(b"\0" * 4096)
    if leave_kib:
        os.truncate(filler, max(0, filler.stat().st_size - leave_kib * 1024))


def _unrecorded(repo: Path) -> str:
    """Anything under .memory/ that git does not hold as staged or committed."""
    out = git(repo, "--no-optional-locks", "status", "--porcelain", "--untracked-files=all", "--", ".memory")
    return "\n".join(line for line in out.splitlines() if not line.startswith("A  "))


def _read(repo: Path, query: str) -> tuple[list[str], list[str]]:
    rc, got, err = run_cli(["read", query, "--json-out"], cwd=repo, env=dict(os.environ), timeout=300)
    assert rc == 0 and got["ok"], (got, err)
    return [r["id"] for r in got["results"]], got.get("warnings", [])


def _store_on(mnt: Path) -> tuple[Path, dict[str, str]]:
    """A git repo on the small device with its memory store initialised and committed."""
    repo = make_git_repo(mnt / "repo")
    env = dict(os.environ)
    rc, _, err = run_cli(["init"], cwd=repo, env=env)
    assert rc == 0, err
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memory layout")
    return repo, env


def test_a_full_disk_fails_each_write_as_disk_full_leaving_nothing_and_reads_answer(tmp_path: Path) -> None:
    with _small_disk(tmp_path) as mnt:
        repo, env = _store_on(mnt)
        rc, first, err = run_cli([*FACT, "The staging deploy runs at noon on weekdays."], cwd=repo, env=env)
        assert rc == 0 and first["ok"], (first, err)
        _read(repo, "when does the staging deploy run")  # the index is on disk
        filler = mnt / "filler"
        acked = [first["id"]]
        refused_by_git = 0
        for gap in GAPS:
            _fill(filler, gap)
            before = store_files(repo)
            rc, got, err = run_cli([*FACT, f"The staging deploy takes {gap} minutes when the cache is cold."],
                                   cwd=repo, env=env, timeout=300)
            if rc == 0 and got["ok"]:
                acked.append(got["id"])
                assert store_files(repo) - before == {got["path"].removeprefix(".memory/")}, got
            else:
                assert rc == 1 and got["error"]["code"] == "disk_full", (gap, got, err)
                assert "Traceback" not in err
                refused_by_git += "git" in got["error"]["message"]
                assert store_files(repo) == before, f"gap {gap} KiB: a refused write left a file behind"
            assert _unrecorded(repo) == "", f"gap {gap} KiB: files not staged:\n{_unrecorded(repo)}"
        # The case the field saw: the memory file fitted and staging it did not.
        assert refused_by_git, "no write failed at the git step; the gaps no longer cover it"

        # Reads while the device is full: a memory the index has not seen, then no index at all.
        _fill(filler, 0)
        rc, got, err = run_cli(["show", acked[0]], cwd=repo, env=env)
        assert rc == 0 and got["ok"], (got, err)
        full_ids, warnings = _read(repo, "how long does the staging deploy take")
        assert full_ids and any("no space left" in w for w in warnings), (full_ids, warnings)
        subprocess.run(["rm", "-rf", str(repo / ".memory" / ".index")], check=True)
        _fill(filler, 0)
        bare_ids, warnings = _read(repo, "how long does the staging deploy take")
        assert bare_ids == full_ids and any("no space left" in w for w in warnings), (bare_ids, warnings)

        # Room again: the same answer, now saved, and the store takes writes.
        filler.unlink()
        roomy_ids, warnings = _read(repo, "how long does the staging deploy take")
        assert roomy_ids == full_ids and not any("no space left" in w for w in warnings), warnings
        rc, got, err = run_cli([*FACT, "The staging deploy is skipped on public holidays."], cwd=repo, env=env)
        assert rc == 0 and got["ok"], (got, err)
        assert set(acked) <= {m["id"] for m in run_cli(["list", "--all"], cwd=repo, env=env)[1]["memories"]}


def test_the_daemon_answers_while_the_disk_is_full_and_saves_its_index_once_there_is_room(tmp_path: Path) -> None:
    """A long-lived daemon holds the keyword index in memory while the device is full, and puts
    it back on disk when it saves with room again (idle): no restart, no reindex."""
    from daemonworld import Env

    with _small_disk(tmp_path) as mnt:
        life = Env(mnt / "d")
        proc = None
        try:
            with life.environ():
                repo = life.make_repo("repo")
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", "memory layout")
            proc = life.start("--idle", "600")
            rc, got, err = life.cli(*FACT, "The staging deploy runs at noon on weekdays.", cwd=repo)
            assert rc == 0 and got["ok"], (got, err)
            rc, got, err = life.cli("read", "when does the staging deploy run", cwd=repo)
            assert rc == 0 and got["results"], (got, err)
            rc, got, err = life.cli(*FACT, "The cache warms in nine minutes after a deploy.", cwd=repo)
            assert rc == 0 and got["ok"], (got, err)
            keyword = repo / ".memory" / ".index" / "keyword"
            filler = mnt / "filler"
            # The device fills, and the keyword index is lost meanwhile (deleted, as any damage):
            # the daemon has no room to build it again.
            _fill(filler, 0)
            shutil.rmtree(keyword)
            _fill(filler, 0)
            rc, got, err = life.cli("read", "how long does the cache take to warm", cwd=repo)
            assert rc == 0 and got["ok"], (got, err)
            assert any("cache warms" in r["text"] for r in got["results"]), got
            assert not list(keyword.glob("*.toc"))
            filler.unlink()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not list(keyword.glob("*.toc")):  # the daemon saves when idle
                time.sleep(1)
            assert list(keyword.glob("*.toc")), life.log()
            rc, got, err = life.cli("read", "how long does the cache take to warm", cwd=repo)
            assert rc == 0 and not any("no space left" in w for w in got.get("warnings", [])), got
            assert any("cache warms" in r["text"] for r in got["results"]), got
        finally:
            life.cleanup()
            if proc is not None:
                proc.wait(timeout=30)


def test_an_import_on_a_full_disk_leaves_only_what_it_reports_and_all_of_it_staged(tmp_path: Path) -> None:
    """Twelve repo lines and two global ones (the global store is on another, roomy device, and
    in review mode a global memory waits as a proposal): whatever the room left, what the import
    reports as written or kept is on disk and staged, and nothing else is."""
    def line(scope: str, text: str) -> str:
        return json.dumps({"memory": {"kind": "fact", "scope": scope, "evidence_refs": ["user:said so"],
                                      "text": text}, "allow_duplicate": True}) + "\n"
    repo_lines = {n: f"Build step {n} of the release takes {n + 2} minutes." for n in range(1, 13)}
    global_lines = {13: "The team's release train leaves every other Tuesday.",
                    14: "Release notes are written in the PR that bumps the version."}
    with _small_disk(tmp_path) as mnt:
        repo, env = _store_on(mnt)
        src = tmp_path / "memories.jsonl"  # off the small device: the input is always readable
        src.write_text("".join(line("repo", t) for t in repo_lines.values())
                       + "".join(line("global", t) for t in global_lines.values()))
        filler = mnt / "filler"
        outcomes = set()
        for gap in GAPS:
            _fill(filler, gap)
            before = store_files(repo)
            rc, got, err = run_cli(["import", str(src)], cwd=repo, env=env, timeout=300)
            assert "Traceback" not in err, err
            new = store_files(repo) - before
            if got.get("error"):
                error = got["error"]
                assert rc == 1 and error["code"] == "disk_full", (gap, got, err)
                assert new == set(), f"gap {gap} KiB: a failed import left {sorted(new)}"
                # the repo's lines were removed again; the global proposals were kept, and say so
                assert {r["line"] for r in error["removed"]} <= set(repo_lines) and error["removed"], error
                assert {k["line"] for k in error["kept"]} == set(global_lines), error
                outcomes.add("refused")
            else:
                # Each line stands alone: the repo lines written are on disk and staged, the rest
                # refused as disk_full, nothing else on disk.
                refused = {r["line"] for r in got["refused"]}
                assert {r["code"] for r in got["refused"]} <= {"disk_full"}, got["refused"]
                assert len(new) == len(set(repo_lines) - refused), (gap, got, new)
                assert not refused & set(global_lines), got["refused"]
                outcomes.add("partial" if refused else "whole")
            assert _unrecorded(repo) == "", f"gap {gap} KiB: files not staged:\n{_unrecorded(repo)}"
        # the case this is about: the lines fitted and the one `git add` at the end did not
        assert "refused" in outcomes, outcomes
