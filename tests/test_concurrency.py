"""Many writers at once: every write lands whole, once, valid and staged."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import staged

from memstore.store.disk import memory_from_file
from memstore.store.workspace import open_workspace

WRITERS = 8
WRITES_EACH = 100

WORKER = """
import sys
from pathlib import Path
from memstore.verbs import api
from memstore.store.workspace import open_workspace

worker = int(sys.argv[1])
ws = open_workspace(cwd=Path(sys.argv[2]))
for i in range(int(sys.argv[3])):
    api.write(ws, {"memory": {"kind": "fact", "scope": "repo", "text": f"Worker {worker} fact {i}",
                              "evidence_refs": ["file:src/app.py"]}, "allow_duplicate": True})
"""


@pytest.mark.slow
def test_parallel_writers(repo: Path) -> None:
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(w), str(repo), str(WRITES_EACH)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(WRITERS)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    elapsed = time.perf_counter() - start

    facts = repo / ".memory" / "facts"
    files = sorted(p for p in facts.iterdir() if p.name != ".gitkeep")
    assert len(files) == WRITERS * WRITES_EACH
    assert all(p.suffix == ".md" and not p.name.startswith(".") for p in files)  # no temp/partial files
    leftovers = [p for p in (repo / ".memory").rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
    texts = set()
    ids = set()
    for path in files:
        mem = memory_from_file(f"facts/{path.name}", path.read_text(encoding="utf-8"), "repo")
        assert path.name.startswith(mem.id) and not mem.id_derived
        ids.add(mem.id)
        texts.add(mem.text)
    assert len(ids) == len(texts) == WRITERS * WRITES_EACH
    assert texts == {f"Worker {w} fact {i}" for w in range(WRITERS) for i in range(WRITES_EACH)}
    in_index = staged(repo)
    assert {f".memory/facts/{p.name}" for p in files} <= in_index
    cat = open_workspace(cwd=repo).catalog("repo")
    assert len(cat.memories) == WRITERS * WRITES_EACH and cat.invalid == {}
    # Report the cost per write for the record (visible with -rP); generous bound against hangs.
    print(f"{WRITERS}x{WRITES_EACH} writes in {elapsed:.1f}s")
    assert elapsed < 240
