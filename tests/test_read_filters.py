"""read's author and min_confidence filters, through the CLI (bad values: tests/data/bad_input.jsonl)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult

pytestmark = pytest.mark.model


def test_read_filters_by_author_and_confidence(repo: Path, cli: Callable[..., CliResult]) -> None:
    made: dict[str, str] = {}
    for name, author, conf in (("alice_sure", "alice", "0.9"), ("alice_unsure", "alice", "0.3"),
                               ("bob_sure", "bob", "0.95")):
        rc, out, err = cli("write", "--kind", "fact", "--author", author, "--confidence", conf, "--allow-duplicate",
                           "--text", f"The staging deploy needs the VPN ({name}): the registry is private.",
                           "--evidence", "user:x", cwd=repo)
        assert rc == 0, err
        made[name] = out["id"]
    rc, out, err = cli("write", "--kind", "fact", "--allow-duplicate", "--evidence", "user:x",
                       "--text", "The staging deploy needs the VPN (no confidence): the registry is private.", cwd=repo)
    assert rc == 0, err
    made["unsure_of_nothing"] = out["id"]

    def got(*flags: str) -> set[str]:
        rc, ans, err = cli("read", "staging deploy VPN registry", *flags, cwd=repo)
        assert rc == 0, err
        return {r["id"] for r in ans["results"]}

    assert got() == set(made.values())
    assert got("--author", "Alice") == {made["alice_sure"], made["alice_unsure"]}  # case-insensitive
    assert got("--min-confidence", "0.5") == {made["alice_sure"], made["bob_sure"]}
    assert got("--author", "alice", "--min-confidence", "0.5") == {made["alice_sure"]}
    rc, ans, err = cli("read", "--json", "-", cwd=repo, input=json.dumps(
        {"query": "staging deploy VPN registry", "filters": {"author": "bob", "min_confidence": 0.9}}))
    assert rc == 0 and {r["id"] for r in ans["results"]} == {made["bob_sure"]}, err
