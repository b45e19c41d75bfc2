"""Docs as tests: every command the README shows is run here, as written, in a fresh repository
(the install and test lines are what `.ci/run` runs)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import REPO_ROOT, make_git_repo, run_cli

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
# The ids the tour's sample output shows, which a real run replaces with its own.
TOUR_PROBLEM, TOUR_SOLUTION = "01m80gm99x", "01m80gp4k2"


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


@pytest.mark.model
def test_the_two_minute_tour_runs_as_written(tmp_path: Path) -> None:
    tour = next(b for b in shell_blocks(README) if "memstore init" in b)
    repo = make_git_repo(tmp_path / "your-repo")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_migrations.py").write_text("def test_upgrade():\n    pass\n")
    (repo / "tests" / "conftest.py").write_text("".join(f"# fixture line {i}\n" for i in range(1, 60)))
    subprocess.run(["git", "add", "tests"], cwd=repo, check=True)
    env = dict(os.environ)
    ids: dict[str, str] = {}
    ran = []
    for argv in commands(tour):
        if argv[:1] == ["cd"]:
            continue
        argv = [ids.get(a, a) for a in argv]
        if argv[0] == "git":
            proc = subprocess.run(argv, cwd=repo, capture_output=True, text=True, check=False)
            assert proc.returncode == 0, (argv, proc.stderr)
            ran.append(argv[:2])
            continue
        assert argv[0] == "memstore", argv
        rc, out, err = run_cli(argv[1:], cwd=repo, env=env)
        assert rc == 0, (argv, out, err)
        ran.append(argv[:2])
        if argv[1] == "write":
            kind = argv[argv.index("--kind") + 1]
            if kind == "problem":
                ids[TOUR_PROBLEM] = out["id"][:10]
            elif kind == "solution":
                ids[TOUR_SOLUTION] = out["id"][:10]
        if argv[1] == "read":
            kinds = {r["kind"] for r in out["results"]}
            assert {"problem", "solution", "failed_tactic"} <= kinds, out["results"]
        if argv[1] == "check":
            assert out["ok"] is True, out
    assert ["memstore", "read"] in ran and ["git", "commit"] in ran and ["memstore", "check"] in ran


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
