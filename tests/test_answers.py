"""The typed answers (memstore.read.answers, memstore.verbs.answers) say what the CLI really
answers: every field a real answer carries is declared, and the always-present ones are there.
A field added to an answer without its type (or a type naming a field no answer has) fails here."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import CliResult

from memstore.read.answers import Dispute, DisputeSide, Doubt, ReadAnswer, ReadResult, ResultLinks
from memstore.verbs.answers import ListAnswer, ListedMemory, ShowAnswer, UpdateAnswer, WriteAnswer

pytestmark = pytest.mark.model


def _keys(cls: Any) -> set[str]:
    return set(cls.__annotations__)


def test_read_write_and_update_answers_match_their_types(repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, problem, err = cli("write", "--kind", "problem", "--text", "The orders migration fails: column "
                           "tracking_code already exists.", "--evidence", "user:seen", cwd=repo)
    assert rc == 0, err
    rc, tactic, err = cli("write", "--json", "-", cwd=repo, input=json.dumps({"memory": {
        "kind": "failed_tactic", "scope": "repo", "text": "Dropping the column by hand broke the next deploy.",
        "evidence_refs": ["user:seen"], "links": {"problem_id": problem["id"]}}}))
    assert rc == 0, err
    rc, other, err = cli("write", "--kind", "fact", "--text", "The orders migration must run before tracking_code "
                         "is read.", "--evidence", "user:seen", cwd=repo)
    assert rc == 0, err
    rc, dry, err = cli("write", "--kind", "fact", "--text", "A dry run of a fact.", "--evidence", "user:x",
                       "--dry-run", cwd=repo)
    assert rc == 0, err
    rc, link, err = cli("update", "--json", "-", cwd=repo, input=json.dumps({
        "type": "link", "memory_id": other["id"], "relation": {"type": "contradicts", "id": problem["id"]},
        "evidence_refs": ["user:they disagree"]}))
    assert rc == 0, err
    for answer, cls in ((problem, WriteAnswer), (tactic, WriteAnswer), (dry, WriteAnswer), (link, UpdateAnswer)):
        assert set(answer) <= _keys(cls), set(answer) - _keys(cls)
    assert {"ok", "id", "kind", "scope", "path", "mode"} <= set(problem) and "content" in dry

    rc, read, err = cli("read", "orders migration fails: column tracking_code already exists", cwd=repo)
    assert rc == 0, err
    always = {"ok", "guidance", "content_trust", "results", "disputes", "stats"}
    assert always <= set(read) <= _keys(ReadAnswer), set(read) ^ _keys(ReadAnswer)
    assert read["results"] and read["disputes"], read
    kinds = set()
    for result in read["results"]:
        kinds.add(result["kind"])
        assert set(result) <= _keys(ReadResult), set(result) - _keys(ReadResult)
        assert set(result["links"]) == _keys(ResultLinks)
        assert {"confidence", "review", "doubts"} <= set(result)
        for doubt in result["doubts"]:
            assert set(doubt) == _keys(Doubt)
    assert any(d["doubt"] == "disputed" for r in read["results"] for d in r["doubts"])  # the contradicting pair
    assert "failed_tactic" in kinds  # the one kind that carries `note`
    for dispute in read["disputes"]:
        assert set(dispute) == _keys(Dispute)
        for side in dispute["sides"]:
            assert set(side) == _keys(DisputeSide)

    rc, shown, err = cli("show", problem["id"], cwd=repo)
    assert rc == 0 and set(shown) == _keys(ShowAnswer), err or set(shown)
    (repo / ".memory" / "facts" / "broken.md").write_text("---\nkind: [\n---\nnot yaml\n")
    rc, listed, err = cli("list", cwd=repo)
    assert rc == 0 and set(listed) == _keys(ListAnswer), err or set(listed)
    assert listed["memories"] and listed["invalid"]
    for item in listed["memories"]:
        assert set(item) == _keys(ListedMemory)
