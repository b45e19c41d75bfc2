"""The fused score's keyword share, through the real CLI: for a question in prose it is mostly the
share of the question's words a memory holds (``RankingParams.prose_coverage``), not its BM25
against the best hit's, which gave the best hit the whole share however little of the question
it held; a query that names an identifier keeps BM25 alone (coverage cannot see the ``code``
field, where identifiers match)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import CliResult, store_files

from memstore.store.workspace import Workspace
from memstore.verbs import api

pytestmark = pytest.mark.model

MEMORIES = {
    "band": "Maria's brother plays in a band every Friday night.",
    "cello": "A cello is an instrument; so is a violin, a string instrument.",
    "bike": "Tom bought a new bicycle for the commute.",
    "coffee": "The office coffee machine was replaced in March.",
    "hike": "Tom and Maria went hiking in the mountains last summer.",
    "park": "The park near the office closes at sunset in winter.",
    "sister": "Maria's sister lives in Lisbon and teaches maths.",
    "cat": "Tom's cat sleeps on the keyboard.",
}
QUESTION = "What instrument does Maria's brother play in the band?"


@pytest.fixture
def people(ws: Workspace) -> dict[str, str]:
    return {key: api.write(ws, {"memory": {"kind": "fact", "scope": "repo", "text": text,
                                           "evidence_refs": ["user:seen it"]}, "allow_duplicate": True})["id"]
            for key, text in MEMORIES.items()}


def _keyword_share(result: dict[str, Any]) -> float:
    (share,) = [float(m.group(1)) for r in result["reasons"] if (m := re.fullmatch(r"keyword:([0-9.]+)", r))]
    return share


def test_a_prose_question_weighs_its_best_keyword_hit_by_what_it_holds(
        repo: Path, people: dict[str, str], cli: Callable[..., CliResult]) -> None:
    before = store_files(repo)
    rc, out, err = cli("read", QUESTION, cwd=repo)
    assert rc == 0, err
    top = out["results"][0]
    assert top["id"] == people["band"], out["results"]
    # The best BM25 hit holds "Maria", "brother", "play", "band", not "instrument": it no longer
    # takes the whole keyword share (it did, 1.00, when BM25 / best BM25 was the share).
    assert 0.5 < _keyword_share(top) < 0.95, top["reasons"]
    assert store_files(repo) == before


def test_a_query_naming_an_identifier_keeps_bm25_alone(
        repo: Path, people: dict[str, str], cli: Callable[..., CliResult]) -> None:
    rc, out, err = cli("read", QUESTION.replace("?", " on band_roster.txt?"), cwd=repo)
    assert rc == 0, err
    top = out["results"][0]
    assert top["id"] == people["band"], out["results"]
    assert _keyword_share(top) == 1.0, top["reasons"]
