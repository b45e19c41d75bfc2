"""The shipped example store and templates are what people copy from: they must be valid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EXAMPLE_STORE, TEMPLATES

from memstore.store.disk import event_from_file, memory_from_file
from memstore.store.files import parse_markdown
from memstore.store.model import KIND_DIRS, KINDS, parse_evidence


def _memories() -> dict[str, object]:
    out = {}
    for path in sorted(EXAMPLE_STORE.glob("*/*.md")):
        rel = path.relative_to(EXAMPLE_STORE).as_posix()
        mem = memory_from_file(rel, path.read_text(encoding="utf-8"), "repo")
        assert not mem.id_derived, rel
        assert path.name.startswith(mem.id + "-"), rel
        out[mem.id] = mem
    return out


def _episodes() -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for path in sorted(EXAMPLE_STORE.glob("episodes/*/*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        assert rows[0]["episode"] == path.stem
        assert path.parent.name == rows[0]["started"][:7]  # episodes/<YYYY-MM>/
        seqs = [r["seq"] for r in rows[1:] if "seq" in r]
        assert seqs == list(range(1, len(seqs) + 1)), path.name
        assert all(r["source"] in ("user", "assistant", "tool", "git", "memstore", "note") for r in rows if "seq" in r)
        out[path.stem] = set(seqs)
    return out


def test_every_memory_file_parses_and_every_kind_is_present() -> None:
    mems = _memories()
    assert {m.kind for m in mems.values()} == set(KINDS)  # type: ignore[attr-defined]
    for kind, folder in KIND_DIRS.items():
        assert all(m.kind == kind for m in mems.values() if m.path.startswith(folder + "/"))  # type: ignore


def test_links_resolve_with_the_right_kinds() -> None:
    mems = _memories()
    for mem in mems.values():
        for key in ("problem", "related", "change_targets", "supersedes", "via_change"):
            for target in mem.link_list(key):  # type: ignore[attr-defined]
                assert target in mems, f"{mem.path}: links.{key} -> {target}"  # type: ignore[attr-defined]
        if mem.kind in ("solution", "failed_tactic"):  # type: ignore[attr-defined]
            assert mems[mem.problem].kind == "problem"  # type: ignore


def test_events_parse_and_point_at_existing_memories() -> None:
    mems = _memories()
    events = [event_from_file(p.relative_to(EXAMPLE_STORE).as_posix(), p.read_text(encoding="utf-8"))
              for p in sorted(EXAMPLE_STORE.glob("events/*.yaml"))]
    assert {e.type for e in events} == {"utility_vote", "archive", "fact_update_link"}
    for ev in events:
        for target in (ev.memory, ev.problem, ev.old_fact, ev.change, ev.new_fact):
            assert target is None or target in mems, f"{ev.path} -> {target}"


def test_evidence_refs_parse_and_event_refs_exist() -> None:
    episodes = _episodes()
    assert episodes
    refs = []
    for path in sorted(EXAMPLE_STORE.glob("*/*.md")):
        refs += parse_markdown(path.read_text(encoding="utf-8"))[0].get("evidence", [])
    for path in sorted(EXAMPLE_STORE.glob("events/*.yaml")):
        refs += event_from_file(f"events/{path.name}", path.read_text(encoding="utf-8")).evidence
    event_refs = 0
    for raw in refs:
        ref = parse_evidence(raw)
        if ref.kind == "event":
            event_refs += 1
            (episode,) = [e for e in episodes if e.startswith(ref.episode or "")]
            assert ref.seq in episodes[episode], raw
    assert event_refs > 0


@pytest.mark.parametrize("kind", KINDS)
def test_template_for_each_kind(kind: str) -> None:
    path = TEMPLATES / f"{kind}.md"
    assert path.is_file()
    meta, body = parse_markdown(path.read_text(encoding="utf-8"))
    assert meta["kind"] == kind and meta["scope"] == "repo"
    assert "id" not in meta and "created" not in meta  # hand-written files get them from check --fix
    assert meta["evidence"] == []
    assert body.startswith("<!--") and body.endswith("-->")  # guidance only; no text until written


def test_templates_are_packaged_for_wheels() -> None:
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert '"templates" = "memstore/_data/templates"' in pyproject
