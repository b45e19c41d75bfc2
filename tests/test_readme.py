"""Docs as tests: every command the README shows is run here, as written, in a fresh repository
(the install and test lines are what `.ci/run` runs)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_cli

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)


def commands(block: str) -> list[list[str]]:
    """Each command line of a block as argv: continuations joined, comments dropped, `&&` split."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out: list[list[str]] = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            out.append(words[:cut])
            words = words[cut + 1:]
    return out


def inline_commands(text: str) -> list[list[str]]:
    """The `memstore ...` commands the README's prose shows in backticks."""
    return [shlex.split(m) for m in re.findall(r"`(memstore [^`]+)`", text) if "<" not in m]


def test_the_install_and_test_lines_are_what_ci_runs() -> None:
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    install, test = shell_blocks(README)[:2]
    assert "python -m pytest -n 2" in test and "python -m pytest -n 2" in ci
    for pin in re.findall(r'"torch==[0-9.]+"', install + test):
        assert pin in ci
    assert '-e ".[test]"' in test and '-e ".[test]"' in ci


def test_the_install_line_answers_from_the_example_store(tmp_path: Path) -> None:
    """The first block ends with a read of the bundled example store."""
    read = commands(shell_blocks(README)[0])[-1]
    assert read[:3] == ["memstore", "--store", ".memory-example"]
    rc, out, err = run_cli([*read[1:]], cwd=REPO_ROOT, env=dict(os.environ))
    assert rc == 0, err
    assert out["results"] and "alembic" in out["results"][0]["text"].lower()


def tour_block() -> str:
    return next(b for b in shell_blocks(README) if "memstore init" in b)


def clean_env(home: Path) -> dict[str, str]:
    """A new user's shell: an empty HOME, no git identity, memstore and git on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "MEMSTORE_"))}
    env.update(HOME=str(home), MEMSTORE_HOME=str(home / ".memory"), MEMSTORE_DAEMON="0",
               XDG_CONFIG_HOME=str(home / ".config"), GIT_CONFIG_NOSYSTEM="1",
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    return env


@pytest.mark.model
@pytest.mark.parametrize("daemon", [False, True], ids=["in-process", "daemon"])
def test_the_two_minute_tour_runs_as_written(tmp_path: Path, daemon: bool) -> None:
    """The tour block, pasted as is into bash -e in an empty repository under a clean HOME (no
    git identity): every line exits 0, and the memories it wrote are what it says. Once as the
    first commands on a machine (in-process), once with the daemon a new user's first call starts."""
    home = tmp_path / "newhome"
    home.mkdir()
    repo = tmp_path / "demo"
    repo.mkdir()
    env = clean_env(home)
    if daemon:
        env.pop("MEMSTORE_DAEMON")  # autostart, as on a new machine
        env["MEMSTORE_RUNTIME_DIR"] = f"/tmp/ms-tour-{os.getpid()}"  # this test's daemon alone
    subprocess.run(["git", "init", "-q"], cwd=repo, env=env, check=True)
    script = tmp_path / "tour.sh"
    script.write_text(tour_block(), encoding="utf-8")
    try:
        proc = subprocess.run(["bash", "-e", "-x", str(script)], cwd=repo, env=env, capture_output=True, text=True,
                              check=False, stdin=subprocess.DEVNULL, timeout=600)
        served = run_cli(["daemon", "status"], cwd=repo, env=env)[1] if daemon else None
    finally:
        if daemon:
            run_cli(["daemon", "stop"], cwd=repo, env=env)
            shutil.rmtree(env["MEMSTORE_RUNTIME_DIR"], ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if daemon:
        assert served["running"] and served["requests"] > 0, served  # later calls went through it
    ran = [line for line in proc.stderr.splitlines() if line.startswith(("+ memstore", "++ memstore", "+ git"))]
    assert len([c for c in commands(tour_block()) if c[0] in ("memstore", "git")]) <= len(ran), ran
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert all(a["ok"] for a in answers), answers
    (read,) = [a for a in answers if "results" in a]
    assert {"problem", "solution", "failed_tactic"} <= {r["kind"] for r in read["results"]}, read["results"]
    assert [a for a in answers if "checked" in a][-1]["problems"] == []
    (history,) = [a for a in answers if "timeline" in a]
    assert history["created"]["commit"]["subject"] == "memory: alembic test-schema lesson"
    assert history["created"]["by"] == "Your Name" and len(history["votes"]) == 1
    log = subprocess.run(["git", "log", "--format=%an %s", "--name-only"], cwd=repo, env=env, capture_output=True,
                         text=True, check=True).stdout
    assert log.startswith("Your Name memory: alembic test-schema lesson"), log
    memories = sorted((repo / ".memory").glob("*/*.md"))
    assert len(memories) == 3 and all(m.relative_to(repo).as_posix() in log for m in memories)
    assert all("author: Your Name" in m.read_text() for m in memories)


def test_the_example_store_commands_in_the_prose_run() -> None:
    shown = [c for c in inline_commands(README) if c[1:3] == ["--store", ".memory-example"]]
    assert len(shown) >= 2
    for argv in shown:
        rc, out, err = run_cli(argv[1:], cwd=REPO_ROOT, env=dict(os.environ))
        assert rc == 0, (argv, err)
        if argv[3] == "read":
            assert any("psycopg" in r["text"] for r in out["results"])
            assert any(r["history"] for r in out["results"])


def test_every_integrate_command_the_readme_shows_is_a_real_agent() -> None:
    from memstore.store.kinds import AGENTS

    shown = {c[2] for c in inline_commands(README) if c[1:2] == ["integrate"] and len(c) == 3}
    assert shown == set(AGENTS), shown
