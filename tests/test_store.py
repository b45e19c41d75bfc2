"""The store on disk: layout, parsing every file, and the catalog projection."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import git, reopen, staged, write_req

from memstore.errors import MemstoreError
from memstore.store.disk import slugify
from memstore.store.workspace import Workspace, open_workspace
from memstore.verbs import api


def test_init_creates_layout_and_stages_it(repo: Path) -> None:
    root = repo / ".memory"
    for sub in ("problems", "solutions", "failed_tactics", "facts", "preferences", "changes", "events", "episodes"):
        assert (root / sub).is_dir()
    assert (root / "config.yaml").is_file()
    assert ".index/" in (root / ".gitignore").read_text()
    assert ".memory/config.yaml" in staged(repo)
    assert ".memory/problems/.gitkeep" in staged(repo)


def test_init_is_idempotent(repo: Path) -> None:
    config = (repo / ".memory" / "config.yaml").read_text()
    again = api.init(open_workspace(cwd=repo))
    assert again["ok"] and again["created"] == []
    assert (repo / ".memory" / "config.yaml").read_text() == config


def test_init_outside_a_repo_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(MemstoreError) as exc:
        api.init(open_workspace(cwd=plain))
    assert exc.value.code == "no_store"
    assert "not inside a git repository" in exc.value.message
    assert not (plain / ".memory").exists()


def test_index_dir_is_gitignored(ws: Workspace, repo: Path) -> None:
    api.write(ws, write_req("fact", "Logs go to stdout in JSON."))
    assert (repo / ".memory" / ".index").is_dir()
    assert not any(".index" in p for p in staged(repo))
    assert git(repo, "status", "--porcelain", "--ignored", ".memory/.index").startswith("!!")


def test_file_name_is_id_and_slug(ws: Workspace, repo: Path) -> None:
    ans = api.write(ws, write_req("problem", "Build fails: `ModuleNotFoundError: foo` on CI!"))
    assert ans["path"] == f".memory/problems/{ans['id']}-build-fails-modulenotfounderror-foo-on.md"
    assert slugify("¡Ünïcödé only!") == "unicode-only"
    assert slugify("!!!") == "memory"
    assert len(slugify("word " * 50)) <= 40


def test_catalog_sees_new_changed_and_removed_files(ws: Workspace, repo: Path) -> None:
    cat = ws.catalog("repo")
    assert cat.memories == {}
    path = repo / ".memory" / "facts" / "hand.md"
    path.write_text("---\nkind: fact\nevidence: [user:x]\n---\nFirst text.\n")
    cat.refresh()
    (mem,) = cat.memories.values()
    assert mem.text == "First text." and mem.id_derived
    path.write_text("---\nkind: fact\nevidence: [user:x]\n---\nSecond, longer text.\n")
    cat.refresh()
    assert [m.text for m in cat.memories.values()] == ["Second, longer text."]
    path.unlink()
    cat.refresh()
    assert cat.memories == {}


def test_invalid_file_is_set_aside_not_fatal(ws: Workspace, repo: Path) -> None:
    good = api.write(ws, write_req("fact", "Migrations live in db/migrations."))["id"]
    (repo / ".memory" / "facts" / "broken.md").write_text("---\nkind: [unclosed\n---\nx\n")
    cat = reopen(repo).catalog("repo")
    assert list(cat.memories) == [good]
    assert "facts/broken.md" in cat.invalid
    assert "YAML" in cat.invalid["facts/broken.md"]


def test_duplicate_ids_are_reported(ws: Workspace, repo: Path) -> None:
    ans = api.write(ws, write_req("fact", "The queue is RabbitMQ."))
    src = repo / ans["path"]
    shutil.copy(src, src.with_name(src.name.replace(".md", "-copy.md")))
    cat = reopen(repo).catalog("repo")
    # Neither copy wins: which one is genuine is not for path order to decide.
    assert cat.memories == {}
    assert len(cat.invalid) == 2 and all("duplicate id" in e for e in cat.invalid.values())
    assert set(cat.codes.values()) == {"id_conflict"}


def test_deleting_the_index_rebuilds_identically(ws: Workspace, repo: Path) -> None:
    api.write(ws, write_req("fact", "Feature flags live in LaunchDarkly."))
    api.write(ws, write_req("preference", "Use ruff, not flake8."))
    before = api.list_memories(reopen(repo))
    cache = json.loads((repo / ".memory" / ".index" / "catalog.json").read_text())
    assert len(cache["files"]) == 2
    shutil.rmtree(repo / ".memory" / ".index")
    assert api.list_memories(reopen(repo)) == before


def test_episode_seqs(ws: Workspace, repo: Path) -> None:
    ep = repo / ".memory" / "episodes" / "2026-11" / "01m7qfe3t1b183v60j1k2n9k5t.jsonl"
    ep.parent.mkdir(parents=True)
    ep.write_text('{"episode": "01m7qfe3t1b183v60j1k2n9k5t"}\n{"seq": 1, "content": "a"}\nnot json\n'
                  '{"seq": 3, "content": "b"}\n')
    store = ws.store("repo")
    assert store.episode_seqs("01m7qfe3t1b183v60j1k2n9k5t") == {1, 3}
    assert store.episode_seqs("01m7qfe3t1") == {1, 3}  # a prefix finds it
    assert store.episode_seqs("01m7qfe3t1b183v60j1k2n9k5x") is None
