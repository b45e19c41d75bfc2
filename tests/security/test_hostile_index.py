"""`.index/` content that memstore did not write, committed (`git add -f`) and brought by a clone:
a directory, a symlink or a FIFO where memstore keeps a file, a file where it keeps a folder, a
huge file of zeros that packs to almost nothing. Through the real CLI, in real clones: each is
set aside (never followed, never read whole) and the projection rebuilt, and every verb answers."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git, make_git_repo, write_req

from memstore import gitops

FACTS = ["The deploy script lives in ops/deploy.sh and needs the VPN.",
         "Use pnpm, not npm, to install the frontend dependencies.",
         "Run pytest -x --ff on the affected file while iterating."]
BIG = 512 * 1024 * 1024

# What a hostile commit puts in .memory/.index/: a directory where each file belongs (memstore
# would rename its own file onto it, or open it for reading), files where its folders belong.
DIRECTORIES = ("vectors.faiss", "meta.json", "catalog.json", "stale.json", "index.lock", "write.lock")
FILES_FOR_FOLDERS = ("keyword", "embeddings")


def _memstore(cwd: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMSTORE_DAEMON": "0"}
    return subprocess.run([sys.executable, "-m", "memstore", *args], cwd=cwd, input=input, capture_output=True,
                          text=True, env=env, timeout=600, check=False)


def _answer(cwd: Path, *args: str, input: str | None = None) -> dict:
    proc = _memstore(cwd, *args, input=input)
    assert proc.returncode == 0, (args, proc.stdout[-2000:], proc.stderr[-2000:])
    return json.loads(proc.stdout)


def _origin(tmp_path: Path) -> Path:
    """A repo with three memories committed, and nothing of memstore's own in .index/."""
    origin = make_git_repo(tmp_path / "origin")
    gitops.toplevel.cache_clear()
    _answer(origin, "init")
    for text in FACTS:
        _answer(origin, "write", "--json", "-", input=json.dumps(write_req("fact", text)))
    git(origin, "add", "-A", ".memory")
    git(origin, "commit", "-q", "-m", "memories")
    for entry in (origin / ".memory" / ".index").iterdir():
        subprocess.run(["rm", "-rf", str(entry)], check=True)
    return origin


def _clone(tmp_path: Path, origin: Path) -> Path:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    return clone


def _max_rss_kb(cwd: Path, *args: str) -> tuple[int, dict]:
    """Run the CLI as the only child of a fresh Python: (its peak RSS in KiB, its answer)."""
    probe = ("import json, resource, subprocess, sys\n"
             "p = subprocess.run([sys.executable, '-m', 'memstore', *sys.argv[1:]], capture_output=True, text=True)\n"
             "print(json.dumps([resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode, p.stdout,"
             " p.stderr]))\n")
    proc = subprocess.run([sys.executable, "-c", probe, *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "MEMSTORE_DAEMON": "0"}, timeout=600, check=True)
    rss, rc, out, err = json.loads(proc.stdout)
    assert rc == 0, err
    return rss, json.loads(out)


def _sealed_and_small(path: Path) -> bool:
    """memstore's own: small, and ending in this user's seal (``store.userkey``)."""
    data = path.read_bytes()
    return len(data) < 1024 * 1024 and re.search(rb',"seal":"[0-9a-f]{64}"\}\Z', data) is not None


@pytest.mark.model
def test_committed_index_entries_of_the_wrong_type_are_set_aside_and_every_verb_answers(tmp_path: Path) -> None:
    """Directories where memstore keeps files, files where it keeps folders, a symlink out of the
    repo and a FIFO: every in-process read, a write, `reindex --full` and the CI review of the
    clone answer (they failed with `unexpected`: IsADirectoryError), each entry is set aside and
    rebuilt as memstore's own, and the link's target is neither read nor written."""
    origin = _origin(tmp_path)
    base = git(origin, "rev-parse", "HEAD").strip()
    index = origin / ".memory" / ".index"
    for name in DIRECTORIES:
        (index / name).mkdir()
        (index / name / "x").write_text("not memstore's\n")
    for name in FILES_FOR_FOLDERS:
        (index / name).write_text("not memstore's\n")
    outside = origin / "precious.txt"
    outside.write_text("keep me\n")
    (index / "sync.lock").symlink_to(Path("..") / ".." / "precious.txt")
    git(origin, "add", "-f", ".memory", "precious.txt")
    git(origin, "commit", "-q", "-m", "an index of the wrong shapes")
    clone = _clone(tmp_path, origin)
    cindex = clone / ".memory" / ".index"
    assert (cindex / "vectors.faiss").is_dir() and (cindex / "keyword").is_file()
    os.mkfifo(cindex / "generation")  # git carries no FIFO: an archive or another tool can leave one

    assert _answer(clone, "list")["count"] == len(FACTS)
    assert _answer(clone, "read", "how do I deploy")["results"]
    _answer(clone, "write", "--json", "-", input=json.dumps(write_req("fact", "Staging resets nightly at 02:00.")))
    assert _answer(clone, "reindex", "--full")["ok"] is True
    review = _memstore(clone, "review", "--base", base)
    assert review.returncode == 0, review.stderr[-2000:]

    for name in ("vectors.faiss", "meta.json", "catalog.json", "generation", "index.lock", "write.lock"):
        assert stat.S_ISREG(os.lstat(cindex / name).st_mode), name  # memstore's own file now
    for name in FILES_FOR_FOLDERS:
        assert (cindex / name).is_dir() and not (cindex / name).is_symlink(), name
    assert not (cindex / "stale.json").is_dir()
    assert not (cindex / "sync.lock").is_symlink()
    assert (clone / "precious.txt").read_text() == "keep me\n"
    assert _sealed_and_small(cindex / "meta.json") and _sealed_and_small(cindex / "catalog.json")


@pytest.mark.model
def test_huge_committed_index_files_are_set_aside_unread(tmp_path: Path) -> None:
    """512 MiB of zeros as meta.json, generation and the embedding cache's key file (sparse here,
    a few MB in git): the read answers, and each is set aside or left unread, then memstore's own."""
    origin = _origin(tmp_path)
    index = origin / ".memory" / ".index"
    (index / "embeddings").mkdir()
    for rel in ("meta.json", "generation", "embeddings/all-MiniLM-L6-v2-onnx-int8.keys"):
        with open(index / rel, "wb") as fh:
            fh.truncate(BIG)
    git(origin, "add", "-f", ".memory")
    git(origin, "commit", "-q", "-m", "zeros")
    clone = _clone(tmp_path, origin)
    cindex = clone / ".memory" / ".index"
    assert (cindex / "meta.json").stat().st_size == BIG

    rss_kb, found = _max_rss_kb(clone, "read", "how do I deploy")
    assert found["results"]
    assert rss_kb * 1024 < BIG, rss_kb  # the model and the index, not the zeros
    assert _sealed_and_small(cindex / "meta.json")
    assert (cindex / "generation").stat().st_size < 32


def test_a_huge_committed_catalog_cache_is_set_aside_unread(tmp_path: Path) -> None:
    """A 512 MiB catalog.json of zeros (2.5 MB in git) was read whole by every `list` of the clone
    (533 MiB resident): it is refused on its size before a byte is read, and replaced by a sealed
    cache of the files; `list` answers from the files."""
    origin = _origin(tmp_path)
    with open(origin / ".memory" / ".index" / "catalog.json", "wb") as fh:
        fh.truncate(BIG)
    git(origin, "add", "-f", ".memory")
    git(origin, "commit", "-q", "-m", "a catalog of zeros")
    clone = _clone(tmp_path, origin)
    cache = clone / ".memory" / ".index" / "catalog.json"
    assert cache.stat().st_size == BIG

    rss_kb, listed = _max_rss_kb(clone, "list")
    assert sorted(m["text"] for m in listed["memories"]) == sorted(FACTS)
    assert rss_kb * 1024 < BIG / 2, rss_kb  # never held in memory
    assert _sealed_and_small(cache)
    rss_kb, listed = _max_rss_kb(clone, "list")
    assert listed["count"] == len(FACTS) and rss_kb * 1024 < BIG / 2


def test_a_keyword_build_survives_the_index_folder_being_sorted_out_and_its_temp_folder_holds_no_link(
        tmp_path: Path) -> None:
    """The daemon sorts ``.index/`` again when it heals a projection (``recheck_dir``), while a
    keyword build may be running: Whoosh's writer keeps its sorting runs in ``MAIN.tmp/`` inside
    the build's folder, and setting that folder aside failed the build at its commit (the daemon
    then rebuilt inside a read, holding the store's lock). The folder stays; what a clone could
    plant in one (a link, a folder, a FIFO) is still set aside, and the link's target untouched."""
    from whoosh import index as whoosh_index
    from whoosh.fields import ID, TEXT, Schema

    from memstore.store import files

    index_dir = tmp_path / ".index"
    build = index_dir / f"keyword.next-{os.getpid()}-1"
    build.mkdir(parents=True)
    writer = whoosh_index.create_in(str(build), Schema(id=ID(stored=True), text=TEXT)).writer()
    assert (build / "MAIN.tmp").is_dir()
    planted = index_dir / "keyword" / "MAIN.tmp"
    planted.mkdir(parents=True)
    target = tmp_path / "outside.txt"
    target.write_text("not memstore's\n")
    (planted / "run.ctmp").write_bytes(b"\x00" * 16)
    (planted / "link.ctmp").symlink_to(target)
    (planted / "nested").mkdir()
    os.mkfifo(planted / "pipe.ctmp")
    files.recheck_dir(index_dir)
    for i in range(50):
        writer.add_document(id=str(i), text=f"term{i} retry budget")
    writer.commit()  # FileNotFoundError under MAIN.tmp when the sorting removed it
    with whoosh_index.open_dir(str(build)).searcher() as searcher:
        assert searcher.doc_count() == 50
    assert sorted(os.listdir(planted)) == ["run.ctmp"]
    assert target.read_text() == "not memstore's\n"
