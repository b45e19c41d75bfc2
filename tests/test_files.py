"""Strict frontmatter parsing and atomic writes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from memstore.errors import InvalidFile
from memstore.store.disk import memory_from_file
from memstore.store.files import atomic_write, dump_markdown, parse_markdown, safe_yaml
from memstore.store.model import Memory

ID = "01m7qmgvt9txwmxsa4g8kr1ap8"


def test_frontmatter_round_trip() -> None:
    meta = {"id": ID, "kind": "fact", "scope": "repo", "created": "2026-11-18T15:31:04Z", "author": "dana",
            "confidence": 0.8, "links": {"related": [ID]}, "evidence": ["file:a.py#L1-L2", "user:yes: really"],
            "tags": ["db", "sqlite"]}
    body = "Line one with `code: colon`.\n\n--- not a fence ---\nÜnïcode too."
    text = dump_markdown(meta, body)
    meta2, body2 = parse_markdown(text)
    assert meta2 == meta
    assert body2 == body
    assert dump_markdown(meta2, body2) == text


def test_memory_round_trip_through_file() -> None:
    mem = Memory(id=ID, kind="problem", text="Tests fail with `KeyError: 'x'`", created="2026-11-18T15:31:04Z",
                 author="a", confidence=0.5, evidence=["user:x"], tags=["t"], links={"related": [ID]})
    text = dump_markdown(mem.frontmatter(), mem.text)
    back = memory_from_file("problems/x.md", text, "repo")
    assert back.frontmatter() == mem.frontmatter()
    assert back.text == mem.text
    assert not back.id_derived


def test_bom_is_accepted() -> None:
    meta, body = parse_markdown("\ufeff---\nkind: fact\n---\nhello\n")
    assert meta == {"kind": "fact"}
    assert body == "hello"


def test_dates_are_normalised_to_iso_strings() -> None:
    meta, _ = parse_markdown("---\ncreated: 2026-11-18T15:31:04+02:00\nday: 2026-11-18\n"
                             "plain: 2026-11-18 15:31:04\n---\nx\n")
    assert meta["created"] == "2026-11-18T13:31:04Z"  # converted to UTC
    assert meta["day"] == "2026-11-18"
    assert meta["plain"] == "2026-11-18T15:31:04Z"


@pytest.mark.parametrize("front", ["- a\n- b", "just a string", "42", "true"])
def test_non_mapping_frontmatter_is_invalid_not_a_crash(front: str) -> None:
    with pytest.raises(InvalidFile, match="must be a YAML mapping, not a "):
        memory_from_file("facts/x.md", f"---\n{front}\n---\nbody\n", "repo")


def test_missing_frontmatter_is_invalid() -> None:
    with pytest.raises(InvalidFile, match="frontmatter"):
        parse_markdown("just text\n")


def test_python_tags_are_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = f"---\nkind: !!python/object/apply:os.system ['touch {marker}']\n---\nbody\n"
    with pytest.raises(InvalidFile):
        parse_markdown(text)
    assert not marker.exists()


def test_billion_laughs_is_refused_quickly() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    prev = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
        prev = name
    start = time.perf_counter()
    with pytest.raises(InvalidFile, match="anchors/aliases"):
        parse_markdown("---\n" + "\n".join(lines) + "\n---\nbody\n")
    assert time.perf_counter() - start < 1.0


def test_oversized_frontmatter_is_refused() -> None:
    with pytest.raises(InvalidFile, match="larger than"):
        safe_yaml("x: " + "a" * 70_000)


def test_invalid_yaml_names_the_problem() -> None:
    with pytest.raises(InvalidFile, match="not valid YAML"):
        parse_markdown("---\nkind: [unclosed\n---\nbody\n")


def test_atomic_write_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "d" / "f.md"
    atomic_write(target, "one")
    atomic_write(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["f.md"]


def test_atomic_write_exclusive_refuses_to_clobber(tmp_path: Path) -> None:
    target = tmp_path / "d" / "f.md"
    atomic_write(target, "first", exclusive=True)
    with pytest.raises(FileExistsError):
        atomic_write(target, "second", exclusive=True)
    assert target.read_text() == "first"
    assert [p.name for p in target.parent.iterdir()] == ["f.md"]


def test_memory_file_kind_must_match_folder() -> None:
    with pytest.raises(InvalidFile, match="does not match its folder"):
        memory_from_file("facts/x.md", "---\nkind: problem\n---\nbody\n", "repo")


def test_hand_written_file_gets_path_derived_id() -> None:
    mem = memory_from_file("facts/new-1.md", "---\nkind: fact\nevidence: [user:x]\n---\nbody\n", "repo")
    assert mem.id_derived
    assert mem.id == memory_from_file("facts/new-1.md", "---\nkind: fact\n---\nother\n", "repo").id
