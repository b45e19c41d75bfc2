"""store/validate.py rule by rule, in process: each gate a write or an update passes through,
at each edge (exactly at a limit and one past it) and each branch of its conditions, with the
error a caller is shown (code, field, message). The CLI paths of the same rules are in
test_write.py and test_links.py; this file is what bench/mutation.py runs first for the module
(no CLI subprocess: the whole file takes seconds).

The repos, the global store and their memories are made once for the module (the gates only
read them); each test opens its own workspace on them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import git, make_git_repo, store_files, write_req
from moduleworld import hermetic_env

from memstore.errors import IntegrityError, MemstoreError, SchemaError, SecretError, SemanticError
from memstore.store.config import Config
from memstore.store.model import parse_evidence
from memstore.store.validate import (
    check_chars,
    check_evidence_exists,
    check_file_text,
    check_schema,
    check_secrets,
    check_text,
    check_write_semantics,
    resolve_link,
    resolve_relations,
    resolve_write_links,
)
from memstore.store.workspace import Workspace, open_workspace
from memstore.verbs import api

AWS_KEY = "AKIA" + "Q3EGRAV7PLM2XT5B"  # assembled so secret scanners leave this file alone
EPISODE = "01m7qfe3t1b183v60j1k2n9k5t"
CONFIG = Config()  # the defaults: text 4000, rationale 2000, 50 evidence refs


@dataclass
class World:
    repo: Path
    env: dict[str, str]
    outside: Path  # a folder in no git repository
    ids: dict[str, str]
    first_sha: str  # the commit before the worktree's files were added

    def ws(self) -> Workspace:
        return open_workspace(cwd=self.repo, env=self.env)

    def ws_outside(self) -> Workspace:
        return open_workspace(cwd=self.outside, env=self.env)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One repo and one global store, built under the same hermetic settings conftest gives a
    test (the module fixture is set up before the per-test one)."""
    base = tmp_path_factory.mktemp("validate-world")
    with hermetic_env(base) as env:
        repo = make_git_repo(base / "repo")
        first = git(repo, "rev-parse", "HEAD").strip()
        src = repo / "src"
        (src / "gone.py").write_text("x = 1\n")  # committed, then deleted from the work tree
        (src / "grown.py").write_text("a = 1\nb = 2\n")  # two lines committed, five in the work tree
        git(repo, "add", "src")
        git(repo, "commit", "-q", "-m", "more files")
        (src / "gone.py").unlink()
        (src / "grown.py").write_text("a = 1\nb = 2\nc = 3\nd = 4\ne = 5\n")
        (src / "new.py").write_text("fresh = True\n")  # in the work tree only
        (src / "two.py").write_text("a = 1\nb = 2")  # two lines, the last without a newline
        (src / "empty.py").write_text("")
        (base / "secret.py").write_text("print('outside')\n")
        (src / "link.py").symlink_to(base / "secret.py")
        api.init(open_workspace(cwd=repo))
        ep = repo / ".memory" / "episodes" / "2026-11" / f"{EPISODE}.jsonl"
        ep.parent.mkdir(parents=True)
        ep.write_text(json.dumps({"episode": EPISODE}) + "\n" + json.dumps({"seq": 1, "content": "hi"}) + "\n")

        def put(kind: str, text: str, scope: str = "repo", **links: Any) -> str:
            ws = open_workspace(cwd=repo, env={**env, "MEMSTORE_WRITE_MODE": "autonomous"})
            return str(api.write(ws, write_req(kind, text, scope=scope, links=links or None))["id"])

        ids = {"problem": put("problem", "Webhook retries flake under load"),
               "fact": put("fact", "Webhooks retry with exponential backoff")}
        ids["change"] = put("change", "Moved webhook delivery onto the job queue", change_targets=[ids["fact"]])
        # relates_to reads both ways; depends_on does not
        ids["relates"] = put("fact", "The job queue is Redis-backed",
                             relations=[{"type": "relates_to", "id": ids["fact"]}])
        ids["depends"] = put("fact", "Retry delays assume the job queue",
                             relations=[{"type": "depends_on", "id": ids["fact"]}])
        ids["gproblem"] = put("problem", "Editors reformat YAML on save", scope="global")
        ids["gpref"] = put("preference", "Prefer small focused commits", scope="global")
        outside = base / "outside"
        outside.mkdir()
        yield World(repo=repo, env=env, outside=outside, ids=ids, first_sha=first)


def _fact(**over: Any) -> dict[str, Any]:
    memory: dict[str, Any] = {"kind": "fact", "scope": "repo", "text": "A perfectly fine fact.",
                              "evidence_refs": ["user:ok"]}
    memory.update(over)
    return memory


def _refused(exc: pytest.ExceptionInfo[MemstoreError]) -> tuple[str, str | None, str]:
    return exc.value.code, exc.value.field, exc.value.message


# -- check_schema: the request's shape -----------------------------------------------------------
def test_a_request_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(SchemaError) as exc:
        check_schema("write", [1, 2])
    assert _refused(exc) == ("schema", "", "the request must be a JSON object")


def test_a_well_formed_request_passes_the_schema() -> None:
    assert check_schema("write", {"op": "write", "memory": _fact()}) is None


def test_one_schema_problem_is_named_with_its_field() -> None:
    with pytest.raises(SchemaError) as exc:
        check_schema("write", {"op": "write", "memory": _fact(text="")})
    assert _refused(exc) == ("schema", "memory.text", "memory.text: must not be empty")


def test_a_field_with_two_problems_is_named_once() -> None:
    with pytest.raises(SchemaError) as exc:
        check_schema("read", {"query": ""})
    assert _refused(exc) == ("schema", "query", "query: must not be empty")


BAD_FIVE = {"kind": "idea", "scope": "team", "text": "", "evidence_refs": "user:x", "tags": 3}
SCOPE = 'memory.scope: must be "repo", "global" or "shared:NAME" (NAME an attached shared store); got "team"'
KIND = ('memory.kind: must be one of "problem", "solution", "failed_tactic", "fact", "preference", "change"; '
        'got "idea"')


def test_five_schema_problems_are_all_named() -> None:
    with pytest.raises(SchemaError) as exc:
        check_schema("write", {"op": "write", "memory": BAD_FIVE})
    assert _refused(exc) == ("schema", "memory.text", "; ".join([
        "memory.text: must not be empty", SCOPE, KIND, "memory.tags: must be an array, not an integer",
        "memory.evidence_refs: must be an array, not a string"]))


def test_past_five_schema_problems_the_rest_are_counted() -> None:
    with pytest.raises(SchemaError) as exc:
        check_schema("write", {"op": "write", "memory": {**BAD_FIVE, "confidence": 5}})
    assert _refused(exc) == ("schema", "memory.text", "; ".join([
        "memory.text: must not be empty", SCOPE, KIND, "memory.confidence: must be between 0 and 1; got 5",
        "memory.tags: must be an array, not an integer", "and 1 more"]))


# -- check_text, check_chars, check_secrets, check_file_text ----------------------------------------
def test_text_at_the_cap_passes_and_one_past_it_is_refused() -> None:
    assert check_text("x" * 4000, CONFIG, "memory.text") is None
    with pytest.raises(SemanticError) as exc:
        check_text("x" * 4001, CONFIG, "memory.text")
    assert _refused(exc) == ("too_large", "memory.text",
                             "text is 4001 characters; the cap is 4000 (limits.max_text_chars)")


def test_the_text_cap_follows_the_setting() -> None:
    small = Config().with_overrides({"limits": {"max_text_chars": 10}})
    assert check_text("x" * 10, small, "text") is None
    with pytest.raises(SemanticError, match="the cap is 10"):
        check_text("x" * 11, small, "text")


def test_blank_text_is_refused_and_one_character_passes() -> None:
    with pytest.raises(SemanticError) as exc:
        check_text(" \n\t", CONFIG, "memory.text")
    assert _refused(exc) == ("empty_text", "memory.text", "text is empty")
    assert check_text(" x ", CONFIG, "memory.text") is None


def test_a_control_character_is_refused_in_the_field_that_holds_it() -> None:
    assert check_chars({"a": "fine", "b": "also fine"}) is None
    with pytest.raises(SemanticError) as exc:
        check_chars({"a": "fine", "b": "red \x1b[31m text"})
    assert exc.value.code == "bad_chars" and exc.value.field == "b" and "U+001B" in exc.value.message


def test_a_secret_is_refused_in_the_field_that_holds_it_and_not_echoed() -> None:
    assert check_secrets({"memory.text": "no secret here", "memory.author": ""}) is None
    with pytest.raises(SecretError) as exc:
        check_secrets({"memory.text": "", "memory.rationale": "fine", "memory.author": f"ops {AWS_KEY}"})
    code, field, message = _refused(exc)
    assert (code, field) == ("secret", "memory.author") and AWS_KEY not in message
    assert message.startswith("memory.author looks like it contains a secret (aws_access_key: AKIA…XT5B)")


def test_the_first_secret_of_a_field_is_the_one_named() -> None:
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    with pytest.raises(SecretError, match=r"\(github_token: "):
        check_secrets({"memory.text": f"{token} and {AWS_KEY}"})


def test_a_file_with_a_secret_is_refused_naming_its_line() -> None:
    with pytest.raises(SecretError) as exc:
        check_file_text(f"---\nkind: fact\n# key {AWS_KEY}\n---\nBody.\n", "facts/x.md")
    code, field, message = _refused(exc)
    assert (code, field) == ("secret", "facts/x.md")
    assert message.startswith("facts/x.md looks like it contains a secret on line 3 (aws_access_key: AKIA…XT5B)")


def test_a_file_with_a_control_character_is_refused_and_a_clean_one_passes() -> None:
    assert check_file_text("---\nkind: fact\n---\nBody.\n", "facts/x.md") is None
    with pytest.raises(SemanticError) as exc:
        check_file_text("---\nkind: fact\n---\nBo\x00dy.\n", "facts/x.md")
    assert exc.value.code == "bad_chars" and exc.value.field == "facts/x.md"


# -- check_write_semantics: the kind rules and the caps -----------------------------------------------
def _semantic_error(memory: dict[str, Any]) -> tuple[str, str | None, str]:
    with pytest.raises(SemanticError) as exc:
        check_write_semantics(memory, CONFIG)
    return _refused(exc)


def test_a_plain_fact_passes_and_its_refs_come_back_parsed() -> None:
    refs = check_write_semantics(_fact(evidence_refs=["user:ok", "file:src/app.py#L1-L2"]), CONFIG)
    assert [(r.kind, r.path, r.lines) for r in refs] == [("user", None, None), ("file", "src/app.py", (1, 2))]


def test_rationale_at_the_cap_passes_and_one_past_it_is_refused() -> None:
    check_write_semantics(_fact(rationale="r" * 2000), CONFIG)
    assert _semantic_error(_fact(rationale="r" * 2001)) == (
        "too_large", "memory.rationale", "rationale is 2001 characters; the cap is 2000")


def test_evidence_at_the_cap_passes_and_one_past_it_is_refused() -> None:
    check_write_semantics(_fact(evidence_refs=[f"user:said {i}" for i in range(50)]), CONFIG)
    assert _semantic_error(_fact(evidence_refs=[f"user:said {i}" for i in range(51)])) == (
        "too_large", "memory.evidence_refs", "51 evidence refs; at most 50")


def test_a_memory_without_evidence_is_refused() -> None:
    code, field, _ = _semantic_error(_fact(evidence_refs=[]))
    assert (code, field) == ("missing_evidence", "memory.evidence_refs")


def test_the_text_rules_apply_to_the_memory_text() -> None:
    assert _semantic_error(_fact(text="   "))[:2] == ("empty_text", "memory.text")
    assert _semantic_error(_fact(text="x" * 4001))[:2] == ("too_large", "memory.text")


@pytest.mark.parametrize("kind", ["solution", "failed_tactic"])
def test_a_solution_or_tactic_must_link_its_problem(kind: str) -> None:
    assert _semantic_error(_fact(kind=kind)) == (
        "missing_link", "memory.links.problem_id", f"a {kind} must link the problem it addresses (links.problem_id)")
    check_write_semantics(_fact(kind=kind, links={"problem_id": "01abcdef"}), CONFIG)


def test_a_change_must_name_its_targets() -> None:
    assert _semantic_error(_fact(kind="change"))[:2] == ("missing_link", "memory.links.change_targets")
    check_write_semantics(_fact(kind="change", links={"change_targets": ["01abcdef"]}), CONFIG)


@pytest.mark.parametrize("kind", ["problem", "fact", "preference"])
def test_kinds_with_no_required_link_pass_without_links(kind: str) -> None:
    check_write_semantics(_fact(kind=kind), CONFIG)


def test_only_solutions_and_tactics_link_a_problem() -> None:
    assert _semantic_error(_fact(links={"problem_id": "01abcdef"})) == (
        "bad_link", "memory.links.problem_id", "only solutions and failed tactics link a problem, not a fact")


@pytest.mark.parametrize("links", [{"supersedes": ["01abcdef"]}, {"via_change": "01abcdef"}])
def test_only_facts_supersede(links: dict[str, Any]) -> None:
    assert _semantic_error(_fact(kind="preference", links=links)) == (
        "bad_link", "memory.links.supersedes", "only facts supersede other facts")


def test_a_fact_supersedes_with_or_without_a_change_but_via_change_needs_supersedes() -> None:
    check_write_semantics(_fact(links={"supersedes": ["01abcdef"]}), CONFIG)
    check_write_semantics(_fact(links={"supersedes": ["01abcdef"], "via_change": "01bcdefa"}), CONFIG)
    assert _semantic_error(_fact(links={"via_change": "01bcdefa"})) == (
        "bad_link", "memory.links.via_change", "via_change goes with supersedes")


@pytest.mark.parametrize(("over", "field"), [
    ({"author": f"ops {AWS_KEY}"}, "memory.author"),
    ({"tags": ["ci", AWS_KEY]}, "memory.tags[1]"),
    ({"rationale": f"seen as {AWS_KEY}"}, "memory.rationale"),
    ({"evidence_refs": ["user:ok", f"user:use {AWS_KEY}"]}, "memory.evidence_refs[1]"),
])
def test_a_secret_in_any_stored_field_is_refused(over: dict[str, Any], field: str) -> None:
    with pytest.raises(SecretError) as exc:
        check_write_semantics(_fact(**over), CONFIG)
    assert exc.value.field == field


def test_author_and_tags_pass_when_clean() -> None:
    check_write_semantics(_fact(author="dana", tags=["ci", "deploy"]), CONFIG)


def test_a_malformed_evidence_ref_names_its_index() -> None:
    code, field, _ = _semantic_error(_fact(evidence_refs=["user:ok", "ticket:123"]))
    assert (code, field) == ("bad_evidence", "memory.evidence_refs[1]")


# -- links: resolve_write_links, resolve_link ---------------------------------------------------------
def _integrity_error(call: Any) -> tuple[str, str | None, str]:
    with pytest.raises(IntegrityError) as exc:
        call()
    return _refused(exc)


def test_a_write_without_links_resolves_to_none(world: World) -> None:
    assert resolve_write_links(world.ws(), _fact()) == {}


def test_every_link_of_a_write_resolves_to_full_ids(world: World) -> None:
    i = world.ids
    memory = _fact(kind="solution", links={"problem_id": i["problem"][:20],
                                           "related": [i["fact"][:20], i["fact"]],
                                           "relations": [{"type": "depends_on", "id": i["change"][:20]}]})
    assert resolve_write_links(world.ws(), memory) == {
        "problem": i["problem"], "related": [i["fact"]],
        "relations": [{"type": "depends_on", "id": i["change"]}]}


def test_change_targets_supersedes_and_via_change_resolve(world: World) -> None:
    i = world.ids
    assert resolve_write_links(world.ws(), _fact(kind="change", links={"change_targets": [i["fact"][:20]]})) == {
        "change_targets": [i["fact"]]}
    assert resolve_write_links(world.ws(), _fact(links={"supersedes": [i["fact"]], "via_change": i["change"]})) == {
        "supersedes": [i["fact"]], "via_change": i["change"]}


def test_a_link_to_a_missing_id_is_refused(world: World) -> None:
    memory = _fact(kind="solution", links={"problem_id": "01zzzzzzzzzzzzzzzzzzzzzzzz"})
    assert _integrity_error(lambda: resolve_write_links(world.ws(), memory)) == (
        "unknown_link", "memory.links.problem_id", "no memory with id '01zzzzzzzzzzzzzzzzzzzzzzzz' to link to")


def test_a_link_to_the_wrong_kind_is_refused(world: World) -> None:
    i = world.ids
    cases = [
        (_fact(kind="solution", links={"problem_id": i["fact"]}), "memory.links.problem_id",
         f"memory.links.problem_id must be a problem, but {i['fact']} is a fact"),
        (_fact(links={"supersedes": [i["problem"]]}), "memory.links.supersedes[0]",
         f"memory.links.supersedes[0] must be a fact, but {i['problem']} is a problem"),
        (_fact(links={"supersedes": [i["fact"]], "via_change": i["fact"]}), "memory.links.via_change",
         f"memory.links.via_change must be a change, but {i['fact']} is a fact"),
    ]
    for memory, field, message in cases:
        assert _integrity_error(lambda m=memory: resolve_write_links(world.ws(), m)) == ("wrong_kind", field, message)


def test_a_repo_memory_links_global_memories_and_a_global_one_only_global_ones(world: World) -> None:
    i = world.ids
    ws = world.ws()
    assert resolve_link(ws, i["gproblem"], "repo", "f", ("problem",)).id == i["gproblem"]
    assert resolve_link(ws, i["gproblem"], "global", "f", ("problem",)).id == i["gproblem"]
    assert resolve_link(ws, i["fact"], "repo", "f", None).id == i["fact"]
    code, field, message = _integrity_error(lambda: resolve_link(ws, i["problem"], "global", "f", ("problem",)))
    assert (code, field) == ("global_to_repo", "f")
    assert message.startswith(f"{i['problem']} is a repo memory; a global memory may not link to a repo memory")


def test_outside_a_repo_a_global_link_to_a_missing_id_is_unknown(world: World) -> None:
    ws = world.ws_outside()
    assert ws.repo is None
    assert resolve_link(ws, world.ids["gpref"], "global", "f", None).id == world.ids["gpref"]
    assert _integrity_error(lambda: resolve_link(ws, "01zzzzzzzz", "global", "f", None))[:2] == ("unknown_link", "f")
    # a repo memory's link is looked up all the same (the missing repo store is refused later)
    assert _integrity_error(lambda: resolve_link(ws, "01zzzzzzzz", "repo", "f", None))[:2] == ("unknown_link", "f")


def test_a_global_write_linking_a_repo_memory_is_refused_and_nothing_written(world: World) -> None:
    before = store_files(world.repo)
    home = Path(world.env["MEMSTORE_HOME"])
    global_before = {p for p in home.rglob("*") if ".index" not in p.parts}
    req = write_req("preference", "Parse timestamps as UTC", scope="global",
                    links={"relations": [{"type": "depends_on", "id": world.ids["fact"]}]})
    with pytest.raises(IntegrityError) as exc:
        api.write(world.ws(), req)
    assert (exc.value.code, exc.value.field) == ("global_to_repo", "memory.links.relations[0].id")
    assert store_files(world.repo) == before
    assert {p for p in home.rglob("*") if ".index" not in p.parts} == global_before


# -- typed links: resolve_relations --------------------------------------------------------------------
def _relations(world: World, items: list[dict[str, str]], source: str | None = None,
               existing: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    ws = world.ws()
    current: dict[str, list[tuple[str, str]]] | None = None
    if source is not None:
        current = {m.id: m.relations() for m in ws.catalog("repo").memories.values()}
    return resolve_relations(ws, items, "repo", "relation" if source else "memory.links.relations",
                             existing or [], source, current)


def test_a_new_typed_link_resolves(world: World) -> None:
    i = world.ids
    assert _relations(world, [{"type": "contradicts", "id": i["fact"][:20]}]) == [("contradicts", i["fact"])]
    assert _relations(world, [{"type": "relates_to", "id": i["problem"]}], source=i["fact"]) == [
        ("relates_to", i["problem"])]


def test_a_memory_cannot_link_itself(world: World) -> None:
    fact = world.ids["fact"]
    assert _integrity_error(lambda: _relations(world, [{"type": "relates_to", "id": fact}], source=fact)) == (
        "self_link", "relation.id", f"{fact} cannot be linked to itself")


def test_a_link_the_memory_has_is_a_duplicate(world: World) -> None:
    i = world.ids
    item = [{"type": "relates_to", "id": i["fact"]}]
    assert _integrity_error(lambda: _relations(world, item, source=i["relates"],
                                               existing=[("relates_to", i["fact"])])) == (
        "duplicate_link", "relation.id", f"{i['relates']} already relates_to {i['fact']}")
    # on a write, the same link twice in the request (or beside `related`)
    assert _integrity_error(lambda: _relations(world, item * 2)) == (
        "duplicate_link", "memory.links.relations[1].id", f"the memory already relates_to {i['fact']}")


def test_a_symmetric_link_exists_from_either_end(world: World) -> None:
    i = world.ids
    assert _integrity_error(lambda: _relations(world, [{"type": "relates_to", "id": i["relates"]}],
                                               source=i["fact"])) == (
        "duplicate_link", "relation.id", f"{i['relates']} already relates_to {i['fact']} (the link reads both ways)")


def test_a_directed_link_back_is_a_new_link(world: World) -> None:
    i = world.ids
    assert _relations(world, [{"type": "depends_on", "id": i["depends"]}], source=i["fact"]) == [
        ("depends_on", i["depends"])]


# -- evidence: check_evidence_exists -------------------------------------------------------------------
def _evidence(world: World, *raw: str, ws: Workspace | None = None, scope: str = "repo") -> list[str]:
    return check_evidence_exists(ws or world.ws(), [parse_evidence(r) for r in raw], scope, "ev")


def _evidence_error(world: World, raw: str, ws: Workspace | None = None) -> tuple[str, str | None, str]:
    with pytest.raises(MemstoreError) as exc:
        _evidence(world, "user:ok", raw, ws=ws)
    return _refused(exc)


def test_real_evidence_of_every_kind_passes(world: World) -> None:
    head = git(world.repo, "rev-parse", "HEAD").strip()
    refs = ["user:said so", "file:src/app.py", f"commit:{head}", f"event:{EPISODE}:1", "url:https://example.com/a"]
    assert _evidence(world, *refs) == refs


def test_memory_evidence_is_stored_as_the_full_id(world: World) -> None:
    fact = world.ids["fact"]
    assert _evidence(world, f"memory:{fact[:20]}", "user:ok") == [f"memory:{fact}", "user:ok"]


def test_memory_evidence_must_exist(world: World) -> None:
    assert _evidence_error(world, "memory:01zzzzzzzz")[:2] == ("unknown_link", "ev[1]")


@pytest.mark.parametrize(("raw", "code", "message"), [
    ("file:src/nope.py", "evidence_not_found", "file:src/nope.py: no such file in the repository"),
    ("file:src/link.py", "bad_evidence", "file:src/link.py: path leaves the repository"),
    ("file:src/app.py@v9.9.9", "evidence_not_found", "file:src/app.py@v9.9.9: revision 'v9.9.9' does not resolve"),
    ("file:src/nope.py@HEAD", "evidence_not_found", "file:src/nope.py@HEAD: no such file at HEAD"),
    ("commit:deadbeefdeadbeef", "evidence_not_found", "commit:deadbeefdeadbeef: no such commit"),
    (f"event:{EPISODE}:2", "evidence_not_found", f"event:{EPISODE}:2: episode has no event 2"),
    ("event:01m7qfe3t1b183v60j1k2n9kzz:1", "evidence_not_found",
     "event:01m7qfe3t1b183v60j1k2n9kzz:1: no such episode"),
])
def test_evidence_that_points_at_nothing_is_refused(world: World, raw: str, code: str, message: str) -> None:
    assert _evidence_error(world, raw) == (code, "ev[1]", message)


def test_a_file_at_a_rev_may_be_gone_from_the_work_tree_or_new_in_it(world: World) -> None:
    refs = ["file:src/gone.py@HEAD", "file:src/new.py@HEAD", f"file:src/app.py@{world.first_sha[:20]}"]
    assert _evidence(world, *refs) == refs
    assert _evidence_error(world, f"file:src/gone.py@{world.first_sha[:20]}")[:2] == ("evidence_not_found", "ev[1]")


def test_file_evidence_outside_a_repo_is_refused(world: World) -> None:
    ws = world.ws_outside()
    assert _evidence_error(world, "file:src/app.py", ws=ws) == (
        "evidence_not_found", "ev[1]", "file:src/app.py: file evidence needs a git work tree to point into")


def test_commit_evidence_outside_a_repo_resolves_in_the_global_store(world: World) -> None:
    ws = world.ws_outside()
    home = Path(world.env["MEMSTORE_HOME"])
    ref = f"commit:{git(home, 'rev-parse', 'HEAD').strip()}"
    assert _evidence(world, ref, ws=ws, scope="global") == [ref]
    repo_head = git(world.repo, "rev-parse", "HEAD").strip()
    assert _evidence_error(world, f"commit:{repo_head}", ws=ws)[:2] == ("evidence_not_found", "ev[1]")


def test_a_global_memory_may_cite_a_repo_episode(world: World) -> None:
    assert _evidence(world, f"event:{EPISODE}:1", scope="global") == [f"event:{EPISODE}:1"]


# -- line ranges: _check_line_range --------------------------------------------------------------------
@pytest.mark.parametrize("raw", [
    "file:src/app.py#L1-L2",  # the last line, newline-terminated
    "file:src/app.py#L2",
    "file:src/two.py#L2-L2",  # the last line without a newline still counts
    "file:src/grown.py#L3-L5",  # the work tree's lines when no rev is named
    "file:src/grown.py@HEAD#L1-L2",
    "file:src/gone.py@HEAD#L1-L1",  # read at the rev: the work tree no longer has it
])
def test_a_range_inside_the_file_passes(world: World, raw: str) -> None:
    assert _evidence(world, raw) == [raw]


@pytest.mark.parametrize(("raw", "message"), [
    ("file:src/app.py#L1-L3", "line 3 is past the end of src/app.py (2 lines)"),
    ("file:src/two.py#L2-L3", "line 3 is past the end of src/two.py (2 lines)"),
    ("file:src/empty.py#L1-L1", "line 1 is past the end of src/empty.py (0 lines)"),
    ("file:src/grown.py@HEAD#L1-L3", "line 3 is past the end of src/grown.py (2 lines)"),
])
def test_a_range_past_the_end_is_refused(world: World, raw: str, message: str) -> None:
    assert _evidence_error(world, raw) == ("bad_evidence", "ev[1]", f"{raw}: {message}")
