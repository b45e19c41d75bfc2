"""`memstore new KIND` (a person writing in $EDITOR) and `memstore import FILE.jsonl` (bulk writes)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import TEMPLATES, CliResult, git, reopen, run_on_tty, staged, store_files, write_req

from memstore.store import ids
from memstore.store.files import parse_markdown
from memstore.store.workspace import Workspace
from memstore.verbs import api
from memstore.verbs.bulk import import_jsonl
from memstore.verbs.newfile import template_text

# An "editor" that replaces the file with $EDIT_CONTENT (or leaves it alone when unset) and
# exits with $EDIT_STATUS.
EDITOR_SCRIPT = """
import os, sys
content = os.environ.get("EDIT_CONTENT")
if content is not None:
    with open(sys.argv[1], "w", encoding="utf-8") as fh:
        fh.write(content)
sys.exit(int(os.environ.get("EDIT_STATUS", "0")))
"""

GOOD_PROBLEM = """---
kind: problem
scope: repo
author: dana
evidence: ["user:the nightly export job died again"]
tags: [export]
---
<!-- The problem as met. Delete this comment. -->
The nightly export job dies with `MemoryError` when a tenant has more than 1M rows.
"""


@pytest.fixture
def editor(tmp_path: Path) -> dict[str, str]:
    script = tmp_path / "fake_editor.py"
    script.write_text(EDITOR_SCRIPT)
    return {"EDITOR": f"{sys.executable} {script}"}


def _new(cli: Callable[..., CliResult], repo: Path, editor: dict[str, str], kind: str, content: str | None,
         *args: str, status: int = 0) -> CliResult:
    env = {**editor, "EDIT_STATUS": str(status)}
    if content is not None:
        env["EDIT_CONTENT"] = content
    return cli("new", kind, *args, cwd=repo, env=env)


def _new_files(root: Path, folder: str) -> list[Path]:
    return sorted((root / folder).glob("*.md"))


# -- new ------------------------------------------------------------------------------------------
def test_template_lookup_finds_the_repo_templates() -> None:
    for kind in ("problem", "solution", "fact"):
        assert template_text(kind) == (TEMPLATES / f"{kind}.md").read_text(encoding="utf-8")


def test_new_saves_a_hand_written_memory(repo: Path, editor: dict[str, str], cli: Callable[..., CliResult]) -> None:
    """Like every written memory: a fresh ULID id, a created time and a `<id>-<slug>.md` name."""
    rc, out, err = _new(cli, repo, editor, "problem", GOOD_PROBLEM)
    assert rc == 0, err
    (path,) = _new_files(repo / ".memory", "problems")
    rel = path.relative_to(repo).as_posix()
    assert out["ok"] is True and out["path"] == rel and out["problems"] == [] and out["valid"] is True
    assert ids.is_id(out["id"]) and out["id"] != ids.derived_id(path.relative_to(repo / ".memory").as_posix())
    assert path.name == f"{out['id']}-the-nightly-export-job-dies-with.md"
    meta, body = parse_markdown(path.read_text())
    assert meta["id"] == out["id"] and meta["created"] and meta["author"] == "dana"
    assert body == "The nightly export job dies with `MemoryError` when a tenant has more than 1M rows."
    assert rel in staged(repo) and out["next"] == "commit it"
    rc, listed, _ = cli("list", cwd=repo)
    assert [m["id"] for m in listed["memories"]] == [out["id"]]
    rc, report, _ = cli("check", "--staged", "--fix", cwd=repo)  # nothing left for the hook to write
    assert rc == 0 and report["fixed"] == [], report
    assert parse_markdown(path.read_text())[0]["id"] == out["id"]


def test_new_reports_problems_but_keeps_the_file(repo: Path, editor: dict[str, str],
                                                 cli: Callable[..., CliResult]) -> None:
    content = "---\nkind: solution\nlinks:\n  problem: 01zzzzzzzzzzzzzzzzzzzzzzzz\nevidence: []\n---\nRestart it.\n"
    rc, out, _ = _new(cli, repo, editor, "solution", content)
    assert rc == 0 and out["ok"] is True and out["valid"] is False
    assert {p["code"] for p in out["problems"]} == {"dangling_link", "missing_evidence"}
    (path,) = _new_files(repo / ".memory", "solutions")
    meta, body = parse_markdown(path.read_text())  # kept as written, with its id and created added
    assert body == "Restart it." and meta["links"] == {"problem": "01zzzzzzzzzzzzzzzzzzzzzzzz"}
    assert meta["id"] == out["id"] and path.name.startswith(f"{out['id']}-restart-it")


def test_new_with_broken_yaml_keeps_the_file_and_says_why(repo: Path, editor: dict[str, str],
                                                          cli: Callable[..., CliResult]) -> None:
    rc, out, _ = _new(cli, repo, editor, "fact", "---\nkind: [fact\n---\nSome fact.\n")
    assert rc == 0 and out["id"] is None and out["valid"] is False
    assert [p["code"] for p in out["problems"]] == ["invalid_file"]
    assert len(_new_files(repo / ".memory", "facts")) == 1


@pytest.mark.parametrize("case", ["unchanged", "only_comment", "editor_failed", "deleted"])
def test_new_aborts_and_deletes(case: str, repo: Path, editor: dict[str, str], tmp_path: Path,
                                cli: Callable[..., CliResult]) -> None:
    before = store_files(repo)
    content: str | None = None
    status = 0
    if case == "only_comment":
        content = "---\nkind: fact\nevidence: [user:x]\n---\n<!-- I changed my mind -->\n\n"
    elif case == "editor_failed":
        content, status = GOOD_PROBLEM.replace("problem", "fact"), 1
    elif case == "deleted":
        script = tmp_path / "rm_editor.py"
        script.write_text("import os, sys\nos.unlink(sys.argv[1])\n")
        editor = {"EDITOR": f"{sys.executable} {script}"}
    rc, out, err = _new(cli, repo, editor, "fact", content, status=status)
    assert rc == 2, out  # nothing was written: an invalid request, as the error table (docs/json.md) says
    assert out["ok"] is False and out["error"]["code"] == "aborted"
    assert "Traceback" not in err
    assert store_files(repo) == before
    assert _new_files(repo / ".memory", "facts") == []


def test_new_without_editor_or_terminal_is_refused(repo: Path, cli: Callable[..., CliResult]) -> None:
    before = store_files(repo)
    rc, out, _ = cli("new", "problem", cwd=repo)  # stdin is /dev/null, no EDITOR in the env
    assert rc == 2 and out["error"]["code"] == "no_editor" and "EDITOR" in out["error"]["message"]
    assert store_files(repo) == before


def test_new_with_a_missing_editor_leaves_nothing(repo: Path, cli: Callable[..., CliResult]) -> None:
    before = store_files(repo)
    rc, out, err = cli("new", "fact", cwd=repo, env={"EDITOR": "/no/such/editor --wait"})
    assert rc == 2 and out["error"]["code"] == "no_editor" and "/no/such/editor" in out["error"]["message"]
    assert "Traceback" not in err
    assert store_files(repo) == before


def test_visual_wins_over_editor(repo: Path, editor: dict[str, str], cli: Callable[..., CliResult]) -> None:
    rc, out, _ = cli("new", "problem", cwd=repo, env={"VISUAL": editor["EDITOR"], "EDITOR": "/no/such/editor",
                                                      "EDIT_CONTENT": GOOD_PROBLEM})
    assert rc == 0 and out["valid"] is True


def test_new_global_scope(repo: Path, editor: dict[str, str], tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    content = "---\nkind: preference\nscope: global\nevidence: [\"user:always use uv\"]\n---\nUse uv, not pip.\n"
    rc, out, _ = _new(cli, repo, editor, "preference", content, "--scope", "global")
    assert rc == 0 and out["scope"] == "global" and out["valid"] is True
    home = tmp_path / "home" / ".memory"
    assert len(_new_files(home, "preferences")) == 1
    assert _new_files(repo / ".memory", "preferences") == []
    assert "preferences/" in git(home, "diff", "--cached", "--name-only")


def test_new_global_template_says_global(repo: Path, editor: dict[str, str], tmp_path: Path,
                                         cli: Callable[..., CliResult]) -> None:
    # An editor that only appends text keeps the template's frontmatter: it must say scope: global.
    script = tmp_path / "append_editor.py"
    script.write_text("import sys\nopen(sys.argv[1], 'a').write('\\nUse uv, not pip.\\n')\n")
    rc, out, _ = cli("new", "preference", "--scope", "global", cwd=repo,
                     env={"EDITOR": f"{sys.executable} {script}"})
    assert rc == 0
    (path,) = _new_files(tmp_path / "home" / ".memory", "preferences")
    meta, body = parse_markdown(path.read_text())
    assert meta["scope"] == "global" and body == "Use uv, not pip."
    assert "scope" not in {p["code"] for p in out["problems"]}


# -- import ---------------------------------------------------------------------------------------
def _line(text: str, kind: str = "fact", **extra: Any) -> str:
    return json.dumps(write_req(kind, text, **extra))


def test_import_writes_every_line_and_names_refused_ones(ws: Workspace, repo: Path, tmp_path: Path,
                                                        cli: Callable[..., CliResult]) -> None:
    problem = api.write(ws, write_req("problem", "Exports time out"))["id"]
    lines = [
        _line("Exports run in the worker pool."),
        _line("Stream rows instead of loading them all.", kind="solution", links={"problem_id": problem}),
        "",
        '{"memory": {"kind": "fact", ',  # line 4: not JSON
        _line("A solution with no problem.", kind="solution"),  # line 5: missing link
        json.dumps({"memory": {"kind": "fact", "scope": "repo", "text": "No evidence."}}),  # line 6
        _line("Exports are written to S3."),
    ]
    source = tmp_path / "batch.jsonl"
    source.write_text("\n".join(lines) + "\n")
    before = store_files(repo)
    rc, out, err = cli("import", str(source), cwd=repo)
    assert rc == 2 and "Traceback" not in err
    assert out["ok"] is False and out["written"] == 3 and out["mode"] == "commit"
    assert [(r["line"], r["code"], r["field"]) for r in out["refused"]] == [
        (4, "invalid_json", None),
        (5, "missing_link", "memory.links.problem_id"),
        (6, "missing_evidence", "memory.evidence_refs"),
    ]
    assert all(r["message"] for r in out["refused"])
    new = store_files(repo) - before
    assert len(new) == 3 and len(out["ids"]) == 3
    assert all(any(f.split("/")[1].startswith(i) for f in new) for i in out["ids"])
    assert {f".memory/{f}" for f in new} <= staged(repo)
    listed = {m["text"] for m in api.list_memories(reopen(repo))["memories"]}
    assert "Exports are written to S3." in listed and "No evidence." not in listed


def test_import_dry_run_writes_nothing(repo: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    source = tmp_path / "batch.jsonl"
    source.write_text(_line("First fact.") + "\n" + _line("Second fact.") + "\n")
    before, index_before = store_files(repo), staged(repo)
    rc, out, _ = cli("import", str(source), "--dry-run", cwd=repo)
    assert rc == 0 and out["ok"] is True and out["mode"] == "dry_run"
    assert out["written"] == 0 and len(out["ids"]) == 2
    assert store_files(repo) == before and staged(repo) == index_before


def test_import_from_stdin(repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, _ = cli("import", "-", cwd=repo, input=_line("From stdin.") + "\n\n")
    assert rc == 0 and out["written"] == 1 and out["refused"] == []


def test_import_missing_file(repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, _ = cli("import", "/no/such/file.jsonl", cwd=repo)
    assert rc == 2 and out["error"]["code"] == "bad_input"


def test_import_duplicates_within_the_file_are_refused(ws: Workspace, repo: Path, tmp_path: Path) -> None:
    req = {"memory": {"kind": "fact", "scope": "repo", "text": "Exact same text.", "evidence_refs": ["user:x"]}}
    source = tmp_path / "dups.jsonl"
    # The first line skips the gate (an empty store would only cost an embedder load); the second
    # is an exact copy of it, which the gate refuses without any model.
    source.write_text(json.dumps({**req, "allow_duplicate": True}) + "\n" + json.dumps(req) + "\n")
    out = import_jsonl(ws, str(source), dry_run=False, author="bulk")
    assert out["written"] == 1 and [(r["line"], r["code"]) for r in out["refused"]] == [(2, "duplicate")]




def test_import_progress_only_on_a_terminal(repo: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    source = tmp_path / "many.jsonl"
    source.write_text("".join(_line(f"Progress fact {i}.") + "\n" for i in range(60)))
    rc, out, err = _run_with_tty_stderr(["import", str(source), "--dry-run"], repo)
    assert rc == 0 and json.loads(out)["ok"] is True
    assert "importing" in err and "/60 [" in err and "lines/s" in err, err[-300:]
    rc, _, err = cli("import", str(source), "--dry-run", cwd=repo)
    assert rc == 0 and "importing" not in err


@pytest.mark.slow
def test_import_500_lines(ws: Workspace, repo: Path, tmp_path: Path) -> None:
    source = tmp_path / "big.jsonl"
    # allow_duplicate keeps the embedder out; every other gate (schema, evidence file exists, ...) runs.
    source.write_text("".join(_line(f"Bulk fact {i}.", evidence=["file:src/app.py"]) + "\n" for i in range(500)))
    start = time.perf_counter()
    out = import_jsonl(ws, str(source), dry_run=False, author="bulk")
    elapsed = time.perf_counter() - start
    print(f"500-line import: {elapsed:.2f}s")
    assert out["ok"] and out["written"] == 500
    facts = {f".memory/facts/{p.name}" for p in (repo / ".memory" / "facts").glob("*.md")}
    assert len(facts) == 500 and facts <= staged(repo)
    assert len(api.list_memories(reopen(repo))["memories"]) == 500
    assert elapsed < 60


def _run_with_tty_stderr(args: list[str], cwd: Path) -> tuple[int, str, str]:
    rc, shown, out = run_on_tty(args, cwd=cwd, tty="stderr")
    return rc, out.decode(), shown.decode()
