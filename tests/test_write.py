"""write: every kind's success path, dry runs, the global store, and every class of bad input
refused with a typed error and nothing written."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import CliResult, git, reopen, staged, store_files, write_req

from memstore.store.files import parse_markdown
from memstore.store.workspace import Workspace, open_workspace
from memstore.verbs import api

AWS_KEY = "AKIA" + "Q3EGRAV7PLM2XT5B"  # assembled so secret scanners leave this file alone
PEM = "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq0\n-----END RSA PRIVATE KEY-----"
EPISODE = "01m7qfe3t1b183v60j1k2n9k5t"


def _written(repo: Path, before: set[str]) -> list[str]:
    return sorted(store_files(repo) - before)


def _meta(repo: Path, path: str) -> tuple[dict[str, Any], str]:
    return parse_markdown((repo / path).read_text())


def test_problem_is_written_staged_with_frontmatter(ws: Workspace, repo: Path) -> None:
    before = store_files(repo)
    ans = api.write(ws, write_req("problem", "pytest -n 8 fails: too many clients", evidence=["file:src/app.py"],
                                  memory_extra={"confidence": 0.8, "rationale": "hit twice", "tags": ["pytest"]}),
                    author="claude-code")
    assert ans["ok"] and ans["kind"] == "problem" and ans["scope"] == "repo" and ans["mode"] == "review"
    assert _written(repo, before) == [ans["path"].removeprefix(".memory/")]
    assert ans["path"].startswith(f".memory/problems/{ans['id']}-")
    meta, body = _meta(repo, ans["path"])
    assert meta["id"] == ans["id"] and meta["kind"] == "problem" and meta["scope"] == "repo"
    assert meta["author"] == "claude-code" and meta["confidence"] == 0.8 and meta["rationale"] == "hit twice"
    assert meta["evidence"] == ["file:src/app.py"] and meta["tags"] == ["pytest"]
    assert meta["created"].endswith("Z")
    assert body == "pytest -n 8 fails: too many clients"
    assert ans["path"] in staged(repo)


def test_linked_kinds_in_their_folders(ws: Workspace, repo: Path) -> None:
    problem = api.write(ws, write_req("problem", "Alembic upgrade fails: column exists"))["id"]
    before = store_files(repo)
    sol = api.write(ws, write_req("solution", "Build the test schema with alembic, not create_all",
                                  links={"problem_id": problem[:8]}))
    ft = api.write(ws, write_req("failed_tactic", "Recreating the test database does not help",
                                 links={"problem_id": problem}))
    assert _written(repo, before) == sorted([sol["path"].removeprefix(".memory/"),
                                             ft["path"].removeprefix(".memory/")])
    assert sol["path"].startswith(".memory/solutions/") and ft["path"].startswith(".memory/failed_tactics/")
    # A prefix in the request is stored as the full id.
    assert _meta(repo, sol["path"])[0]["links"] == {"problem": problem}
    assert _meta(repo, ft["path"])[0]["links"] == {"problem": problem}
    assert {sol["path"], ft["path"]} <= staged(repo)
    shown = api.show(reopen(repo), problem)["memory"]["derived"]
    assert shown["solutions"] == [sol["id"]] and shown["failed_tactics"] == [ft["id"]]


def test_fact_preference_change_and_supersession(ws: Workspace, repo: Path) -> None:
    old = api.write(ws, write_req("fact", "The DB driver is asyncpg."))
    pref = api.write(ws, write_req("preference", "Run pytest with -x."))
    change = api.write(ws, write_req("change", "Switched the DB driver from asyncpg to psycopg 3.",
                                     links={"change_targets": [old["id"]]}))
    new = api.write(ws, write_req("fact", "The DB driver is psycopg 3.",
                                  links={"supersedes": [old["id"]], "via_change": change["id"]}))
    assert old["path"].startswith(".memory/facts/") and pref["path"].startswith(".memory/preferences/")
    assert change["path"].startswith(".memory/changes/") and new["path"].startswith(".memory/facts/")
    assert _meta(repo, change["path"])[0]["links"] == {"change_targets": [old["id"]]}
    assert _meta(repo, new["path"])[0]["links"] == {"supersedes": [old["id"]], "via_change": change["id"]}
    assert {a["path"] for a in (old, pref, change, new)} <= staged(repo)
    derived = api.show(reopen(repo), old["id"])["memory"]["derived"]
    assert derived["superseded_by"] == new["id"] and derived["head"] == new["id"]
    assert derived["changes"] == [change["id"]]


def test_dry_run_returns_content_and_writes_nothing(ws: Workspace, repo: Path) -> None:
    before, index_before = store_files(repo), staged(repo)
    ans = api.write(ws, {**write_req("fact", "Config lives in settings.toml."), "mode": "dry_run"})
    assert ans["ok"] and ans["mode"] == "dry_run"
    meta, body = parse_markdown(ans["content"])
    assert meta["id"] == ans["id"] and body == "Config lives in settings.toml."
    assert store_files(repo) == before
    assert staged(repo) == index_before
    assert api.list_memories(reopen(repo))["count"] == 0


def test_global_scope_writes_a_committed_global_store(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home" / ".memory"
    # autonomous: committed at once (review mode proposes it first: tests/test_pending.py)
    ws = open_workspace(cwd=repo, env={**os.environ, "MEMSTORE_WRITE_MODE": "autonomous"})
    ans = api.write(ws, write_req("preference", "Prefer small focused commits.", scope="global"))
    assert ans["scope"] == "global"
    assert (home / ".git").is_dir()
    files = [p for p in (home / "preferences").glob("*.md")]
    assert [f.name for f in files] == [Path(ans["path"]).name]
    assert git(home, "status", "--porcelain") == ""  # committed, not just staged
    assert f"preferences/{files[0].name}" in git(home, "log", "--name-only", "--format=")
    assert not any(p.startswith("preferences/0") for p in store_files(repo))
    # A repo read sees it alongside repo memories.
    assert [m["id"] for m in api.list_memories(reopen(repo))["memories"]] == [ans["id"]]


def test_author_from_request_wins(ws: Workspace, repo: Path) -> None:
    ans = api.write(ws, write_req("fact", "Docs are built with mkdocs.", memory_extra={"author": "dana"}),
                    author="agent")
    assert _meta(repo, ans["path"])[0]["author"] == "dana"


def test_exact_duplicate_is_refused_with_a_suggestion(ws: Workspace, repo: Path) -> None:
    first = api.write(ws, write_req("fact", "The API listens on port 8080."))
    before = store_files(repo)
    req = write_req("fact", "the API listens on port 8080!")
    del req["allow_duplicate"]
    from memstore.errors import DuplicateError

    with pytest.raises(DuplicateError) as exc:
        api.write(ws, req)
    body = exc.value.to_json()["error"]
    assert body["code"] == "duplicate" and body["duplicates"][0]["id"] == first["id"]
    assert body["suggestion"]["type"] == "utility_vote" and body["suggestion"]["memory_id"] == first["id"]
    assert store_files(repo) == before
    # allow_duplicate overrides
    assert api.write(ws, {**req, "allow_duplicate": True})["ok"]


# -- bad input: each class, through the CLI (exit code + typed error + nothing written) ----------------
@pytest.fixture
def targets(ws: Workspace, repo: Path) -> dict[str, str]:
    ep = repo / ".memory" / "episodes" / "2026-11" / f"{EPISODE}.jsonl"
    ep.parent.mkdir(parents=True)
    ep.write_text(json.dumps({"episode": EPISODE}) + "\n" + json.dumps({"seq": 1, "content": "hi"}) + "\n")
    outside = repo.parent / "outside.py"  # a file of this machine, outside the repository
    outside.write_text("print('not in the repo')\n")
    (repo / "src" / "link.py").symlink_to(outside)
    (repo / "src" / "two.py").write_text("a = 1\nb = 2")  # two lines, the last without a newline
    problem = api.write(ws, write_req("problem", "Flaky webhook retry test"))["id"]
    fact = api.write(ws, write_req("fact", "Webhooks retry with backoff"))["id"]
    return {"problem": problem, "fact": fact,
            "change": api.write(ws, write_req("change", "Moved webhooks to the queue",
                                              links={"change_targets": [fact]}))["id"]}


def _mem(**over: Any) -> dict[str, Any]:
    memory = {"kind": "fact", "scope": "repo", "text": "A perfectly fine fact.", "evidence_refs": ["user:ok"]}
    memory.update(over)
    return {"op": "write", "memory": memory, "allow_duplicate": True}


# case -> (request builder, exit code, error code, error field)
BAD: dict[str, tuple[Callable[[dict[str, str]], Any], int, str, str | None]] = {
    "wrong_type": (lambda t: _mem(confidence="high"), 2, "schema", "memory.confidence"),
    "unknown_field": (lambda t: _mem(colour="red"), 2, "schema", "memory.colour"),
    "missing_evidence": (lambda t: _mem(evidence_refs=[]), 2, "missing_evidence", "memory.evidence_refs"),
    "unknown_link": (lambda t: _mem(kind="solution", links={"problem_id": "01zzzzzzzzzzzzzzzzzzzzzzzz"}),
                     2, "unknown_link", "memory.links.problem_id"),
    "wrong_kind_link": (lambda t: _mem(kind="solution", links={"problem_id": t["fact"]}),
                        2, "wrong_kind", "memory.links.problem_id"),
    "global_to_repo": (lambda t: _mem(kind="solution", scope="global", links={"problem_id": t["problem"]}),
                       2, "global_to_repo", "memory.links.problem_id"),
    "global_related_repo": (lambda t: _mem(scope="global", links={"related": [t["fact"]]}),
                            2, "global_to_repo", "memory.links.related[0]"),
    "aws_key_in_text": (lambda t: _mem(text=f"Deploy with key {AWS_KEY} from the vault"), 2, "secret",
                        "memory.text"),
    "pem_in_text": (lambda t: _mem(text=f"The deploy key is:\n{PEM}"), 2, "secret", "memory.text"),
    "secret_in_evidence": (lambda t: _mem(evidence_refs=[f"user:use {AWS_KEY}"]), 2, "secret",
                           "memory.evidence_refs[0]"),
    "path_traversal": (lambda t: _mem(evidence_refs=["file:../etc/passwd"]), 2, "bad_evidence",
                       "memory.evidence_refs[0]"),
    "absolute_path": (lambda t: _mem(evidence_refs=["user:x", "file:/etc/passwd"]), 2, "bad_evidence",
                      "memory.evidence_refs[1]"),
    "missing_file": (lambda t: _mem(evidence_refs=["file:src/nope.py"]), 2, "evidence_not_found",
                     "memory.evidence_refs[0]"),
    "bad_file_rev": (lambda t: _mem(evidence_refs=["file:src/app.py@v9.9.9"]), 2, "evidence_not_found",
                     "memory.evidence_refs[0]"),
    "unknown_commit": (lambda t: _mem(evidence_refs=["commit:deadbeefdeadbeef"]), 2, "evidence_not_found",
                       "memory.evidence_refs[0]"),
    "missing_episode": (lambda t: _mem(evidence_refs=["event:01m7qfe3t1b183v60j1k2n9kzz:1"]), 2,
                        "evidence_not_found", "memory.evidence_refs[0]"),
    "missing_event_seq": (lambda t: _mem(evidence_refs=[f"event:{EPISODE}:99"]), 2, "evidence_not_found",
                          "memory.evidence_refs[0]"),
    "unknown_evidence_kind": (lambda t: _mem(evidence_refs=["ticket:123"]), 2, "bad_evidence",
                              "memory.evidence_refs[0]"),
    "oversized_text": (lambda t: _mem(text="x" * 4001), 2, "too_large", "memory.text"),
    "empty_text": (lambda t: _mem(text="   "), 2, "empty_text", "memory.text"),
    "missing_problem_link": (lambda t: _mem(kind="failed_tactic"), 2, "missing_link", "memory.links.problem_id"),
    "change_without_targets": (lambda t: _mem(kind="change"), 2, "missing_link", "memory.links.change_targets"),
    "bad_enum": (lambda t: _mem(kind="idea"), 2, "schema", "memory.kind"),
    "not_an_object": (lambda t: [1, 2], 2, "schema", None),
    "evidence_through_a_symlink_out_of_the_repo": (lambda t: _mem(evidence_refs=["file:src/link.py"]), 2,
                                                   "bad_evidence", "memory.evidence_refs[0]"),
    "line_range_past_the_end": (lambda t: _mem(evidence_refs=["file:src/app.py#L1-L3"]), 2, "bad_evidence",
                                "memory.evidence_refs[0]"),
    "line_range_past_an_unterminated_last_line": (lambda t: _mem(evidence_refs=["user:x", "file:src/two.py#L2-L3"]),
                                                  2, "bad_evidence", "memory.evidence_refs[1]"),
    "line_range_past_the_end_at_a_rev": (lambda t: _mem(evidence_refs=["file:src/app.py@HEAD#L2-L5"]), 2,
                                         "bad_evidence", "memory.evidence_refs[0]"),
    "file_missing_at_a_rev": (lambda t: _mem(evidence_refs=["file:src/nope.py@HEAD"]), 2, "evidence_not_found",
                              "memory.evidence_refs[0]"),
    "supersedes_a_problem": (lambda t: _mem(links={"supersedes": [t["problem"]]}), 2, "wrong_kind",
                             "memory.links.supersedes[0]"),
    "via_change_at_a_fact": (lambda t: _mem(links={"supersedes": [t["fact"]], "via_change": t["fact"]}), 2,
                             "wrong_kind", "memory.links.via_change"),
    "via_change_without_supersedes": (lambda t: _mem(links={"via_change": t["change"]}), 2, "bad_link",
                                      "memory.links.via_change"),
    "a_problem_that_supersedes": (lambda t: _mem(kind="problem", links={"supersedes": [t["fact"]]}), 2,
                                  "bad_link", "memory.links.supersedes"),
    "a_fact_linking_a_problem": (lambda t: _mem(links={"problem_id": t["problem"]}), 2, "bad_link",
                                 "memory.links.problem_id"),
    "secret_in_a_tag": (lambda t: _mem(tags=["ci", AWS_KEY]), 2, "secret", "memory.tags[1]"),
    "secret_in_the_author": (lambda t: _mem(author=f"ops {AWS_KEY}"), 2, "secret", "memory.author"),
    "secret_in_the_rationale": (lambda t: _mem(rationale=f"seen as {AWS_KEY}"), 2, "secret", "memory.rationale"),
    "rationale_over_the_cap": (lambda t: _mem(rationale="r" * 2001), 2, "too_large", "memory.rationale"),
    "escape_sequence_in_the_text": (lambda t: _mem(text="Deploys are \x1b[31mred\x1b[0m on Fridays"), 2,
                                    "bad_chars", "memory.text"),
    "undecodable_byte_in_the_rationale": (lambda t: _mem(rationale="seen in \udcff"), 2, "bad_chars",
                                          "memory.rationale"),
    "too_many_evidence_refs": (lambda t: _mem(evidence_refs=[f"user:said {i}" for i in range(51)]), 2, "too_large",
                               "memory.evidence_refs"),
}


# The edges of the checks above, accepted: a range ending on the last line (with or without a
# final newline, at a rev), exactly the caps, a change superseding through via_change.
GOOD: dict[str, Callable[[dict[str, str]], Any]] = {
    "range_ends_on_the_last_line": lambda t: _mem(evidence_refs=["file:src/app.py#L1-L2"]),
    "range_ends_on_an_unterminated_last_line": lambda t: _mem(evidence_refs=["file:src/two.py#L2-L2"]),
    "range_at_a_rev": lambda t: _mem(evidence_refs=["file:src/app.py@HEAD#L2-L2"]),
    "rationale_at_the_cap": lambda t: _mem(rationale="r" * 2000),
    "evidence_at_the_cap": lambda t: _mem(evidence_refs=[f"user:said {i}" for i in range(50)]),
    "supersedes_via_a_change": lambda t: _mem(links={"supersedes": [t["fact"]], "via_change": t["change"]}),
    "an_episode_event": lambda t: _mem(evidence_refs=[f"event:{EPISODE}:1"]),
}


@pytest.mark.parametrize("case", sorted(GOOD))
def test_the_edges_of_each_check_are_accepted(case: str, targets: dict[str, str], repo: Path,
                                              cli: Callable[..., CliResult]) -> None:
    rc, out, err = cli("write", "--json", "-", cwd=repo, input=json.dumps(GOOD[case](targets)))
    assert rc == 0 and out["ok"], (out, err)
    assert (repo / ".memory" / out["path"].removeprefix(".memory/")).is_file() or (repo / out["path"]).is_file()


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_refused_and_nothing_written(case: str, targets: dict[str, str], repo: Path,
                                                  tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    build, exit_code, code, field = BAD[case]
    before, index_before = store_files(repo), staged(repo)
    rc, out, err = cli("write", "--json", "-", cwd=repo, input=json.dumps(build(targets)))
    assert rc == exit_code, (out, err)
    assert out["ok"] is False
    assert out["error"]["code"] == code, out
    assert out["error"].get("field") == field, out
    assert "Traceback" not in err
    assert err.startswith("memstore: ")
    assert store_files(repo) == before
    assert staged(repo) == index_before
    # A refused global write leaves no global store behind either.
    assert not (tmp_path / "home" / ".memory" / "preferences").exists()


def test_secret_message_does_not_echo_the_whole_secret(targets: dict[str, str], repo: Path,
                                                       cli: Callable[..., CliResult]) -> None:
    rc, out, err = cli("write", "--json", "-", cwd=repo, input=json.dumps(_mem(text=f"key {AWS_KEY}")))
    assert rc == 2
    assert AWS_KEY not in out["error"]["message"] and AWS_KEY not in err


def test_malformed_json_on_stdin(repo: Path, cli: Callable[..., CliResult]) -> None:
    before = store_files(repo)
    rc, out, err = cli("write", "--json", "-", cwd=repo, input='{"memory": {"kind": "fact",')
    assert rc == 2
    assert out["ok"] is False and out["error"]["code"] == "invalid_json"
    assert "Traceback" not in err and "invalid_json" in err
    assert store_files(repo) == before


def test_yaml_abuse_in_a_hand_written_file_is_reported_and_list_still_works(
        ws: Workspace, repo: Path, cli: Callable[..., CliResult]) -> None:
    good = api.write(ws, write_req("fact", "Everything is fine here."))["id"]
    (repo / ".memory" / "facts" / "tags.md").write_text(
        "---\nkind: !!python/object/apply:os.system ['echo pwned']\nevidence: [user:x]\n---\nEvil.\n")
    (repo / ".memory" / "facts" / "anchors.md").write_text(
        "---\nkind: fact\na: &a [x, x]\nb: [*a, *a]\nevidence: [user:x]\n---\nBomb.\n")
    rc, out, _ = cli("check", cwd=repo)
    assert rc == 2 and out["ok"] is False
    invalid = {p["path"]: p for p in out["problems"] if p["code"] == "invalid_file"}
    assert set(invalid) == {".memory/facts/tags.md", ".memory/facts/anchors.md"}
    assert "anchors/aliases" in invalid[".memory/facts/anchors.md"]["message"]
    rc, out, _ = cli("list", cwd=repo)
    assert rc == 0
    assert [m["id"] for m in out["memories"]] == [good]
    assert {i["path"] for i in out["invalid"]} == {".memory/facts/tags.md", ".memory/facts/anchors.md"}


def test_the_library_signs_a_write_and_a_vote_as_the_cli_does(repo: Path) -> None:
    """`memstore.write` with no author is the git user, as `memstore write` is; never `unknown`."""
    import memstore

    git(repo, "config", "user.name", "Dana Reviewer")
    ws = memstore.open_workspace(cwd=repo)
    ans = memstore.write(ws, write_req("fact", "Deploys run from the release branch only."))
    assert _meta(repo, ans["path"])[0]["author"] == "Dana Reviewer"
    vote = memstore.update(ws, {"op": "update", "type": "utility_vote", "memory_id": ans["id"], "vote": 1})
    assert "author: Dana Reviewer" in (repo / vote["path"]).read_text()


def test_an_autonomous_write_answers_commit_a_review_one_review(repo: Path, ws: Workspace) -> None:
    ans = api.write(ws, write_req("fact", "Staged for review, not committed."))
    assert ans["mode"] == "review" and ws.config.write_mode == "review"
    (repo / ".memory" / "config.yaml").write_text("write_mode: autonomous\n")
    auto = reopen(repo)
    assert api.write(auto, write_req("fact", "Written freely."))["mode"] == "commit"
    assert api.write(auto, write_req("fact", "Only tried.", mode="dry_run"))["mode"] == "dry_run"
