"""The read pipeline end to end: real model, real faiss/Whoosh indexes, real files in git."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import PROBLEM, SOLUTION, TACTIC, make_git_repo, reopen, store_files

from memstore.errors import DuplicateError
from memstore.index import embedder as embedder_mod
from memstore.read import indexes, retrieve
from memstore.store.workspace import Workspace, open_workspace
from memstore.verbs import api

pytestmark = pytest.mark.model

FACT_OLD = "The database driver is asyncpg; connection URLs use postgresql+asyncpg://."
CHANGE = "The database driver moved from asyncpg to psycopg 3 in pyproject.toml."
FACT_NEW = "The database driver is psycopg 3; connection URLs use postgresql+psycopg://."
PREF = "The user wants commit messages in Conventional Commits style with a scope, like fix(db): ..."


def w(ws: Workspace, kind: str, text: str, links: dict[str, Any] | None = None, **extra: Any) -> str:
    memory: dict[str, Any] = {"kind": kind, "scope": "repo", "text": text, "evidence_refs": ["user:seen it"]}
    if links:
        memory["links"] = links
    return api.write(ws, {"memory": memory, **extra})["id"]


def ids(answer: dict[str, Any]) -> list[str]:
    return [r["id"] for r in answer["results"]]


@pytest.fixture
def populated(ws: Workspace) -> dict[str, str]:
    out = {"problem": w(ws, "problem", PROBLEM)}
    out["solution"] = w(ws, "solution", SOLUTION, {"problem_id": out["problem"]})
    out["tactic"] = w(ws, "failed_tactic", TACTIC, {"problem_id": out["problem"]})
    out["fact_old"] = w(ws, "fact", FACT_OLD)
    out["change"] = w(ws, "change", CHANGE, {"change_targets": [out["fact_old"]]})
    out["fact_new"] = w(ws, "fact", FACT_NEW, {"supersedes": [out["fact_old"]], "via_change": out["change"]})
    out["pref"] = w(ws, "preference", PREF)
    return out


def test_paraphrase_finds_problem_and_pulls_its_links(ws: Workspace, populated: dict[str, str]) -> None:
    ans = retrieve.read(ws, {"query": "my new migration breaks pytest because the column is already there"})
    got = {r["id"]: r for r in ans["results"]}
    assert populated["problem"] in got
    assert populated["solution"] in got and populated["tactic"] in got
    problem = got[populated["problem"]]
    assert problem["links"]["solutions"] == [populated["solution"]]
    assert problem["links"]["failed_tactics"] == [populated["tactic"]]
    tactic = got[populated["tactic"]]
    assert "watch-out" in tactic["note"]
    linked = got[populated["tactic"]]["reasons"] + got[populated["solution"]]["reasons"]
    assert any(r.startswith("link:") for r in linked)
    assert ans["guidance"].startswith("Current code is ground truth")
    assert ans["stats"]["candidates"] >= 3 and ans["stats"]["elapsed_ms"] >= 0
    # linked groups stay together: the problem's attempts sit next to it in the list
    order = ids(ans)
    group = [order.index(populated[k]) for k in ("problem", "solution", "tactic")]
    assert max(group) - min(group) == 2


def test_superseded_fact_is_history_of_its_successor(ws: Workspace, populated: dict[str, str]) -> None:
    ans = retrieve.read(ws, {"query": "which database driver does the app use, asyncpg?"})
    got = {r["id"]: r for r in ans["results"]}
    assert populated["fact_new"] in got and populated["fact_old"] not in got, ids(ans)
    assert got[populated["fact_new"]]["links"]["superseded_by"] is None
    assert [h["id"] for h in got[populated["fact_new"]]["history"]] == [populated["fact_old"]]


def test_superseded_fact_brings_the_head_in_its_place(ws: Workspace, populated: dict[str, str]) -> None:
    ans = retrieve.read(ws, {"query": "asyncpg connection URLs postgresql+asyncpg", "kinds": ["fact"]})
    assert ids(ans)[0] == populated["fact_new"] and populated["fact_old"] not in ids(ans)
    head = ans["results"][0]
    assert f"supersedes:{populated['fact_old']}" in head["reasons"]
    assert head["history"][0]["superseded_by"] == populated["fact_new"]
    assert head["history"][0]["change"] == populated["change"]


def test_archived_memories_never_appear(ws: Workspace, populated: dict[str, str]) -> None:
    query = {"query": "commit message style conventional commits"}
    assert populated["pref"] in ids(retrieve.read(ws, query))
    api.update(ws, {"type": "archive", "memory_id": populated["pref"], "archived": True,
                    "evidence_refs": ["user:we dropped that rule"]})
    assert populated["pref"] not in ids(retrieve.read(reopen_ws(ws), query))


def reopen_ws(ws: Workspace) -> Workspace:
    assert ws.repo is not None and ws.repo.worktree is not None
    return reopen(ws.repo.worktree)


def test_downvoted_memory_ranks_below_equal_upvoted_one(ws: Workspace) -> None:
    problem = w(ws, "problem", "The nightly export job times out after 30 minutes on the orders table.")
    a = w(ws, "solution", "Add an index on orders.created_at so the export query stops scanning the table.",
          {"problem_id": problem})
    b = w(ws, "solution", "Add an index on orders.created_at so that the export query stops a full table scan.",
          {"problem_id": problem}, allow_duplicate=True)
    api.update(ws, {"type": "utility_vote", "memory_id": a, "problem_id": problem, "vote": -0.4,
                    "evidence_refs": ["user:it did not help"]})
    api.update(ws, {"type": "utility_vote", "memory_id": b, "problem_id": problem, "vote": 1,
                    "evidence_refs": ["user:that fixed it"]})
    ans = retrieve.read(reopen_ws(ws), {"query": "export job timeout on orders", "problem_id": problem})
    order = ids(ans)
    assert a in order and b in order
    assert order.index(b) < order.index(a)
    scores = {r["id"]: r for r in ans["results"]}
    assert scores[b]["utility"]["local"] > 0 > scores[a]["utility"]["local"]


def test_problem_id_prefix_weighs_votes_as_the_full_id(ws: Workspace) -> None:
    """A read names its problem by a unique prefix, as every command does: the votes cast for that
    problem then count in full. An unknown id only loses that weight, with a warning."""
    problem = w(ws, "problem", "The nightly export job times out after 30 minutes on the orders table.")
    fix = w(ws, "solution", "Add an index on orders.created_at so the export query stops scanning the table.",
            {"problem_id": problem})
    api.update(ws, {"type": "utility_vote", "memory_id": fix, "problem_id": problem, "vote": 1,
                    "evidence_refs": ["user:that fixed it"]})
    query = "export job timeout on orders"

    def utility(answer: dict[str, Any]) -> dict[str, Any]:
        return next(r["utility"] for r in answer["results"] if r["id"] == fix)

    full = retrieve.read(reopen_ws(ws), {"query": query, "problem_id": problem})
    short = retrieve.read(reopen_ws(ws), {"query": query, "problem_id": problem[:10]})
    unknown = retrieve.read(reopen_ws(ws), {"query": query, "problem_id": "01zzzzzzzzzz"})
    assert utility(short) == utility(full)
    assert not any("problem_id" in m for m in short.get("warnings", []))
    assert utility(unknown)["local"] < utility(full)["local"]
    assert any("problem_id '01zzzzzzzzzz' not found" in m for m in unknown["warnings"])


def test_a_read_without_the_global_store_still_weighs_votes_by_a_global_problem(ws: Workspace) -> None:
    """A repo vote may be cast in the context of a global problem; a read that leaves the global
    store out still resolves that problem's id and weighs the vote by it."""
    ws.global_write_mode = "autonomous"
    problem = api.write(ws, {"memory": {"kind": "problem", "scope": "global", "evidence_refs": ["user:seen it"],
                                        "text": "The nightly export job times out after 30 minutes."}})["id"]
    fix = w(ws, "solution", "Add an index on orders.created_at so the nightly export stops scanning the table.",
            {"problem_id": problem})
    api.update(ws, {"type": "utility_vote", "memory_id": fix, "problem_id": problem, "vote": 1,
                    "evidence_refs": ["user:that fixed it"]})
    query = "nightly export of orders times out"
    everywhere = retrieve.read(reopen_ws(ws), {"query": query, "problem_id": problem[:10]})
    repo_only = retrieve.read(reopen_ws(ws), {"query": query, "problem_id": problem[:10], "include_global": False})
    assert problem not in ids(repo_only) and not any("problem_id" in m for m in repo_only.get("warnings", []))
    local = {a: next(r["utility"]["local"] for r in ans["results"] if r["id"] == fix)
             for a, ans in (("everywhere", everywhere), ("repo_only", repo_only))}
    assert local["repo_only"] == local["everywhere"] > 0, local


def test_firmly_negative_memory_is_dropped(ws: Workspace) -> None:
    problem = w(ws, "problem", "Webpack build runs out of memory when bundling the admin dashboard.")
    bad = w(ws, "solution", "Raise NODE_OPTIONS=--max-old-space-size to 8192 for the webpack build.",
            {"problem_id": problem})
    for who in ("alice", "bob", "carol"):
        api.update(ws, {"type": "utility_vote", "memory_id": bad, "problem_id": problem, "vote": -1,
                        "author": who, "evidence_refs": ["user:still crashes"]})
    ans = retrieve.read(reopen_ws(ws), {"query": "webpack out of memory admin dashboard build"})
    assert problem in ids(ans)
    assert bad not in ids(ans)


def test_unrelated_query_returns_empty(ws: Workspace, populated: dict[str, str]) -> None:
    ans = retrieve.read(ws, {"query": "how long should sourdough bread proof in a cold oven"})
    assert ans["results"] == []
    assert ans["guidance"]


def test_repo_a_never_sees_repo_b(tmp_path: Path) -> None:
    a, b = make_git_repo(tmp_path / "a"), make_git_repo(tmp_path / "b")
    ws_a, ws_b = open_workspace(cwd=a), open_workspace(cwd=b)
    api.init(ws_a)
    api.init(ws_b)
    only_a = w(ws_a, "fact", "The payments service retries Stripe webhooks three times with exponential backoff.")
    w(ws_b, "fact", "The frontend is built with Vite and deployed to a CDN bucket.")
    ans_b = retrieve.read(open_workspace(cwd=b), {"query": "how are Stripe webhooks retried in payments?"})
    assert only_a not in ids(ans_b)
    ans_a = retrieve.read(open_workspace(cwd=a), {"query": "how are Stripe webhooks retried in payments?"})
    assert only_a in ids(ans_a)


def test_hand_written_file_is_visible_to_the_next_read(repo: Path, ws: Workspace,
                                                       populated: dict[str, str]) -> None:
    retrieve.read(ws, {"query": "warm the index"})
    path = repo / ".memory" / "facts" / "redis-cache.md"
    path.write_text("---\nkind: fact\nevidence: ['user:ops told me']\n---\n"
                    "Session data lives in Redis db 3; flushing db 0 does not log users out.\n")
    ans = retrieve.read(ws, {"query": "which redis database holds session data?"})
    top = ans["results"][0]
    assert top["text"].startswith("Session data lives in Redis db 3")
    assert top["path"].endswith("facts/redis-cache.md")


def test_deleting_index_changes_no_answer(repo: Path, ws: Workspace, populated: dict[str, str]) -> None:
    queries = ["migration fails column already exists", "database driver", "commit style", "sourdough"]

    def answers(workspace: Workspace) -> list[list[tuple[str, float]]]:
        return [[(r["id"], r["score"]) for r in retrieve.read(workspace, {"query": q})["results"]] for q in queries]

    before = answers(ws)
    shutil.rmtree(repo / ".memory" / ".index")
    after = answers(reopen(repo))
    assert after == before
    full = indexes.reindex(reopen(repo), full=True)
    assert full["stores"][0]["memories"] == len(populated)
    assert answers(reopen(repo)) == before


def test_filters_kinds_tags_since(ws: Workspace, populated: dict[str, str]) -> None:
    q = "database migration driver"
    assert {r["kind"] for r in retrieve.read(ws, {"query": q, "kinds": ["fact"]})["results"]} <= {"fact"}
    assert retrieve.read(ws, {"query": q, "filters": {"since": "2999-01-01"}})["results"] == []
    assert retrieve.read(ws, {"query": q, "filters": {"tags": ["no-such-tag"]}})["results"] == []


def test_ambient_mode_is_stricter(ws: Workspace, populated: dict[str, str]) -> None:
    q = "tests and databases"
    targeted = retrieve.read(ws, {"query": q, "mode": "targeted"})
    ambient = retrieve.read(ws, {"query": q, "mode": "ambient"})
    assert len(ambient["results"]) <= len(targeted["results"])
    assert ambient["stats"]["gate"]["bar"] > targeted["stats"]["gate"]["bar"]


def test_near_duplicate_write_is_refused_with_a_vote_suggestion(repo: Path, ws: Workspace,
                                                                populated: dict[str, str]) -> None:
    from conftest import store_files

    before = store_files(repo)
    text = PREF.replace("The user wants", "The user wants all")
    with pytest.raises(DuplicateError) as err:
        w(ws, "preference", text)
    payload = err.value.to_json()["error"]
    assert payload["code"] == "duplicate"
    assert payload["duplicates"][0]["id"] == populated["pref"]
    assert payload["suggestion"] == {"op": "update", "type": "utility_vote", "memory_id": populated["pref"],
                                     "vote": 1, "rationale": "seen again"}
    assert store_files(repo) == before
    # same text, different kind is not a duplicate; allow_duplicate overrides
    w(ws, "fact", text)
    w(ws, "preference", text, allow_duplicate=True)


def test_keyword_lane_when_the_model_cannot_load(ws: Workspace, populated: dict[str, str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    broken = embedder_mod.Embedder(model_path=str(Path("/nonexistent/model")))
    monkeypatch.setattr(embedder_mod, "_shared", broken)
    monkeypatch.setattr(retrieve, "get_embedder", lambda: broken)
    fresh = reopen_ws(ws)
    ans = retrieve.read(fresh, {"query": "DuplicateColumn tracking_code"})
    assert any(w.startswith("semantic lane unavailable") for w in ans["warnings"])
    assert populated["problem"] in ids(ans)


def test_long_lived_workspace_sees_writes_after_reading_an_empty_store(ws: Workspace) -> None:
    """The daemon and the MCP server keep one workspace: the first read of a brand-new store
    must not break the reads after the first write."""
    assert retrieve.read(ws, {"query": "redis session database"})["results"] == []
    mid = w(ws, "fact", "Session data lives in Redis db 3; flushing db 0 does not log users out.")
    assert mid in ids(retrieve.read(ws, {"query": "which redis database holds session data?"}))


def test_a_query_encode_leaves_torchs_thread_count_as_it_was() -> None:
    """A query is encoded on one thread (two thread pools spinning on two cores made reads
    several times slower); a program that set torch's thread count keeps its setting, and a
    query's vector is the one a batch would give."""
    import numpy as np
    import torch

    emb = embedder_mod.get_embedder()
    emb.load()
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        one = emb.encode(["why does the migration fail on the tracking_code column?"])
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    batch = emb.encode(["why does the migration fail on the tracking_code column?", "x", "y"])
    assert np.allclose(one[0], batch[0], atol=1e-5)


def test_a_watched_workspace_reads_without_walking_and_sees_every_change(
        repo: Path, ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from memstore.store.disk import Store

    def read_until(query: str, pred: Any) -> dict[str, Any]:
        deadline = time.monotonic() + 5
        while True:
            ans = retrieve.read(ws, {"query": query}, log_episode=False)
            if pred(ans) or time.monotonic() > deadline:
                return ans
            time.sleep(0.02)

    ws.watch()
    try:
        old = w(ws, "fact", FACT_OLD)
        # its own write: visible at once, before the watcher reports it
        assert old in ids(retrieve.read(ws, {"query": "which database driver do we use?"}, log_episode=False))
        by_hand = api.write(reopen(repo), {"memory": {"kind": "fact", "scope": "repo", "text": FACT_NEW,
                                                      "evidence_refs": ["user:seen it"]}, "mode": "dry_run"})
        walks: list[int] = []
        real = Store.memory_entries
        monkeypatch.setattr(Store, "memory_entries", lambda self: walks.append(1) or real(self))

        (repo / by_hand["path"]).write_text(by_hand["content"])  # another program writes a file
        ans = read_until("which database driver do we use?", lambda a: by_hand["id"] in ids(a))
        assert by_hand["id"] in ids(ans)
        path = repo / by_hand["path"]
        path.write_text(path.read_text().replace("psycopg 3", "psycopg 3.2"))  # edited in place
        ans = read_until("which database driver do we use?",
                         lambda a: any("psycopg 3.2" in r["text"] for r in a["results"]))
        assert any("psycopg 3.2" in r["text"] for r in ans["results"])
        path.unlink()
        ans = read_until("which database driver do we use?", lambda a: by_hand["id"] not in ids(a))
        assert by_hand["id"] not in ids(ans) and old in ids(ans)
        assert walks == [], "a watched workspace re-reads the changed files, it does not walk"
    finally:
        ws.close()
    retrieve.read(ws, {"query": "which database driver do we use?"}, log_episode=False)
    assert walks, "closed: every read checks the files again"


def test_a_pasted_traceback_over_the_cap_is_read_by_its_head_and_error_lines(
        ws: Workspace, populated: dict[str, str]) -> None:
    """Issue #12.7: long queries were refused; agents paste tracebacks."""
    frames = "".join(f'  File "/venv/lib/python3.11/site-packages/pkg/mod{i}.py", line {i}, in f{i}\n    x = y\n'
                     for i in range(80))
    query = ("pytest fails while running alembic upgrade head on the test database\nTraceback (most recent call "
             "last):\n" + frames + "psycopg.errors.DuplicateColumn: column tracking_code of relation shipments "
             "already exists\n")
    assert len(query) > 5000
    ans = retrieve.read(ws, {"query": query})
    assert any("without its stack frames" in w for w in ans["warnings"]), ans.get("warnings")
    assert populated["problem"] in ids(ans)


def _with_read_config(repo: Path, body: str) -> None:
    path = repo / ".memory" / "config.yaml"
    path.write_text(path.read_text(encoding="utf-8") + "\nread:\n" + body, encoding="utf-8")


@pytest.mark.parametrize(("body", "named"), [
    ("  small_store_slope: abc\n", "read.small_store_slope: expected a mapping of targeted, ambient"),
    ("  query_bar: {targetted: 0.3}\n", "read.query_bar.targetted: unknown key; one of targeted, ambient"),
    ("  query_bar: {targeted: high}\n", "read.query_bar.targeted: expected a number, not 'high'"),
    ("  querybar: {targeted: 0.3}\n", "read.querybar: unknown setting, ignored; did you mean 'query_bar'?"),
    ("  semantic_pool: 1000000000\n", "read.semantic_pool: expected a whole number from 0 to 1000"),
    ("  limit: {targeted: 5000}\n", "read.limit.targeted: expected a whole number from 0 to 100"),
    ("  named_holders_only: 1\n", "read.named_holders_only: expected true or false"),
    ("  hop_bars: 0.9\n", "read.hop_bars: expected a list of numbers"),
    ("  alpha: '0.5'\n", "read.alpha: expected a number, not '0.5'"),
    ("  - query_bar\n", "read: must be a mapping"),
])
def test_a_read_setting_memstore_cannot_use_is_named_and_the_default_applies(
        repo: Path, populated: dict[str, str], cli: Any, body: str, named: str) -> None:
    """config.yaml is edited by hand and comes with every clone: a ``read:`` value memstore
    cannot use is named in every read's warnings and by ``check``, and the read answers as the
    defaults would (one bad line in a committed file must not stop every teammate's reads)."""
    query = "alembic upgrade fails with DuplicateColumn"
    rc, plain, _ = cli("read", query, cwd=repo)
    assert rc == 0 and not any("config.yaml" in w for w in plain.get("warnings", []))
    _with_read_config(repo, body)
    before = store_files(repo)
    rc, out, err = cli("read", query, cwd=repo)
    assert rc == 0, (out, err)
    assert any(named in w for w in out.get("warnings", [])), out
    assert [r["id"] for r in out["results"]] == [r["id"] for r in plain["results"]]
    assert store_files(repo) == before
    rc, report, err = cli("check", cwd=repo)
    found = [f for f in report["problems"] if f["code"] == "bad_config"]
    assert [f["path"] for f in found] == [".memory/config.yaml"] and named in found[0]["message"], report
    assert (rc != 0) is (found[0]["severity"] == "error"), (rc, found)


def test_a_read_setting_in_config_changes_the_answer(repo: Path, populated: dict[str, str], cli: Any) -> None:
    query = "alembic upgrade fails with DuplicateColumn"
    rc, out, _ = cli("read", query, cwd=repo)
    assert rc == 0 and len(out["results"]) >= 2 and out["stats"]["gate"]["bar"] == 0.40, out["stats"]
    _with_read_config(repo, "  limit: {targeted: 1}\n  query_bar: {targeted: 0.45}\n"
                            "  small_store_slope: {targeted: 0}\n")
    rc, out, err = cli("read", query, cwd=repo)
    assert rc == 0, err
    assert [r["id"] for r in out["results"]] == [populated["problem"]], out["results"]
    assert out["stats"]["gate"]["bar"] == 0.45, out["stats"]


def test_a_store_setting_memstore_cannot_use_falls_back_to_its_default_and_says_so(
        repo: Path, populated: dict[str, str], cli: Any) -> None:
    """Outside ``read:`` too: ``duplicates.threshold: high`` once made every write an unexpected
    ValueError; now the write is checked at the default threshold and reads name the line."""
    path = repo / ".memory" / "config.yaml"
    path.write_text(path.read_text(encoding="utf-8") + "\nduplicates:\n  threshold: high\nlimits: 7\n",
                    encoding="utf-8")
    rc, out, err = cli("write", "--json", "-", cwd=repo, input=json.dumps(
        {"memory": {"kind": "fact", "scope": "repo", "text": FACT_NEW, "evidence_refs": ["user:seen it"]}}))
    assert rc != 0 and out["error"]["code"] == "duplicate", out  # the default 0.95 judged it
    rc, out, err = cli("read", "which database driver", cwd=repo)
    assert rc == 0, err
    shown = " | ".join(out.get("warnings", []))
    assert "duplicates.threshold: expected a number, not 'high'; the default 0.95 applies" in shown, shown
    assert "limits: must be a mapping of settings, not 7; the defaults apply" in shown, shown
