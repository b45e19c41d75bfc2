"""The command line as users and agents run it: help, output formats, request building, stores."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import EXAMPLE_STORE, CliResult, docs_text, run_on_tty, store_files

from memstore.store.files import parse_markdown
from memstore.surfaces.cli import build_parser

# Evidence, and no duplicate gate: these tests are about the CLI, not the embedder.
EV = ("--evidence", "user:x", "--allow-duplicate")


def _subcommands() -> list[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction)]
    return list(sub.choices)


def _example_count() -> int:
    return len(list(EXAMPLE_STORE.glob("*/*.md"))) - 1  # one example fact is archived


def test_top_level_help_lists_every_command(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, _ = cli("--help", cwd=tmp_path)
    assert rc == 0
    for verb in _subcommands():
        assert f"    {verb}" in out, f"`memstore --help` does not mention {verb}"
    assert {"read", "write", "create", "update"} <= set(_subcommands())


@pytest.mark.parametrize("verb", _subcommands())
def test_every_command_has_help(verb: str, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, err = cli(verb, "--help", cwd=tmp_path)
    assert rc == 0, err
    assert f"usage: memstore {verb}" in out
    assert "--json-out" in out and "--store" in out  # the common options work after the verb


def test_no_command_prints_help(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, _ = cli(cwd=tmp_path)
    assert rc == 0 and "usage: memstore" in out


def test_output_is_json_when_piped(repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, _ = cli("write", "--kind", "fact", "--text", "Logs are JSON.", *EV, cwd=repo)
    assert rc == 0 and isinstance(out, dict) and out["ok"] is True




def test_terminal_gets_text_and_json_out_forces_json(repo: Path, cli: Callable[..., CliResult]) -> None:
    cli("write", "--kind", "fact", "--text", "Logs are JSON.", *EV, cwd=repo)
    rc, text = _run_on_tty(["list"], repo)
    assert rc == 0
    assert "Logs are JSON." in text and "1 memory" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    rc, text = _run_on_tty(["list", "--json-out"], repo)
    assert rc == 0 and json.loads(text)["count"] == 1
    rc, text = _run_on_tty(["--json-out", "list"], repo)  # before the verb too
    assert rc == 0 and json.loads(text)["count"] == 1


def test_create_is_an_alias_of_write(repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, _ = cli("create", "--kind", "problem", "--text", "Build is slow", *EV, cwd=repo)
    assert rc == 0 and out["kind"] == "problem" and out["path"].startswith(".memory/problems/")
    req = {"op": "create", "memory": {"kind": "fact", "scope": "repo", "text": "Uses uv",
                                      "evidence_refs": ["user:y"]},
           "allow_duplicate": True}
    rc, out, _ = cli("write", "--json", "-", cwd=repo, input=json.dumps(req))
    assert rc == 0 and out["path"].startswith(".memory/facts/")
    rc, out, _ = cli("create", "--json", "-", cwd=repo, input=json.dumps({**req, "op": "update"}))
    assert rc == 2 and out["error"]["field"] == "op"


def test_flag_built_request_equals_json_request(repo: Path, cli: Callable[..., CliResult]) -> None:
    _, problem, _ = cli("write", "--kind", "problem", "--text", "Importer crashes on empty CSV",
                         *EV, cwd=repo)
    flags = ["write", "--dry-run", "--kind", "solution", "--text", "Skip empty files before parsing",
             "--problem", problem["id"], "--evidence", "file:src/app.py#L1-L2", "--evidence", "user:it works",
             "--confidence", "0.7", "--rationale", "verified", "--author", "dana", "--tag", "csv", "--tag", "importer",
             "--allow-duplicate"]
    request = {"op": "write", "mode": "dry_run", "allow_duplicate": True, "memory": {
        "kind": "solution", "scope": "repo", "text": "Skip empty files before parsing",
        "links": {"problem_id": problem["id"]}, "evidence_refs": ["file:src/app.py#L1-L2", "user:it works"],
        "confidence": 0.7, "rationale": "verified", "author": "dana", "tags": ["csv", "importer"]}}
    rc1, by_flags, _ = cli(*flags, cwd=repo)
    rc2, by_json, _ = cli("write", "--json", "-", cwd=repo, input=json.dumps(request))
    assert rc1 == rc2 == 0

    def comparable(answer: dict) -> tuple[dict, str]:
        meta, body = parse_markdown(answer["content"])
        return {k: v for k, v in meta.items() if k not in ("id", "created")}, body

    assert comparable(by_flags) == comparable(by_json)
    assert comparable(by_flags)[0]["links"] == {"problem": problem["id"]}


def test_text_from_stdin(repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, _ = cli("write", "--kind", "fact", "--text", "-", "--evidence", "user:x", "--dry-run",
                     "--allow-duplicate", cwd=repo,
                     input="Multi-line\ntext from stdin\n")
    assert rc == 0 and parse_markdown(out["content"])[1] == "Multi-line\ntext from stdin"


def test_show_with_a_unique_prefix(repo: Path, cli: Callable[..., CliResult]) -> None:
    _, out, _ = cli("write", "--kind", "fact", "--text", "Tokens expire after 1h", *EV, cwd=repo)
    rc, shown, _ = cli("show", out["id"][:12], cwd=repo)
    assert rc == 0 and shown["memory"]["id"] == out["id"] and shown["memory"]["text"] == "Tokens expire after 1h"
    rc, err_out, _ = cli("show", out["id"][:4], cwd=repo)
    assert rc == 2 and err_out["error"]["code"] == "bad_id"
    rc, err_out, _ = cli("show", "zzzzzzzzzz", cwd=repo)
    assert rc == 3 and err_out["error"]["code"] == "not_found"


def test_store_option_points_at_another_store(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    other = tmp_path / "somewhere" / "mem"
    shutil.copytree(EXAMPLE_STORE, other, ignore=shutil.ignore_patterns(".index"))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    rc, out, _ = cli("--store", str(other), "list", cwd=elsewhere)
    assert rc == 0 and out["count"] == _example_count()
    rc, out, _ = cli("list", "--store", "../somewhere/mem", cwd=elsewhere)  # after the verb, relative
    assert rc == 0 and out["count"] == _example_count()
    rc, out, _ = cli("show", "01m7qmgvt9", "--store", str(other), cwd=elsewhere)
    assert rc == 0 and out["memory"]["kind"] == "problem"


def test_memstore_store_env(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    other = tmp_path / "mem"
    shutil.copytree(EXAMPLE_STORE, other, ignore=shutil.ignore_patterns(".index"))
    rc, out, _ = cli("list", "--kind", "problem", cwd=tmp_path, env={"MEMSTORE_STORE": str(other)})
    assert rc == 0 and out["count"] == 3 and {m["kind"] for m in out["memories"]} == {"problem"}


def test_repo_write_outside_a_repo_is_a_clear_error(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    rc, out, err = cli("write", "--kind", "fact", "--text", "Orphan fact", *EV, cwd=plain)
    assert rc == 3
    assert out["error"]["code"] == "no_store" and "not inside a git repository" in out["error"]["message"]
    assert "Traceback" not in err and "hint" in err
    assert list(plain.iterdir()) == []
    assert store_files(plain) == set()
    assert not (tmp_path / "home" / ".memory").exists()


def test_global_write_outside_a_repo_works(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    rc, out, _ = cli("write", "--kind", "preference", "--scope", "global", "--text", "Answer tersely",
                     "--evidence", "user:be brief", "--allow-duplicate", cwd=plain)
    assert rc == 0 and out["scope"] == "global" and out["pending"] is True  # review mode: proposed
    rc, out, _ = cli("approve", out["id"], cwd=plain)
    assert rc == 0 and out["approved"] is True
    rc, out, _ = cli("list", cwd=plain)
    assert rc == 0 and [m["text"] for m in out["memories"]] == ["Answer tersely"]


def test_usage_errors_are_json_too(repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, err = cli("write", "--kind", "fact", cwd=repo)
    assert rc == 2 and out["error"]["code"] == "usage" and "Traceback" not in err
    rc, out, err = cli("write", "--json", "/no/such/file.json", cwd=repo)
    assert rc == 2 and out["error"]["code"] == "bad_input"


def test_every_command_is_documented() -> None:
    """Docs as tests: each subcommand of `memstore --help` has an entry in docs/commands.md."""
    import argparse

    from memstore.surfaces.cli import build_parser

    readme = docs_text("commands.md")
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [name for name in sub.choices if f"memstore {name}" not in readme and f"`{name}`" not in readme]
    assert not missing, f"commands without an entry in docs/commands.md: {missing}"


def _run_on_tty(args: list[str], cwd: Path) -> tuple[int, str]:
    rc, shown, _ = run_on_tty(args, cwd=cwd)
    return rc, shown.decode()


def test_print_id_gives_the_bare_id_piped_and_on_a_terminal(repo: Path, cli: Callable[..., CliResult]) -> None:
    """`P=$(memstore write ... --print id)`: the id alone, for the next command's --problem."""
    rc, out, _ = cli("write", "--kind", "problem", "--text", "Build is slow", *EV, "--print", "id", cwd=repo)
    assert rc == 0 and isinstance(out, str) and len(out) == 26 and out.isalnum()
    rc, shown = _run_on_tty(["write", "--kind", "solution", "--problem", out, "--text", "Cache the wheels",
                             *EV, "--print", "path"], repo)
    assert rc == 0 and shown.strip().startswith(".memory/solutions/") and shown.count("\n") == 1
    rc, vote, _ = cli("update", "--type", "utility_vote", "--memory", out, "--vote", "1", "--print", "id", cwd=repo)
    assert rc == 0 and isinstance(vote, str) and len(vote) == 26
    before = store_files(repo)
    rc, err_out, err = cli("write", "--kind", "fact", "--text", "x", *EV, "--print", "text", cwd=repo)
    assert rc == 2 and err_out["error"]["code"] == "usage" and "--print" in err
    assert store_files(repo) == before


def test_short_version_flag_and_one_usage_prefix(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, _ = cli("-V", cwd=tmp_path)
    assert rc == 0 and str(out).startswith("memstore ")
    rc, out, err = cli("read", "--limit", "many", cwd=tmp_path)
    assert rc == 2 and out["error"]["code"] == "usage"
    assert err.startswith("memstore: usage: argument --limit") and err.count("memstore:") == 1, err
    assert "`memstore read --help`" in err


def test_schema_errors_name_each_problem_and_hints_name_real_flags(repo: Path, tmp_path: Path,
                                                                   cli: Callable[..., CliResult]) -> None:
    rc, out, _ = cli("read", "", cwd=repo)
    assert rc == 2 and out["error"]["message"] == "query: must not be empty"  # not "(and 1 more problem)"
    before = store_files(repo)
    bad = {"op": "write", "memory": {"kind": "fact_", "text": ""}}
    rc, out, _ = cli("write", "--json", "-", cwd=repo, input=json.dumps(bad))
    assert rc == 2 and "more problem" not in out["error"]["message"]
    assert all(f in out["error"]["message"] for f in ("memory.text", "memory.kind", "memory.scope"))
    assert store_files(repo) == before
    plain = tmp_path / "plain"
    plain.mkdir()
    rc, out, err = cli("init", cwd=plain)
    assert rc == 3 and "--global" in out["error"]["hint"] and "scope 'global'" not in err
    assert list(plain.iterdir()) == []


ALEMBIC = "alembic upgrade head fails in the test suite: column already exists"


def _example_copy(tmp_path: Path) -> Path:
    store = tmp_path / "example"
    shutil.copytree(EXAMPLE_STORE, store, ignore=shutil.ignore_patterns(".index"))
    return store


@pytest.mark.model
def test_a_read_on_a_terminal_is_grouped_best_first_coloured_and_without_the_agents_guidance(
        tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    import os

    store = _example_copy(tmp_path)
    rc, piped, _ = cli("--store", str(store), "read", ALEMBIC, cwd=tmp_path)
    assert rc == 0 and piped["guidance"].startswith("Current code is ground truth")  # JSON keeps it
    scores = {r["id"][:10]: r["score"] for r in piped["results"]}
    problem, solution, fact = "01m7qmgvt9", "01m7qmmb4s", "01m6kpxz51"
    assert scores[solution] > scores[problem]  # the order a person could not explain before
    rc, shown, _ = run_on_tty(["--store", str(store), "read", ALEMBIC], cwd=tmp_path)
    text = shown.decode()
    assert rc == 0 and "Current code is ground truth" not in text
    assert "\x1b[" in text  # colour on a terminal
    plain = text
    for code in __import__("memstore.surfaces.output", fromlist=["SGR_CODES"]).SGR_CODES:
        plain = plain.replace(code, "")
    assert plain.startswith("Groups best first"), plain[:200]
    at = {mid: plain.index(mid) for mid in (problem, solution, fact)}
    assert at[problem] < at[solution] < at[fact]  # the solution under its problem, the group first
    assert f"\n  solution {solution}" in plain and f"\nproblem {problem}" in plain
    # a failed tactic a later, voted-up solution overtook is shown as history, the rest as watch-outs
    tactics = {r["id"][:10]: "HISTORY" if r.get("links", {}).get("superseded_by") else "WATCH-OUT"
               for r in piped["results"] if r["kind"] == "failed_tactic"}
    assert tactics and all(f"\n  {tag} failed_tactic {t}" in plain for t, tag in tactics.items())
    rc, shown, _ = run_on_tty(["--store", str(store), "read", ALEMBIC], cwd=tmp_path,
                              env={**os.environ, "NO_COLOR": "1"})
    def timeless(text: str) -> str:
        return text.rsplit(" in ", 1)[0]

    assert rc == 0 and b"\x1b" not in shown and timeless(shown.decode()) == timeless(plain)


@pytest.mark.model
def test_a_write_on_a_terminal_shows_what_is_similar(repo: Path, cli: Callable[..., CliResult]) -> None:
    cli("write", "--kind", "fact", "--text", "The API serves JSON logs to stdout in production.",
        "--evidence", "user:x", cwd=repo)
    rc, shown, _ = run_on_tty(["write", "--kind", "fact", "--text", "In production the API writes its logs as JSON "
                               "to stdout.", "--evidence", "user:y"], cwd=repo)
    text = shown.decode()
    assert rc == 0 and "wrote fact" in text and "similar to" in text and "The API serves JSON logs" in text, text


def test_context_on_a_terminal_leaves_the_agents_guidance_to_the_json(repo: Path, cli: Callable[..., CliResult]
                                                                     ) -> None:
    rc, shown, _ = run_on_tty(["context"], cwd=repo)
    assert rc == 0 and b"write mode:" in shown and b"Current code is ground truth" not in shown
    rc, out, _ = cli("context", cwd=repo)
    assert rc == 0 and out["guidance"].startswith("Current code is ground truth")


def test_the_config_init_writes_says_which_store_and_points_at_the_docs(repo: Path, tmp_path: Path,
                                                                       cli: Callable[..., CliResult]) -> None:
    repo_config = (repo / ".memory" / "config.yaml").read_text()
    assert "this repository's store" in repo_config and "docs/configuration.md" in repo_config
    rc, _, err = cli("init", "--global", cwd=tmp_path)
    assert rc == 0, err
    global_config = (tmp_path / "home" / ".memory" / "config.yaml").read_text()
    assert "global store" in global_config and "docs/configuration.md" in global_config
    assert "repo store)" not in global_config and "the global store commits every write" in global_config
    assert "docs/configuration.md" in (Path(__file__).parent.parent / "templates" / "config.yaml").read_text()
