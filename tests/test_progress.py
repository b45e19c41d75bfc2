"""A first command's long waits are explained on stderr (the model's one-time export, embedding a
store), with a bar on a terminal; stdout carries the answer alone. Real CLI, real model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_git_repo, run_on_tty

from memstore import gitops
from memstore.store.workspace import open_workspace
from memstore.surfaces.progress import ANNOUNCE_FROM
from memstore.verbs import api

pytestmark = pytest.mark.model

N = ANNOUNCE_FROM + 20


def _store(path: Path) -> Path:
    repo = make_git_repo(path)
    gitops.toplevel.cache_clear()
    api.init(open_workspace(cwd=repo))
    for i in range(N):
        (repo / ".memory" / "facts" / f"fact-{i}.md").write_text(
            f"---\nkind: fact\nscope: repo\nauthor: dana\n---\nDeploy note {i}: the cache of stage {i} "
            f"is warmed by the job named warm-{i * 7}.\n")
    return repo


def test_a_first_read_on_a_new_machine_says_what_it_waits_for(tmp_path: Path) -> None:
    repo = _store(tmp_path / "repo")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "new-cache")}  # no model export yet
    proc = subprocess.run([sys.executable, "-m", "memstore", "read", "which job warms the deploy cache"],
                          cwd=repo, env=env, capture_output=True, text=True, check=False, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)  # the whole of stdout is the answer
    assert answer["ok"] and answer["results"]
    lines = proc.stderr.splitlines()
    assert any(line.startswith("memstore: preparing the embedding model") and "once" in line for line in lines)
    assert any(line.startswith(f"memstore: embedding {N} memories") and "once" in line for line in lines), lines
    assert "\r" not in proc.stderr  # no bar where no one watches
    again = subprocess.run([sys.executable, "-m", "memstore", "read", "warm deploy cache"], cwd=repo, env=env,
                           capture_output=True, text=True, check=False, timeout=600, stdin=subprocess.DEVNULL)
    assert again.returncode == 0 and again.stderr == ""  # once: the second read has nothing to say


def test_on_a_terminal_the_wait_gets_a_bar_and_stdout_stays_json(tmp_path: Path) -> None:
    repo = _store(tmp_path / "repo")
    rc, shown, out = run_on_tty(["read", "which job warms the deploy cache"], cwd=repo, tty="stderr", columns=100)
    text = shown.decode(errors="replace")
    assert rc == 0, text
    assert f"memstore: embedding {N} memories" in text and "memories/s" in text and "\r" in text, text[-500:]
    assert json.loads(out)["results"]
