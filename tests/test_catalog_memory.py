"""What a long-lived process holds of a store: the catalog loaded from catalog.json one record
at a time, with the values memories repeat held once and every field as the files say; the
keyword index read through its files."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, reopen, store_files, write_req

from memstore.read import retrieve
from memstore.store.catalog import CATALOG_VERSION
from memstore.store.userkey import projection_key, sealing


def _write_some(cli: Callable[..., CliResult], repo: Path) -> None:
    for req in (
        write_req("fact", "The billing worker runs on billing-1.",
                  memory_extra={"tags": ["billing", "hosts"], "confidence": 0.8, "rationale": "from the logs"}),
        write_req("fact", "The auth service caches tokens for ten minutes.",
                  memory_extra={"tags": ["auth", "hosts"], "confidence": 0.8, "rationale": "from the logs"}),
        write_req("preference", "Prefer ruff over flake8 in new modules.", memory_extra={"tags": ["lint"]}),
    ):
        code, out, err = cli("write", "--json", "-", cwd=repo, input=json.dumps(req))
        assert code == 0, (out, err)
    code, out, err = cli("list", "--json", cwd=repo)  # a CLI call that reads the store saves catalog.json
    assert code == 0 and len(out["memories"]) == 3, (out, err)


def test_the_cache_gives_the_files_memories_with_repeated_values_held_once(
        cli: Callable[..., CliResult], repo: Path) -> None:
    _write_some(cli, repo)
    assert (repo / ".memory" / ".index" / "catalog.json").is_file()
    ws = reopen(repo)
    cat = ws.catalog("repo")  # a fresh process: its records come from catalog.json
    store = ws.store("repo")
    mems = sorted(cat.memories.values(), key=lambda m: m.text)
    assert len(mems) == 3
    for mem in mems:  # every field as the file says
        assert mem == store.load_memory(mem.path)
    pref, auth, billing = mems
    # One object per repeated value, and the path is the record's own key.
    assert auth.kind is billing.kind and auth.scope is pref.scope and auth.author is pref.author
    assert auth.rationale is billing.rationale and auth.confidence is billing.confidence
    assert auth.evidence[0] is billing.evidence[0] is pref.evidence[0]
    assert auth.tags[1] is billing.tags[1]
    assert all(any(mem.path is rel for rel in cat._entries) for mem in mems)
    # Each memory still owns its lists: changing one changes no other.
    auth.tags.append("changed")
    assert billing.tags == ["billing", "hosts"]
    assert not hasattr(auth, "__dict__")  # slotted: no per-memory dict beside the fields


def test_a_sealed_cache_that_is_not_whole_is_parsed_from_the_files(cli: Callable[..., CliResult],
                                                                   repo: Path) -> None:
    _write_some(cli, repo)
    before = reopen(repo).catalog("repo").memories
    cache = repo / ".memory" / ".index" / "catalog.json"
    text = cache.read_text()
    files = store_files(repo)
    head = text[: text.index('"files":{') + len('"files":{')]  # this store's version and root
    assert head.startswith(f'{{"version":{CATALOG_VERSION},')
    for body in (
        text[: text.index('"files":{') + 300],  # cut inside a record, then sealed by this user
        head + '"facts/x.md":[1,2]}}',  # a record that is not an object
        head + '"facts/x.md":{"m":1,"s":2,"mem":{"id":"x","nope":1}}}}',  # a field memories lack
        head + '7:{"m":1,"s":2}}}',  # a key that is not a path
        head.replace(f'"version":{CATALOG_VERSION}', '"version":999') + text[len(head):],  # another version
    ):
        cache.write_text("".join(sealing([body], projection_key())))
        os.utime(cache)
        assert reopen(repo).catalog("repo").memories == before  # every file parsed again
    assert store_files(repo) == files  # nothing but the projection was written


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="the process's mappings are read from /proc")
def test_the_keyword_index_is_read_through_its_files_not_mapped(cli: Callable[..., CliResult], repo: Path) -> None:
    # A mapped segment is copied whole into Whoosh's own buffer, and the map's pages count as
    # resident as well: ~118 MB of a daemon's memory at 100k memories.
    _write_some(cli, repo)
    ws = reopen(repo)
    hits = retrieve.read(ws, {"query": "billing worker host"}, log_episode=False)["results"]
    assert any("billing-1" in hit["text"] for hit in hits)
    folder = str(repo / ".memory" / ".index" / "keyword")
    assert list(Path(folder).glob("*.seg"))
    assert [line for line in Path("/proc/self/maps").read_text().splitlines() if folder in line] == []


def test_the_loaded_index_keys_its_manifests_by_the_catalogs_own_ids(cli: Callable[..., CliResult],
                                                                    repo: Path) -> None:
    # meta.json decoded held three more copies of every id, and the read hashed every memory into
    # two more copies of the manifests' keys: ~38 MB at 100k memories.
    _write_some(cli, repo)
    code, out, err = cli("read", "billing worker host", cwd=repo)  # builds and saves the index
    assert code == 0, (out, err)
    ws = reopen(repo)
    retrieve.read(ws, {"query": "billing worker host"}, log_episode=False)
    si = ws.indexes["repo"]
    mems = ws.catalog("repo").memories
    assert si.vectors is not None and len(si.vectors) == len(mems) == 3
    for manifest in (si.state.kw_manifest, si.state.vec_manifest, si.vectors.label_of):
        assert sorted(manifest) == sorted(mems)
        assert all(any(mid is mem.id for mem in mems.values()) for mid in manifest)
    for mid, (_, doc, text) in si._keys.items():
        assert doc is si.state.kw_manifest[mid] and text is si.state.vec_manifest[mid]
