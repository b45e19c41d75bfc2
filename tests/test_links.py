"""Typed links (links.relations): written with a memory or added by an update event, listed both
ways by `show`, placed and disputed by `read`, reported by `check`, rendered by `diff`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import CliResult, git, reopen, store_files, write_req
from mcp.client.session import ClientSession
from test_mcp import answer, ok, run_mcp

from memstore.git.review import branch_diff
from memstore.store.graph import Graph
from memstore.store.relations import anchors, place
from memstore.surfaces.output import pretty
from memstore.surfaces.render import diff as render_text
from memstore.verbs import api

UTC_FACT = "The billing API returns every timestamp in UTC with a trailing Z."
LOCAL_FACT = "The billing API returns timestamps in the server's local time zone, without an offset."
PARSE_PREF = "Parse billing API timestamps with datetime.fromisoformat after replacing the trailing Z."


def _write(repo: Path, kind: str, text: str, **links: Any) -> str:
    return api.write(reopen(repo), write_req(kind, text, links=links or None))["id"]


def _cli_write(cli: Callable[..., CliResult], repo: Path, relations: list[dict[str, str]], text: str = "A note",
               **links: Any) -> CliResult:
    req = write_req("fact", text, links={"relations": relations, **links})
    return cli("write", "--json", "-", cwd=repo, input=json.dumps(req))


def _link(cli: Callable[..., CliResult], repo: Path, source: str, kind: str, target: str) -> CliResult:
    return cli("update", "--type", "link", "--memory", source, "--link", f"{kind}:{target}",
               "--evidence", "user:the two disagree", cwd=repo)


# -- write: validation, nothing written on refusal ------------------------------------------------------
def test_a_link_to_a_missing_id_is_refused_and_nothing_is_written(repo: Path, cli: Callable[..., CliResult]) -> None:
    known = _write(repo, "fact", UTC_FACT)
    before = store_files(repo)
    code, out, err = _cli_write(cli, repo, [{"type": "relates_to", "id": known},
                                            {"type": "contradicts", "id": "01m7zzzzzzzzzzzzzzzzzzzzzz"}])
    assert code == 2, err
    assert out["error"]["code"] == "unknown_link"
    assert out["error"]["field"] == "memory.links.relations[1].id"
    assert "memstore: unknown_link:" in err
    assert store_files(repo) == before


@pytest.mark.parametrize(("relations", "code"), [
    ([{"type": "contradicts", "id": "ID"}, {"type": "contradicts", "id": "PREFIX"}], "duplicate_link"),
    ([{"type": "opposes", "id": "ID"}], "schema"),
    ([{"type": "contradicts"}], "schema"),
])
def test_bad_relations_on_write_are_refused(repo: Path, cli: Callable[..., CliResult],
                                            relations: list[dict[str, str]], code: str) -> None:
    known = _write(repo, "fact", UTC_FACT)
    for rel in relations:
        if "id" in rel:
            rel["id"] = {"ID": known, "PREFIX": known[:8]}[rel["id"]]
    before = store_files(repo)
    rc, out, _ = _cli_write(cli, repo, relations)
    assert rc == 2 and out["error"]["code"] == code, out
    assert store_files(repo) == before


def test_related_and_a_relates_to_link_to_the_same_memory_is_a_duplicate(repo: Path,
                                                                          cli: Callable[..., CliResult]) -> None:
    known = _write(repo, "fact", UTC_FACT)
    before = store_files(repo)
    rc, out, _ = _cli_write(cli, repo, [{"type": "relates_to", "id": known}], related=[known])
    assert rc == 2 and out["error"]["code"] == "duplicate_link"
    assert store_files(repo) == before


def test_a_written_link_lands_in_the_file_and_show_lists_it_both_ways(repo: Path,
                                                                     cli: Callable[..., CliResult]) -> None:
    utc = _write(repo, "fact", UTC_FACT)
    code, out, err = cli("write", "--kind", "fact", "--text", LOCAL_FACT, "--evidence", "user:saw it",
                         "--link", f"contradicts:{utc[:8]}", cwd=repo)
    assert code == 0, err
    text = (repo / out["path"]).read_text()
    assert f"relations:\n  - {{type: contradicts, id: {utc}}}" in text  # the full id, not the prefix
    _, shown, _ = cli("show", out["id"], cwd=repo)
    assert shown["memory"]["derived"]["relations"] == {
        "out": [{"type": "contradicts", "id": utc, "state": "active"}], "in": []}
    _, shown, _ = cli("show", utc, cwd=repo)
    assert shown["memory"]["derived"]["relations"] == {
        "out": [], "in": [{"type": "contradicts", "id": out["id"], "state": "active"}]}


# -- update: a link is an event; the memory's file never changes ----------------------------------------
def test_update_adds_a_link_as_an_event_and_leaves_the_memory_file_alone(repo: Path,
                                                                         cli: Callable[..., CliResult]) -> None:
    utc = _write(repo, "fact", UTC_FACT)
    pref = _write(repo, "preference", PARSE_PREF)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memories")
    files = {p: p.read_bytes() for p in (repo / ".memory").rglob("*.md")}
    code, out, err = _link(cli, repo, pref[:14], "depends_on", utc[:14])
    assert code == 0, err
    assert out["type"] == "link" and out["path"].startswith(".memory/events/")
    assert out["effect"] == {"memory_id": pref, "relations": [{"type": "depends_on", "id": utc}]}
    event = (repo / out["path"]).read_text()
    assert f"memory: {pref}" in event and "relation: depends_on" in event and f"target: {utc}" in event
    assert {p: p.read_bytes() for p in (repo / ".memory").rglob("*.md")} == files
    _, shown, _ = cli("show", utc, cwd=repo)
    assert shown["memory"]["derived"]["relations"]["in"] == [{"type": "depends_on", "id": pref, "state": "active"}]
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the link")
    code, report, _ = cli("check", cwd=repo)
    assert code == 0 and report["problems"] == []


@pytest.mark.parametrize(("case", "code"), [
    ("self", "self_link"), ("again", "duplicate_link"), ("mirror", "duplicate_link"), ("missing", "unknown_link"),
])
def test_bad_link_updates_are_refused_and_write_nothing(repo: Path, cli: Callable[..., CliResult],
                                                        case: str, code: str) -> None:
    utc = _write(repo, "fact", UTC_FACT)
    local = _write(repo, "fact", LOCAL_FACT, relations=[{"type": "contradicts", "id": utc}])
    source, target = {"self": (utc, utc), "again": (local, utc), "mirror": (utc, local),
                      "missing": (utc, "01m7zzzzzzzzzzzzzzzzzzzzzz")}[case]
    before = store_files(repo)
    rc, out, _ = _link(cli, repo, source, "contradicts", target)
    assert rc == 2 and out["error"]["code"] == code and out["error"]["field"] == "relation.id", out
    assert store_files(repo) == before


def test_a_link_update_needs_evidence(repo: Path, cli: Callable[..., CliResult]) -> None:
    utc = _write(repo, "fact", UTC_FACT)
    local = _write(repo, "fact", LOCAL_FACT)
    before = store_files(repo)
    rc, out, _ = cli("update", "--type", "link", "--memory", local, "--link", f"contradicts:{utc}", cwd=repo)
    assert rc == 2 and out["error"]["code"] == "missing_evidence"
    assert store_files(repo) == before


def test_a_global_memory_may_not_link_a_repo_memory(repo: Path, cli: Callable[..., CliResult]) -> None:
    local = _write(repo, "fact", UTC_FACT)
    before = store_files(repo)
    req = write_req("preference", PARSE_PREF, scope="global",
                    links={"relations": [{"type": "depends_on", "id": local}]})
    rc, out, _ = cli("write", "--json", "-", cwd=repo, input=json.dumps(req))
    assert rc == 2 and out["error"]["code"] == "global_to_repo"
    assert store_files(repo) == before and not (repo.parent / "home" / ".memory").exists()


def test_attachments_chain_and_a_hand_made_loop_places_nobody() -> None:
    g = Graph(relations={"b": [("elaborates_on", "a")], "c": [("depends_on", "b")], "a": [("relates_to", "c")],
                         "x": [("depends_on", "y")], "y": [("elaborates_on", "x")]})
    attached = anchors(["c", "x", "y", "b", "a"], g)
    assert attached == {"b": "a", "c": "b"}  # the x <-> y loop is cut
    assert place(["c", "x", "y", "b", "a"], attached) == ["a", "b", "c", "x", "y"]


# -- old files ---------------------------------------------------------------------------------------
def test_an_old_file_with_related_still_reads_as_relates_to(repo: Path, cli: Callable[..., CliResult]) -> None:
    utc = _write(repo, "fact", UTC_FACT)
    old = repo / ".memory" / "preferences" / "01m7y00000000000000000000a-parse.md"
    old.write_text(f"---\nid: 01m7y00000000000000000000a\nkind: preference\nscope: repo\n"
                   f"created: 2026-10-01T10:00:00Z\nauthor: someone\nlinks:\n  related: [{utc}]\n"
                   f"evidence: ['user:said so']\n---\n{PARSE_PREF}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "an older memory")
    code, shown, _ = cli("show", "01m7y00000000000000000000a", cwd=repo)
    assert code == 0
    assert shown["memory"]["derived"]["relations"]["out"] == [{"type": "relates_to", "id": utc, "state": "active"}]
    _, shown, _ = cli("show", utc, cwd=repo)
    assert shown["memory"]["derived"]["relations"]["in"] == [
        {"type": "relates_to", "id": "01m7y00000000000000000000a", "state": "active"}]
    code, report, _ = cli("check", cwd=repo)
    assert code == 0 and report["problems"] == []


# -- reads -------------------------------------------------------------------------------------------
@pytest.mark.model
def test_a_read_places_an_elaboration_right_after_its_target(repo: Path, cli: Callable[..., CliResult]) -> None:
    utc = _write(repo, "fact", UTC_FACT)
    _write(repo, "fact", "The billing API paginates with a cursor parameter named after.")
    pref = _write(repo, "preference", PARSE_PREF, relations=[{"type": "elaborates_on", "id": utc}])
    code, out, err = cli("read", "billing API timestamps UTC Z parse", cwd=repo)
    assert code == 0, err
    ids = [r["id"] for r in out["results"]]
    assert utc in ids and pref in ids, ids
    assert ids.index(pref) == ids.index(utc) + 1
    by_id = {r["id"]: r for r in out["results"]}
    assert by_id[pref]["attached_to"] == {"type": "elaborates_on", "id": utc}
    assert by_id[utc]["attached_to"] is None
    assert by_id[utc]["links"]["relations"]["in"] == [{"type": "elaborates_on", "id": pref}]
    assert out["disputes"] == []


@pytest.mark.model
def test_a_contradicting_pair_is_a_dispute_until_one_side_is_archived(repo: Path,
                                                                      cli: Callable[..., CliResult]) -> None:
    utc = _write(repo, "fact", UTC_FACT)
    local = _write(repo, "fact", LOCAL_FACT)
    _, out, _ = cli("read", "billing API timestamp time zone", cwd=repo)
    assert {utc, local} <= {r["id"] for r in out["results"]} and out["disputes"] == []
    assert _link(cli, repo, local, "contradicts", utc)[0] == 0
    _, out, _ = cli("read", "billing API timestamp time zone", cwd=repo)
    (dispute,) = out["disputes"]
    assert dispute["ids"] == [utc, local]  # older first
    assert [s["text"] for s in dispute["sides"]] == [UTC_FACT, LOCAL_FACT]
    assert all(s["author"] and s["created"] and s["evidence"] == ["user:the user said so"] for s in dispute["sides"])
    assert "settle it against the current code" in dispute["guidance"] and "change" in dispute["guidance"]
    assert "see disputes" in out["guidance"]
    text = pretty(out, "read")  # what a person sees on a terminal
    assert f"DISPUTE {utc[:10]} vs {local[:10]}" in text and "by Test Author" not in text
    assert text.index("DISPUTE") < text.index(f"  fact {local[:10]} by ")
    _, shown, _ = cli("show", utc, cwd=repo)
    assert f"  contradicts <- {local}" in pretty(shown, "show")
    code, report, _ = cli("check", cwd=repo)
    assert code == 0 and [p["code"] for p in report["problems"]] == ["open_dispute"]
    # settled against the code: the UTC fact was wrong
    cli("update", "--type", "archive", "--memory", utc, "--evidence", "user:checked the code: local", cwd=repo)
    _, out, _ = cli("read", "billing API timestamp time zone", cwd=repo)
    assert out["disputes"] == [] and utc not in {r["id"] for r in out["results"]}
    code, report, _ = cli("check", cwd=repo)
    assert code == 0 and [(p["code"], p["path"].split("/")[1]) for p in report["problems"]] == [
        ("archived_link", "events")]


@pytest.mark.model
def test_a_read_brings_the_other_side_of_a_dispute(repo: Path, cli: Callable[..., CliResult]) -> None:
    """A query worded like one side only still shows the dispute: half of one is a silent hypothesis."""
    utc = _write(repo, "fact", UTC_FACT)
    other = _write(repo, "fact", "Invoices are rendered server side; never trust the client clock.",
                   relations=[{"type": "contradicts", "id": utc}])
    _, out, _ = cli("read", "billing API timestamps UTC trailing Z", cwd=repo)
    by_id = {r["id"]: r for r in out["results"]}
    assert utc in by_id and other in by_id
    assert f"link:contradicts:{utc}" in by_id[other]["reasons"]
    assert [d["ids"] for d in out["disputes"]] == [[utc, other]]


# -- check and diff ----------------------------------------------------------------------------------
def test_check_reports_links_to_missing_memories_and_malformed_relations(repo: Path,
                                                                         cli: Callable[..., CliResult]) -> None:
    facts = repo / ".memory" / "facts"
    head = "---\nid: {id}\nkind: fact\nscope: repo\ncreated: 2026-10-01T10:00:00Z\n{links}evidence: ['user:x']\n---\n"
    (facts / "01m7y00000000000000000000b-a.md").write_text(head.format(
        id="01m7y00000000000000000000b",
        links="links:\n  relations:\n  - {type: depends_on, id: 01m7zzzzzzzzzzzzzzzzzzzzzz}\n") + "A.\n")
    (facts / "01m7y00000000000000000000c-b.md").write_text(head.format(
        id="01m7y00000000000000000000c", links="links:\n  relations:\n  - {type: opposes, id: x}\n") + "B.\n")
    (facts / "01m7y00000000000000000000d-c.md").write_text(head.format(
        id="01m7y00000000000000000000d", links="links:\n  relations: [01m7y00000000000000000000b]\n") + "C.\n")
    code, report, _ = cli("check", cwd=repo)
    assert code == 2
    found = {(p["path"].rsplit("/", 1)[-1][:27], p["code"]) for p in report["problems"]}
    assert ("01m7y00000000000000000000b-", "dangling_link") in found
    assert ("01m7y00000000000000000000c-", "invalid_file") in found
    assert ("01m7y00000000000000000000d-", "invalid_file") in found
    messages = " ".join(p["message"] for p in report["problems"])
    assert "'opposes' is not one of relates_to" in messages and "must be {type, id}" in messages


def test_diff_shows_added_links_with_the_text_they_point_at(repo: Path) -> None:
    utc = _write(repo, "fact", UTC_FACT)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a fact")
    git(repo, "checkout", "-q", "-b", "feature")
    local = _write(repo, "fact", LOCAL_FACT, relations=[{"type": "contradicts", "id": utc}])
    pref = _write(repo, "preference", PARSE_PREF)
    linked = api.update(reopen(repo), {"op": "update", "type": "link", "memory_id": pref,
                                       "relation": {"type": "depends_on", "id": utc}, "evidence_refs": ["user:x"]})
    ans = branch_diff(reopen(repo), "main")
    mems = {m["id"]: m for m in ans["memories"]}
    assert mems[local]["relations"] == [{"type": "contradicts", "id": utc, "text": UTC_FACT}]
    (event,) = ans["events"]
    assert event["id"] == linked["id"] and event["link"] == {"type": "depends_on", "id": utc, "text": UTC_FACT}
    text = render_text(ans)
    assert f"  contradicts {utc}:\n      > {UTC_FACT}" in text
    assert f"+ event {linked['id']}: link {pref} depends_on {utc}" in text
    assert f"  depends on {utc}:\n      > {UTC_FACT}" in text
    assert "relations=" not in text  # readable lines, not the raw mapping


# -- MCP -----------------------------------------------------------------------------------------------
@pytest.mark.model
def test_mcp_carries_the_same_link_shapes(repo: Path) -> None:
    async def script(s: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        utc = ok(await s.call_tool("memory_write", write_req("fact", UTC_FACT)))["id"]
        local = ok(await s.call_tool("memory_write", write_req("fact", LOCAL_FACT)))["id"]
        out["ids"] = [utc, local]
        out["before"] = store_files(repo)
        out["missing"] = await s.call_tool("memory_update", {
            "type": "link", "memory_id": local, "relation": {"type": "contradicts", "id": "01m7zzzzzzzzzzzzzzzzzzzzzz"},
            "evidence_refs": ["user:x"]})
        out["files"] = store_files(repo)
        out["link"] = ok(await s.call_tool("memory_update", {
            "type": "link", "memory_id": local, "relation": {"type": "contradicts", "id": utc},
            "evidence_refs": ["user:they disagree"]}))
        out["read"] = ok(await s.call_tool("memory_read", {"query": "billing API timestamp time zone"}))
        # later answers carry a short reminder, never without the dispute's instruction
        out["again"] = ok(await s.call_tool("memory_read", {"query": "billing API timestamp time zone"}))
        return out

    got = run_mcp(repo, script)
    utc, local = got["ids"]
    assert got["missing"].is_error and answer(got["missing"])["error"]["code"] == "unknown_link"
    assert got["files"] == got["before"]
    assert got["link"]["type"] == "link"
    assert [d["ids"] for d in got["read"]["disputes"]] == [[utc, local]]
    assert got["again"]["disputes"] and "contradict" in got["again"]["guidance"]


# -- the association chain follows typed links ----------------------------------------------------------
PGBOUNCER = "Production database connections go through pgbouncer in transaction pooling mode (deploy/pgbouncer.ini)."
PREPARED = ("Server-side prepared statements break behind a transaction-pooling proxy: a statement prepared on "
            "one server connection is missing on the next.")
PSYCOPG = "Connect with psycopg's prepare_threshold=None so psycopg 3 never prepares statements on the server."


@pytest.mark.model
def test_the_chain_reaches_what_an_author_linked_two_steps_away(repo: Path, cli: Callable[..., CliResult]) -> None:
    """pgbouncer -> prepared statements -> psycopg: three memories that belong together sit at cosine
    ~0.5 with each other, where no similarity bar both reaches them and stays quiet in a small store.
    Linked by their authors, the chain brings the two the question's words miss."""
    pool = _write(repo, "fact", PGBOUNCER)
    prep = _write(repo, "fact", PREPARED, relations=[{"type": "depends_on", "id": pool}])
    fix = _write(repo, "preference", PSYCOPG, relations=[{"type": "elaborates_on", "id": prep}])
    _write(repo, "fact", "The CI runs the test suite on Python 3.11 only.")
    query = "which pooling mode does pgbouncer run in production"
    code, out, err = cli("read", query, cwd=repo)
    assert code == 0, err
    reasons = {r["id"]: r["reasons"] for r in out["results"]}
    assert next(iter(reasons)) == pool
    assert f"link:depends_on:{pool}" in reasons[prep]
    assert f"link:elaborates_on:{prep}" in reasons[fix]
    assert all(r["score"] < out["results"][0]["score"] for r in out["results"][1:])
    # One step only: the second memory comes, the third does not; none: only the question's own.
    code, out, _ = cli("read", query, "--hops", "1", cwd=repo)
    assert [r["id"] for r in out["results"]][:2] == [pool, prep] and fix not in {r["id"] for r in out["results"]}
    code, out, _ = cli("read", query, "--hops", "0", cwd=repo)
    assert {r["id"] for r in out["results"]} == {pool}


@pytest.mark.model
def test_the_chain_does_not_pull_what_is_only_similar(repo: Path, cli: Callable[..., CliResult]) -> None:
    """Unlinked neighbours stay out unless a request asks for semantic hops."""
    pool = _write(repo, "fact", PGBOUNCER)
    prep = _write(repo, "fact", PREPARED)
    code, out, err = cli("read", "which pooling mode does pgbouncer run in production", cwd=repo)
    assert code == 0, err
    assert [r["id"] for r in out["results"]] == [pool]
    code, out, _ = cli("read", "which pooling mode does pgbouncer run in production", "--semantic-hops", "1",
                       cwd=repo)
    assert prep in {r["id"] for r in out["results"]}
