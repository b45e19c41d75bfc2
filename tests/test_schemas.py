"""The request schemas (SPEC §3): the SPEC examples pass, each class of bad input names the right field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from memstore.store.schemas import SCHEMA_NAMES, load_schema, schema_errors

ID1 = "01jd8x4k2m9q7r3t5v6w8y0z1a"
ID2 = "01jd8x4k2m9q7r3t5v6w8y0z1b"
ID3 = "01jd8x4k2m9q7r3t5v6w8y0z1c"

# SPEC §3 examples, with its "01jd..." placeholders filled in with real ids.
READ_EXAMPLE: dict[str, Any] = {
    "op": "read",
    "query": "migration fails due to existing column",
    "mode": "targeted",
    "include_global": True,
    "kinds": ["problem", "solution", "failed_tactic", "fact", "preference", "change"],
    "problem_id": None,
    "limit": 10,
    "filters": {"since": "2026-01-01", "tags": ["sqlite"]},
    "expand": {"semantic_hops": 2, "include_problem_links": True, "include_update_links": True},
}
WRITE_EXAMPLE: dict[str, Any] = {
    "op": "write",
    "mode": "commit",
    "memory": {
        "text": "Running migration X failed because column Y already exists.",
        "scope": "repo",
        "kind": "failed_tactic",
        "confidence": 0.78,
        "rationale": "Observed in this repo while fixing the migration.",
        "links": {"problem_id": ID1},
        "evidence_refs": [f"event:{ID2}:42"],
    },
}
UPDATE_EXAMPLE: dict[str, Any] = {
    "op": "update",
    "mode": "commit",
    "type": "utility_vote",
    "memory_id": ID1,
    "problem_id": ID2,
    "vote": 1,
    "confidence": 0.8,
    "rationale": "It named the exact column clash.",
    "evidence_refs": [],
}


def fields(name: str, instance: object) -> list[str]:
    return [field for field, _ in schema_errors(name, instance)]


def with_memory(**changes: Any) -> dict[str, Any]:
    request = json.loads(json.dumps(WRITE_EXAMPLE))
    request["memory"].update(changes)
    return request


# --- the schemas themselves ---------------------------------------------------------------


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    schema = load_schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def _properties(schema: Any, trail: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    if isinstance(schema, dict):
        for key, sub in schema.get("properties", {}).items():
            if sub is False:  # if/then forbids a field; its description lives at the top level
                continue
            out.append((f"{trail}{key}", sub))
            out.extend(_properties(sub, f"{trail}{key}."))
    return out


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_property_is_described(name: str) -> None:
    # They double as MCP tool input schemas, where descriptions are all an agent sees.
    schema = load_schema(name)
    assert schema.get("description")
    missing = [path for path, sub in _properties(schema) if not sub.get("description")]
    assert missing == []


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_additional_properties_are_closed_at_every_level(name: str) -> None:
    schema = load_schema(name)
    objects = [schema] + [sub for _, sub in _properties(schema) if sub.get("type") == "object"]
    assert all(obj.get("additionalProperties") is False for obj in objects)


def test_load_schema_returns_a_copy_and_unknown_names_fail() -> None:
    first = load_schema("read")
    first["properties"].clear()
    assert "query" in load_schema("read")["properties"]
    assert schema_errors("read", {"query": "x"}) == []
    with pytest.raises(ValueError, match="unknown schema"):
        load_schema("delete")
    with pytest.raises(ValueError, match="unknown schema"):
        schema_errors("delete", {})


def test_importing_does_not_import_jsonschema() -> None:
    import subprocess
    import sys

    code = "import sys, memstore.store.schemas; print('jsonschema' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --- valid requests -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "request_"),
    [
        ("read", READ_EXAMPLE),
        ("read", {"query": "x"}),
        ("read", {"query": "flaky test", "mode": "ambient", "problem_id": "01jd8x", "limit": 1}),
        ("read", {"query": "q", "filters": {"since": "2026-11-22T01:26:14Z"}, "expand": {"semantic_hops": 0}}),
        ("read", {"query": "q", "filters": {"since": "2026-11-22T01:26:14.5+01:00"}}),
        ("write", WRITE_EXAMPLE),
        ("write", {"memory": {"text": "Use uv.", "scope": "global", "kind": "preference"}}),
        ("write", {"op": "create", "mode": "dry_run", "allow_duplicate": True, **WRITE_EXAMPLE}),
        (
            "write",
            with_memory(
                kind="fact",
                tags=["sqlite", "db:migrations", "python3.11", "ci/cd", "c++"],
                author="claude-code",
                links={"related": [ID2], "supersedes": [ID3], "via_change": "01jd8x4k", "problem_id": None},
            ),
        ),
        ("write", with_memory(kind="change", links={"change_targets": [ID2, ID3]})),
        ("update", UPDATE_EXAMPLE),
        ("update", {"type": "utility_vote", "memory_id": "01JD8X", "vote": -0.5}),
        ("update", {"type": "archive", "memory_id": ID1, "archived": False, "evidence_refs": ["user:stale"]}),
        ("update", {"type": "fact_update_link", "old_fact_id": ID1, "change_id": ID2, "new_fact_id": ID3}),
    ],
)
def test_valid_requests_pass(name: str, request_: dict[str, Any]) -> None:
    assert schema_errors(name, request_) == []


# --- each class of bad input names the right field ------------------------------------------


@pytest.mark.parametrize(
    ("name", "request_", "field", "words"),
    [
        # wrong type
        ("read", {"query": 42}, "query", "must be a string, not an integer"),
        ("read", {"query": "q", "limit": "10"}, "limit", "must be an integer, not a string"),
        ("read", {"query": "q", "limit": 2.5}, "limit", "must be an integer, not a number"),
        ("read", {"query": "q", "include_global": "yes"}, "include_global", "true or false"),
        ("read", {"query": "q", "expand": {"include_update_links": 1}}, "expand.include_update_links", "true or"),
        ("read", {"query": "q", "problem_id": 5}, "problem_id", "a string or null"),
        ("write", with_memory(confidence="high"), "memory.confidence", "must be a number, not a string"),
        ("write", with_memory(links={"related": ID2}), "memory.links.related", "must be an array, not a string"),
        ("write", with_memory(links={"problem_id": 7}), "memory.links.problem_id", "a string or null"),
        ("write", with_memory(evidence_refs=[42]), "memory.evidence_refs[0]", "must be a string"),
        ("write", {"memory": "text"}, "memory", "must be an object, not a string"),
        ("update", {"type": "utility_vote", "memory_id": ID1, "vote": "up"}, "vote", "must be a number"),
        ("update", {"type": "archive", "memory_id": ID1, "archived": "true"}, "archived", "true or false"),
        # unknown field, at every level
        ("read", {"query": "q", "qurey": "q"}, "qurey", "unknown field 'qurey'; did you mean 'query'?"),
        ("read", {"query": "q", "filters": {"tag": ["x"]}}, "filters.tag", "did you mean 'tags'?"),
        ("read", {"query": "q", "expand": {"hops": 1}}, "expand.hops", "unknown field 'hops'"),
        ("write", {**WRITE_EXAMPLE, "dry_run": True}, "dry_run", "unknown field 'dry_run'"),
        ("write", with_memory(evidence=["x:y"]), "memory.evidence", "did you mean 'evidence_refs'?"),
        ("write", with_memory(links={"problem": ID1}), "memory.links.problem", "did you mean 'problem_id'?"),
        ("update", {**UPDATE_EXAMPLE, "weight": 1}, "weight", "unknown field 'weight'"),
        # out of range
        ("update", {**UPDATE_EXAMPLE, "vote": 1.5}, "vote", "must be between -1 and 1; got 1.5"),
        ("update", {**UPDATE_EXAMPLE, "vote": -2}, "vote", "must be between -1 and 1; got -2"),
        ("update", {**UPDATE_EXAMPLE, "confidence": 1.01}, "confidence", "between 0 and 1"),
        ("write", with_memory(confidence=-0.1), "memory.confidence", "between 0 and 1"),
        ("read", {"query": "q", "limit": 0}, "limit", "between 1 and 100; got 0"),
        ("read", {"query": "q", "limit": 101}, "limit", "between 1 and 100"),
        ("read", {"query": "q", "expand": {"semantic_hops": 5}}, "expand.semantic_hops", "between 0 and 4"),
        ("read", {"query": "x" * 100001}, "query", "at most 100000 characters long (got 100001)"),
        ("write", with_memory(text=""), "memory.text", "must not be empty"),
        ("write", with_memory(text="x" * 100_001), "memory.text", "at most 100000 characters"),
        ("read", {"query": "   "}, "query", "must not be blank"),
        # bad enum / const / pattern
        ("read", {"query": "q", "mode": "commit"}, "mode", 'must be one of "targeted", "ambient"; got "commit"'),
        ("read", {"query": "q", "kinds": ["facts"]}, "kinds[0]", "must be one of"),
        ("read", {"query": "q", "kinds": ["fact", "fact"]}, "kinds", "must not contain duplicates"),
        ("read", {"query": "q", "kinds": []}, "kinds", "at least 1 item"),
        ("read", {"op": "write", "query": "q"}, "op", 'must be "read"'),
        ("write", with_memory(kind="bug"), "memory.kind", "must be one of"),
        ("write", with_memory(scope="team"), "memory.scope", 'must be "repo", "global" or "shared:NAME"'),
        ("write", {**WRITE_EXAMPLE, "mode": "review"}, "mode", "must be one of"),
        ("write", {**WRITE_EXAMPLE, "op": "update"}, "op", 'must be one of "write", "create"'),
        ("update", {**UPDATE_EXAMPLE, "type": "vote"}, "type", "must be one of"),
        ("write", with_memory(links={"problem_id": "01jd"}), "memory.links.problem_id", "must be a memory id"),
        ("write", with_memory(links={"related": [ID1, "../etc"]}), "memory.links.related[1]", "must be a memory id"),
        ("write", with_memory(links={"related": [ID1, ID1]}), "memory.links.related", "duplicates"),
        ("write", with_memory(tags=["ok", "has space"]), "memory.tags[1]", "must be a short tag"),
        ("write", with_memory(tags=["-leading"]), "memory.tags[0]", "must be a short tag"),
        ("write", with_memory(tags=["x" * 65]), "memory.tags[0]", "must be a short tag"),
        ("write", with_memory(evidence_refs=["ab"]), "memory.evidence_refs[0]", "at least 3 characters"),
        ("read", {"query": "q", "filters": {"since": "yesterday"}}, "filters.since", "must be a date YYYY-MM-DD"),
        ("read", {"query": "q", "filters": {"since": "2026-13-01"}}, "filters.since", "must be a date"),
        ("update", {**UPDATE_EXAMPLE, "memory_id": "not an id"}, "memory_id", "must be a memory id"),
        # missing required, reported at the missing field's own path
        ("read", {}, "query", "'query' is required"),
        ("read", {"op": "read", "mode": "ambient"}, "query", "'query' is required"),
        ("write", {"op": "write"}, "memory", "'memory' is required"),
        ("write", {"memory": {"scope": "repo", "kind": "fact"}}, "memory.text", "'text' is required"),
        ("write", {"memory": {"text": "t", "kind": "fact"}}, "memory.scope", "'scope' is required"),
        ("write", {"memory": {"text": "t", "scope": "repo"}}, "memory.kind", "'kind' is required"),
        ("update", {"memory_id": ID1, "vote": 1}, "type", "'type' is required"),
        # per-type requirements of update
        ("update", {"type": "utility_vote", "vote": 1}, "memory_id", 'required when type is "utility_vote"'),
        ("update", {"type": "utility_vote", "memory_id": ID1}, "vote", "'vote' is required when type is"),
        ("update", {"type": "archive", "memory_id": ID1}, "archived", 'required when type is "archive"'),
        ("update", {"type": "archive", "archived": True}, "memory_id", 'required when type is "archive"'),
        ("update", {"type": "fact_update_link", "old_fact_id": ID1, "new_fact_id": ID3}, "change_id", "required"),
        ("update", {**UPDATE_EXAMPLE, "archived": True}, "archived", 'not allowed when type is "utility_vote"'),
        (
            "update",
            {"type": "archive", "memory_id": ID1, "archived": True, "vote": 1},
            "vote",
            "'vote' is not allowed when type is \"archive\"",
        ),
        (
            "update",
            {"type": "fact_update_link", "old_fact_id": ID1, "change_id": ID2, "new_fact_id": ID3, "memory_id": ID1},
            "memory_id",
            'not allowed when type is "fact_update_link"',
        ),
        # not an object at all
        ("read", ["query"], "", "must be an object, not an array"),
        ("update", None, "", "must be an object, not null"),
    ],
)
def test_bad_input_names_the_field(name: str, request_: object, field: str, words: str) -> None:
    errors = schema_errors(name, request_)
    assert errors, "expected a violation"
    messages = dict(errors)
    assert field in messages, errors
    assert words in messages[field], errors


def test_fact_update_link_lists_every_missing_id() -> None:
    assert fields("update", {"type": "fact_update_link"}) == ["old_fact_id", "change_id", "new_fact_id"]


def test_every_violation_is_reported_deepest_first() -> None:
    request = {
        "op": "write",
        "unknown": 1,
        "memory": {
            "text": "t",
            "kind": "fakt",
            "links": {"problem_id": "bad id!", "related": [ID1, "x"]},
        },
    }
    assert fields("write", request) == [
        "memory.links.related[1]",
        "memory.links.problem_id",
        "memory.kind",
        "memory.scope",
        "unknown",
    ]


def test_two_unknown_fields_are_two_errors() -> None:
    assert sorted(fields("read", {"query": "q", "a": 1, "b": 2})) == ["a", "b"]


def test_messages_never_echo_a_long_value() -> None:
    # A 100 kB memory (maybe holding a secret) must not come back inside an error message.
    long_text = "s3cr3t-" * 20_000
    for name, request in [
        ("write", with_memory(text=long_text)),
        ("read", {"query": long_text}),
        ("read", {"query": "q", "mode": long_text}),
        ("update", {**UPDATE_EXAMPLE, "memory_id": long_text}),
    ]:
        for _field, message in schema_errors(name, request):
            assert len(message) < 300


def test_booleans_are_not_numbers() -> None:
    # Python's True is an int; JSON's true is not a number.
    assert fields("update", {**UPDATE_EXAMPLE, "vote": True}) == ["vote"]
    assert schema_errors("read", {"query": "q", "limit": True}) == [("limit", "must be an integer, not a boolean")]
