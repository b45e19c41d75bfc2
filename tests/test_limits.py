"""Every limit a setting holds has a floor and a ceiling (store/config.LIMITS) that the parser,
the write path and ``check`` agree on: a value outside is named (config.yaml: in warnings and by
``check``, its default applying; the environment: ``bad_config``, exit 2) and nothing is
written on a refusal. Through the CLI, in real git repos."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, git, store_files

from memstore.store.config import LIMITS, MAX_FIELD_CHARS

FACT = ["write", "--kind", "fact", "--evidence", "user:said so", "--allow-duplicate", "--text"]
WORDS = ["deploy", "cache", "runner", "webhook", "retry", "schema", "worker", "queue", "backup", "token"]


def _text(chars: int) -> str:
    out, i = [], 0
    while sum(len(w) + 1 for w in out) < chars:
        out.append(f"{WORDS[i % len(WORDS)]}{i}")
        i += 1
    return (" ".join(out))[:chars - 1].rstrip() + "."


def _config(repo: Path, body: str) -> None:
    (repo / ".memory" / "config.yaml").write_text(body)
    git(repo, "add", ".memory/config.yaml")


def _bad_config_findings(cli: Callable[..., CliResult], repo: Path) -> list[str]:
    rc, report, err = cli("check", cwd=repo)
    found = [f["message"] for f in report["problems"] if f["code"] == "bad_config"]
    assert (rc != 0) is bool(found), (rc, report, err)
    return found


@pytest.mark.parametrize("value", [str(MAX_FIELD_CHARS + 1), "100000", "0", "-5"])
def test_a_text_cap_out_of_range_in_the_environment_is_bad_config_and_writes_nothing(
        repo: Path, cli: Callable[..., CliResult], value: str) -> None:
    before = store_files(repo)
    rc, out, err = cli(*FACT, "The release branch is cut on Tuesdays.", cwd=repo,
                       env={"MEMSTORE_MAX_TEXT_CHARS": value})
    assert rc == 2 and out["error"]["code"] == "bad_config", (out, err)
    assert "MEMSTORE_MAX_TEXT_CHARS" in out["error"]["message"], out
    assert store_files(repo) == before


def test_a_text_at_the_ceiling_is_written_served_and_passes_check(repo: Path, cli: Callable[..., CliResult]) -> None:
    """What the write path accepts at its highest setting, the parser serves and check passes."""
    git(repo, "commit", "-q", "-m", "layout")
    text = _text(MAX_FIELD_CHARS)
    assert len(text) == MAX_FIELD_CHARS
    env = {"MEMSTORE_MAX_TEXT_CHARS": str(MAX_FIELD_CHARS)}
    rc, out, err = cli(*FACT, text, cwd=repo, env=env)
    assert rc == 0 and out["ok"], (out, err)
    rc, shown, err = cli("show", out["id"], cwd=repo, env=env)
    assert rc == 0 and shown["memory"]["text"] == text, err
    rc, report, err = cli("check", cwd=repo, env=env)
    assert rc == 0 and report["ok"], report
    git(repo, "commit", "-q", "-m", "a long memory")  # the pre-commit hook's check passes too


def test_a_text_cap_above_the_ceiling_in_config_is_named_and_the_default_applies(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    """Once, ``limits.max_text_chars: 50000`` acknowledged a 17,000-character write that the
    parser never served and that blocked the next commit."""
    _config(repo, "limits:\n  max_text_chars: 50000\n")
    before = store_files(repo)
    rc, out, err = cli(*FACT, _text(MAX_FIELD_CHARS + 1000), cwd=repo)
    assert rc == 2 and out["error"]["code"] == "too_large" and "4000" in out["error"]["message"], (out, err)
    assert store_files(repo) == before
    rc, out, err = cli("read", "release branch", cwd=repo)
    assert rc == 0 and any("limits.max_text_chars" in w and "ceiling" in w for w in out.get("warnings", [])), out
    found = _bad_config_findings(cli, repo)
    assert any("limits.max_text_chars" in m and "50000" in m for m in found), found


@pytest.mark.model
def test_a_duplicate_threshold_below_its_floor_is_named_and_writes_are_not_all_duplicates(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    _config(repo, "duplicates:\n  threshold: 0.0\n")
    write = ["write", "--kind", "fact", "--evidence", "user:said so", "--text"]
    rc, first, err = cli(*write, "The release branch is cut every second Tuesday.", cwd=repo)
    assert rc == 0 and first["ok"], (first, err)
    rc, second, err = cli(*write, "Postgres backups run nightly at 02:00 UTC from the replica.", cwd=repo)
    assert rc == 0 and second["ok"], (second, err)  # 0.0 refused this as a "duplicate" of the first
    found = _bad_config_findings(cli, repo)
    assert any("duplicates.threshold" in m and "floor" in m for m in found), found


@pytest.mark.parametrize(("section", "key"), sorted(LIMITS))
def test_every_limit_out_of_range_in_config_is_named_by_check(
        repo: Path, cli: Callable[..., CliResult], section: str, key: str) -> None:
    floor, ceiling = LIMITS[section, key]
    assert floor <= ceiling
    for value in (floor - 1, ceiling * 2 + 1):
        if value < 0:
            continue  # below 0 is already named as the wrong type
        _config(repo, f"{section}:\n  {key}: {value}\n")
        found = _bad_config_findings(cli, repo)
        assert any(f"{section}.{key}" in m for m in found), (value, found)
    _config(repo, f"{section}:\n  {key}: {ceiling}\n")
    assert _bad_config_findings(cli, repo) == []
