"""Precision in small stores: hand-written stores and questions (tests/data/precision_cases.yaml)
read through the real pipeline (real model, indexes, files in a git repo).

The cases were written from the product's side before any tuning and are not a tuning set:
read's constants are chosen by cross-validation on the benchmarks in bench/ (RESULTS.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import make_git_repo

from memstore import gitops
from memstore.read import retrieve
from memstore.store.workspace import open_workspace
from memstore.verbs import api

pytestmark = pytest.mark.model

DATA = yaml.safe_load((Path(__file__).parent / "data" / "precision_cases.yaml").read_text(encoding="utf-8"))
STORES: dict[str, list[dict[str, Any]]] = DATA["stores"]
CASES: list[dict[str, Any]] = DATA["cases"]
# Cases that once waited for the code-aware keyword lane; none left.
NEEDS_CODE_LANE: dict[str, str] = {}
# Cases the product does not meet yet, kept as they were written: the answer should change,
# not the expectation. strict: a pass means the mark must go.
NOT_YET: dict[str, str] = {
    "frontend-package-manager": "the query gate refuses it: no memory says 'package manager'; best cosine 0.290 "
                                "under the small-store bar 0.293 (8 memories; the pnpm fact holds 35% of the "
                                "query's idf: install, dependencies)",
    "frontend-env-undefined": "the query gate refuses it: process.env.API_URL is new to the store (bar 0.55, 0.44 "
                              "at 8 memories), best cosine 0.37, and the env fact shares only 'browser' with it "
                              "(11% of the query's idf)",
    "shipping-too-many-clients": "'running the tests' matches the flaky-test memories (cosine 0.36, 0.41) better "
                                 "than the problem itself (0.26, carried by its keywords, 0.68): the flaky-test "
                                 "problem scores 0.31 of the best 0.40, above the relative floor (0.45 of it)",
    "deploy-registry": "the query gate refuses it: best cosine 0.35 (0.40 with the preference offset), and no query "
                       "word is rare in the store (docker: 3 memories of 7, image: 2) to lower the bar; answered, "
                       "the permission fix (holds 'docker' and 'image') would outrank the registry fact (holds only "
                       "'images') in the keyword lane, and no score cut separates them",
}

_built: dict[str, tuple[Path, dict[str, str]]] = {}


def build(name: str, root: Path) -> tuple[Path, dict[str, str]]:
    """The store ``name`` in a real git repo, written through the library (keys -> ids)."""
    if name in _built:
        return _built[name]
    repo = make_git_repo(root / name)
    gitops.toplevel.cache_clear()
    ws = open_workspace(cwd=repo)
    api.init(ws)
    ids: dict[str, str] = {}
    for spec in STORES[name]:
        links: dict[str, Any] = {}
        if "problem" in spec:
            links["problem_id"] = ids[spec["problem"]]
        if "targets" in spec:
            links["change_targets"] = [ids[k] for k in spec["targets"]]
        if "supersedes" in spec:
            links["supersedes"] = [ids[k] for k in spec["supersedes"]]
        if "via_change" in spec:
            links["via_change"] = ids[spec["via_change"]]
        memory: dict[str, Any] = {"kind": spec["kind"], "scope": "repo", "text": spec["text"],
                                  "evidence_refs": ["user:said in the session"]}
        if links:
            memory["links"] = links
        ids[spec["key"]] = api.write(ws, {"memory": memory, "allow_duplicate": True})["id"]
    _built[name] = (repo, ids)
    return repo, ids


def check(case: dict[str, Any], results: list[dict[str, Any]], ids: dict[str, str]) -> None:
    key_of = {v: k for k, v in ids.items()}
    got = [key_of.get(r["id"], r["id"]) for r in results]
    shown = f"{case['id']}: got {got}"
    if case.get("empty"):
        assert got == [], shown
        return
    for key in case.get("expect", []):
        assert key in got, shown
    if "first" in case:
        assert got[0] == case["first"], shown
    for a, b in case.get("before", []):
        assert got.index(a) < got.index(b), shown
    if case.get("only"):
        extra = set(got) - set(case.get("expect", [])) - set(case.get("allow", []))
        assert not extra, f"{shown}; unexpected {sorted(extra)}"
    by_key = {key_of.get(r["id"], r["id"]): r for r in results}
    for head, old in (case.get("history") or {}).items():
        history = by_key[head].get("history") or []
        assert [key_of.get(h["id"]) for h in history] == old, shown
        assert all(h["superseded"] and h["superseded_by"] for h in history), history
        assert not set(old) & set(got), f"{shown}: superseded facts are history, not peers"


def _param(case: dict[str, Any]) -> Any:
    marks = []
    if case["id"] in NEEDS_CODE_LANE:
        marks.append(pytest.mark.xfail(strict=False, reason=NEEDS_CODE_LANE[case["id"]]))
    if case["id"] in NOT_YET:
        marks.append(pytest.mark.xfail(strict=True, reason=NOT_YET[case["id"]]))
    return pytest.param(case, id=case["id"], marks=marks)


def test_the_case_file_is_what_it_claims() -> None:
    assert len(CASES) >= 30
    assert all(3 <= len(mems) <= 20 for mems in STORES.values())
    assert any(c.get("empty") for c in CASES) and any(c.get("history") for c in CASES)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_small_store_answer(case: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    repo, ids = build(case["store"], tmp_path_factory.getbasetemp() / "precision")
    ws = open_workspace(cwd=repo)
    answer = retrieve.read(ws, {"query": case["query"], "include_global": False}, log_episode=False)
    check(case, answer["results"], ids)


CLI_CASES = ("invoice-unique-violation-words", "shipping-driver-old-url", "node-old-wording",
             "etl-oom-words", "go-unknown-android", "http-read-timeout", "shipping-driver-old-wording",
             "shipping-vague-tests")


@pytest.mark.parametrize("case_id", CLI_CASES)
def test_small_store_answer_through_the_cli(case_id: str, cli: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    case = next(c for c in CASES if c["id"] == case_id)
    repo, ids = build(case["store"], tmp_path_factory.getbasetemp() / "precision")
    code, out, err = cli("read", case["query"], "--no-global", cwd=repo)
    assert code == 0, err
    check(case, out["results"], ids)
