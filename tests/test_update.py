"""update: utility votes, archive/unarchive, fact-update links, and refusals."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, reopen, staged, store_files, write_req

from memstore.errors import SemanticError
from memstore.store.files import safe_yaml
from memstore.store.workspace import Workspace
from memstore.verbs import api


@pytest.fixture
def mems(ws: Workspace) -> dict[str, str]:
    problem = api.write(ws, write_req("problem", "CI times out on the integration suite"))["id"]
    return {
        "problem": problem,
        "solution": api.write(ws, write_req("solution", "Shard the integration suite into 4 jobs",
                                            links={"problem_id": problem}))["id"],
        "old_fact": api.write(ws, write_req("fact", "CI runs on Jenkins"))["id"],
    }


def _upd(**req: object) -> dict[str, object]:
    return {"op": "update", **req}


def test_utility_vote_changes_utility(ws: Workspace, repo: Path, mems: dict[str, str]) -> None:
    before = store_files(repo)
    ans = api.update(ws, _upd(type="utility_vote", memory_id=mems["solution"], problem_id=mems["problem"],
                              vote=1, evidence_refs=["user:that fixed it"]), author="claude-code")
    effect = ans["effect"]
    assert effect["memory_id"] == mems["solution"]
    assert effect["utility"]["before"] == 0.0 and effect["utility"]["after"] > 0 and effect["utility"]["votes"] == 1
    (new_file,) = store_files(repo) - before
    assert new_file == f"events/{ans['id']}.yaml"
    event = safe_yaml((repo / ".memory" / new_file).read_text())
    assert event["type"] == "utility_vote" and event["memory"] == mems["solution"]
    assert event["problem"] == mems["problem"] and event["vote"] == 1.0 and event["author"] == "claude-code"
    assert f".memory/{new_file}" in staged(repo)
    shown = api.show(reopen(repo), mems["solution"])["memory"]["derived"]["utility"]
    assert shown == {"global": effect["utility"]["after"], "votes": 1}


def test_negative_vote_and_latest_vote_counts(ws: Workspace, repo: Path, mems: dict[str, str]) -> None:
    api.update(ws, _upd(type="utility_vote", memory_id=mems["solution"], vote=1), author="a")
    ans = api.update(reopen(repo), _upd(type="utility_vote", memory_id=mems["solution"], vote=-1), author="a")
    # The same author re-voting replaces the earlier vote rather than adding to it.
    assert ans["effect"]["utility"]["votes"] == 1
    assert ans["effect"]["utility"]["after"] < 0


def test_archive_hides_from_list_and_unarchive_restores(ws: Workspace, repo: Path, mems: dict[str, str],
                                                         cli: Callable[..., CliResult]) -> None:
    rc, out, _ = cli("update", "--type", "archive", "--memory", mems["old_fact"], "--evidence", "user:obsolete",
                     cwd=repo)
    assert rc == 0 and out["effect"] == {"memory_id": mems["old_fact"], "archived": True}
    rc, out, _ = cli("list", cwd=repo)
    assert mems["old_fact"] not in [m["id"] for m in out["memories"]]
    rc, out, _ = cli("list", "--all", cwd=repo)
    listed = {m["id"]: m for m in out["memories"]}
    assert listed[mems["old_fact"]]["archived"] is True
    rc, out, _ = cli("update", "--type", "archive", "--unarchive", "--memory", mems["old_fact"],
                     "--evidence", "user:still true after all", cwd=repo)
    assert rc == 0 and out["effect"]["archived"] is False
    rc, out, _ = cli("list", cwd=repo)
    assert mems["old_fact"] in [m["id"] for m in out["memories"]]


def test_fact_update_link_sets_supersession(ws: Workspace, repo: Path, mems: dict[str, str],
                                            cli: Callable[..., CliResult]) -> None:
    change = api.write(ws, write_req("change", "Moved CI from Jenkins to GitHub Actions",
                                     links={"change_targets": [mems["old_fact"]]}))["id"]
    new = api.write(ws, write_req("fact", "CI runs on GitHub Actions"))["id"]
    req = _upd(type="fact_update_link", old_fact_id=mems["old_fact"], change_id=change, new_fact_id=new,
               evidence_refs=["file:src/app.py"])
    rc, out, _ = cli("update", "--json", "-", cwd=repo, input=json.dumps(req))
    assert rc == 0
    assert out["effect"] == {"old_fact_id": mems["old_fact"], "head_before": mems["old_fact"], "head_after": new}
    rc, out, _ = cli("show", mems["old_fact"], cwd=repo)
    assert out["memory"]["derived"]["superseded_by"] == new
    assert out["memory"]["derived"]["head"] == new


def test_fact_update_link_needs_the_right_kinds(ws: Workspace, repo: Path, mems: dict[str, str],
                                                cli: Callable[..., CliResult]) -> None:
    before = store_files(repo)
    req = _upd(type="fact_update_link", old_fact_id=mems["old_fact"], change_id=mems["problem"],
               new_fact_id=mems["old_fact"], evidence_refs=["user:x"])
    rc, out, _ = cli("update", "--json", "-", cwd=repo, input=json.dumps(req))
    assert rc == 2 and out["error"]["code"] == "wrong_kind" and out["error"]["field"] == "change_id"
    assert store_files(repo) == before


def test_vote_on_unknown_id_is_not_found(repo: Path, mems: dict[str, str], cli: Callable[..., CliResult]) -> None:
    before = store_files(repo)
    rc, out, err = cli("update", "--type", "utility_vote", "--memory", "01zzzzzzzzzz", "--vote", "1", cwd=repo)
    assert rc == 3
    assert out["error"]["code"] == "not_found" and out["error"]["field"] == "memory_id"
    assert "Traceback" not in err
    assert store_files(repo) == before


def test_archive_without_evidence_is_refused(ws: Workspace, repo: Path, mems: dict[str, str],
                                             cli: Callable[..., CliResult]) -> None:
    before = store_files(repo)
    with pytest.raises(SemanticError) as exc:
        api.update(ws, _upd(type="archive", memory_id=mems["old_fact"], archived=True))
    assert exc.value.code == "missing_evidence" and exc.value.field == "evidence_refs"
    rc, out, _ = cli("update", "--type", "archive", "--memory", mems["old_fact"], cwd=repo)
    assert rc == 2 and out["error"]["code"] == "missing_evidence"
    assert store_files(repo) == before


def test_vote_out_of_range_is_refused(repo: Path, mems: dict[str, str], cli: Callable[..., CliResult]) -> None:
    before = store_files(repo)
    rc, out, _ = cli("update", "--type", "utility_vote", "--memory", mems["solution"], "--vote", "2", cwd=repo)
    assert rc == 2 and out["error"]["field"] == "vote"
    assert store_files(repo) == before


def test_dry_run_shows_effect_and_writes_nothing(ws: Workspace, repo: Path, mems: dict[str, str]) -> None:
    before, index_before = store_files(repo), staged(repo)
    ans = api.update(ws, _upd(type="archive", memory_id=mems["old_fact"], archived=True, mode="dry_run",
                              evidence_refs=["user:gone"]))
    assert ans["mode"] == "dry_run" and ans["effect"]["archived"] is True
    assert safe_yaml(ans["content"])["archived"] is True
    vote = api.update(ws, _upd(type="utility_vote", memory_id=mems["solution"], vote=0.5, mode="dry_run"))
    assert vote["effect"]["utility"]["after"] > 0
    assert store_files(repo) == before and staged(repo) == index_before
    assert mems["old_fact"] in [m["id"] for m in api.list_memories(reopen(repo))["memories"]]
