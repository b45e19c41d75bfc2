"""Writers die (`kill -9`) and many write at once: every acknowledged write is on disk, valid and
readable, `memstore check` stays clean, and no torn file is left. Real processes, real git."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, git, store_files

pytestmark = [pytest.mark.slow]

TRIALS = 3  # bench/faults.py runs 50


def _json_arg_cmd(text: str, path: Path) -> list[str]:
    req = {"memory": {"kind": "fact", "scope": "repo", "text": text, "evidence_refs": ["user:said so"]},
           "allow_duplicate": True}
    path.write_text(json.dumps(req))
    return [sys.executable, "-m", "memstore", "write", "--json", str(path)]


def _acknowledged(proc: subprocess.Popen[str]) -> str | None:
    out, _ = proc.communicate(timeout=300)
    if proc.returncode != 0:
        return None
    answer = json.loads(out)
    return answer["id"] if answer.get("ok") else None


def _assert_sound(repo: Path, cli: Callable[..., CliResult], acked: list[str]) -> None:
    rc, report, err = cli("check", cwd=repo)
    assert rc == 0 and report["ok"], report or err
    rc, listed, err = cli("list", "--all", cwd=repo)
    assert rc == 0, err
    on_disk = {m["id"] for m in listed["memories"]} if isinstance(listed, dict) and "memories" in listed else set()
    missing = [mid for mid in acked if mid not in on_disk]
    assert not missing, (missing, listed)
    torn = [f for f in store_files(repo) if f.endswith(".tmp")]
    assert not torn, torn


def test_kill_9_of_a_writer_mid_write_loses_no_acknowledged_write(repo: Path, tmp_path: Path,
                                                                   cli: Callable[..., CliResult]) -> None:
    rng = random.Random(5)
    acked: list[str] = []
    for trial in range(TRIALS):
        # A write that completes, then one killed at a random moment of its run.
        done = subprocess.Popen(_json_arg_cmd(f"Trial {trial}: the build cache lives in /var/cache/ci.",
                                              tmp_path / f"ok{trial}.json"),
                                cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        mid = _acknowledged(done)
        assert mid, "a write that was not killed must succeed"
        acked.append(mid)
        victim = subprocess.Popen(_json_arg_cmd(f"Trial {trial}: the nightly job rotates the API keys.",
                                                tmp_path / f"kill{trial}.json"),
                                  cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.3, 3.0))
        os.kill(victim.pid, signal.SIGKILL)
        victim.communicate(timeout=60)
    _assert_sound(repo, cli, acked)
    git(repo, "commit", "-q", "-m", "after the kills")  # git is usable: no lock or torn object left


def test_concurrent_cli_writers_without_the_daemon(repo: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    writers, each = 2, 5  # bench/faults.py: 8 x 200
    procs = []
    for w in range(writers):
        script = "\n".join(" ".join(map(_quote, _json_arg_cmd(f"Writer {w} note {i}: port {9000 + i} is reserved.",
                                                              tmp_path / f"w{w}-{i}.json")))
                           for i in range(each))
        procs.append(subprocess.Popen(["sh", "-c", script], cwd=repo, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    acked: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        acked += [json.loads(line)["id"] for line in out.splitlines() if line.strip()]
    assert len(acked) == writers * each
    _assert_sound(repo, cli, acked)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"
