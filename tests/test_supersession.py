"""Supersession as history (SPEC §10): whatever the wording of the query, the current fact comes
first and what it replaced shows only as its history. Reads run through the real CLI."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import CliResult, reopen, write_req

from memstore.read import retrieve
from memstore.store.workspace import Workspace, open_workspace
from memstore.surfaces.output import pretty
from memstore.verbs import api

pytestmark = pytest.mark.model

OLD = "We use asyncpg as the Postgres driver; the engine URL is postgresql+asyncpg://."
CHANGE = "Switched the Postgres driver from asyncpg to psycopg 3 because asyncpg has no COPY support."
NEW = "The project moved from asyncpg to psycopg 3; the engine URL is postgresql+psycopg://."
NEWEST = "The project pins psycopg 3.2 with the binary extra as its Postgres driver."
OTHER = "Commit messages follow Conventional Commits with a scope, e.g. fix(db): close the pool."
QUERIES = ("We use asyncpg as the Postgres driver", "is asyncpg still the Postgres driver?",
           "postgresql+asyncpg:// engine URL", "which Postgres driver does the project use")


def w(ws: Workspace, kind: str, text: str, **links: Any) -> str:
    return api.write(ws, write_req(kind, text, links=links or None))["id"]


@pytest.fixture
def chain(ws: Workspace) -> dict[str, str]:
    out = {"old": w(ws, "fact", OLD), "other": w(ws, "preference", OTHER)}
    out["change"] = w(ws, "change", CHANGE, change_targets=[out["old"]])
    out["new"] = w(ws, "fact", NEW, supersedes=[out["old"]], via_change=out["change"])
    return out


def read(cli: Callable[..., CliResult], repo: Path, query: str, *extra: str) -> list[dict[str, Any]]:
    code, out, err = cli("read", query, *extra, cwd=repo)
    assert code == 0, err
    return out["results"]


def lib_read(repo: Path, query: str, **request: Any) -> list[dict[str, Any]]:
    """The same read in-process (the CLI's JSON is this answer): for the many-query checks."""
    return retrieve.read(reopen(repo), {"query": query, **request}, log_episode=False)["results"]


def chain_ids(results: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in results]


@pytest.mark.parametrize("query", QUERIES)
def test_the_current_fact_comes_first_and_the_old_one_is_its_history(
        query: str, chain: dict[str, str], repo: Path, cli: Callable[..., CliResult]) -> None:
    results = read(cli, repo, query) if query == QUERIES[0] else lib_read(repo, query)
    facts = [r for r in results if r["kind"] == "fact"]
    assert [r["id"] for r in facts] == [chain["new"]], chain_ids(results)
    head = facts[0]
    assert chain["old"] not in chain_ids(results)
    assert head["history"] == [{
        "id": chain["old"], "scope": "repo", "text": OLD, "created": head["history"][0]["created"],
        "superseded": True, "superseded_by": chain["new"], "change": chain["change"]}]
    assert head["links"]["superseded_by"] is None
    # nothing unrelated ranks above the current fact
    assert results.index(head) == 0 or results[0]["id"] == chain["change"]


def test_worded_like_the_old_fact_the_head_takes_the_old_score(chain: dict[str, str], repo: Path) -> None:
    results = lib_read(repo, OLD)  # the old fact's own words: it is the best match there is
    head = results[0]
    assert head["id"] == chain["new"]
    assert f"supersedes:{chain['old']}" in head["reasons"]
    assert head["score"] >= max(r["score"] for r in results)


def test_a_chain_of_three_by_links_and_by_update_event(chain: dict[str, str], ws: Workspace, repo: Path,
                                                       cli: Callable[..., CliResult]) -> None:
    newest = w(ws, "fact", NEWEST)
    code, _, err = cli("update", "--type", "fact_update_link", "--old-fact", chain["new"], "--change",
                         chain["change"], "--new-fact", newest, "--evidence", "user:we pinned 3.2", cwd=repo)
    assert code == 0, err
    results = read(cli, repo, "We use asyncpg as the Postgres driver")
    facts = [r for r in results if r["kind"] == "fact"]
    assert [r["id"] for r in facts] == [newest], chain_ids(results)
    history = facts[0]["history"]
    assert [(h["id"], h["superseded_by"]) for h in history] == [(chain["new"], newest), (chain["old"], chain["new"])]
    assert history[0]["change"] == chain["change"] and all(h["superseded"] for h in history)


def test_an_archived_head_retires_its_chain(chain: dict[str, str], repo: Path, cli: Callable[..., CliResult]) -> None:
    code, _, err = cli("update", "--type", "archive", "--memory", chain["new"], "--evidence",
                       "user:we dropped Postgres", cwd=repo)
    assert code == 0, err
    for query in (OLD, NEW):
        got = chain_ids(lib_read(repo, query))
        assert chain["old"] not in got and chain["new"] not in got, got


def test_a_global_fact_superseded_in_the_repo(repo: Path, cli: Callable[..., CliResult]) -> None:
    # autonomous: the global fact is committed at once (review mode proposes it: test_pending.py)
    ws = open_workspace(cwd=repo, env={**os.environ, "MEMSTORE_WRITE_MODE": "autonomous"})
    old = api.write(ws, write_req("fact", "Our services format Python with black at line length 88.",
                                  scope="global"))["id"]
    ws = reopen(repo)
    new = api.write(ws, write_req("fact", "This repo formats Python with ruff format at line length 110, not black.",
                                  links={"supersedes": [old]}))["id"]
    query = "format Python with black"
    results = read(cli, repo, query)
    facts = [r for r in results if r["kind"] == "fact"]
    assert [r["id"] for r in facts] == [new]
    assert [(h["id"], h["scope"]) for h in facts[0]["history"]] == [(old, "global")]
    # without the global store the old fact is out of scope: the head stands alone
    local = [r for r in lib_read(repo, query, include_global=False) if r["kind"] == "fact"]
    assert [r["id"] for r in local] == [new] and local[0]["history"] == []


def test_text_output_marks_the_history(chain: dict[str, str], repo: Path) -> None:
    answer = retrieve.read(reopen(repo), {"query": OLD}, log_episode=False)
    text = pretty(answer, "read")
    assert f"superseded {chain['old'][:10]} (replaced by {chain['new'][:10]}" in text
    assert text.index(NEW) < text.index(OLD)
