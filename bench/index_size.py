"""Size and build time of the keyword index beside the memory text it is built from.

Run (from the repo root, venv active):

    python bench/index_size.py                  # 10k memories (bench/perf.py's generated store)
    python bench/index_size.py --sizes 2500 10000

The store is bench/perf.py's (generated once under ``bench/.cache/perf/``, text from templates).
Each variant builds a Whoosh index of every memory into a temporary folder, as
``index.keyword.KeywordIndex.apply`` feeds it, and prints its size on disk and the seconds the
build took, beside the bytes of memory text (UTF-8) and of the memory files:

- ``memstore``: the schema and writer memstore uses now (``keyword._schema``, one process);
- ``v5 schema, forked writer``: the schema before version 6 (positions of every ``text``
  term, ``kind`` stored) with Whoosh's two-process, several-segment writer, as big builds used;
- ``v5 schema, one writer``: the same schema written by one process.

The reader (``keyword.ArrayScorer``) reads each term's document numbers and weights and the
length column, and the stored ``id``: positions and the stored ``kind`` were never read.
The machine's load average is printed with the results: on a shared 2-core box it matters.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from perf import CACHE, generate_store  # noqa: E402

from memstore.index import keyword  # noqa: E402
from memstore.index.terms import code_analyzer, keyword_analyzer  # noqa: E402
from memstore.store.catalog import Catalog  # noqa: E402
from memstore.store.config import Config  # noqa: E402
from memstore.store.disk import Store  # noqa: E402

Doc = tuple[str, str, list[str], str]


def v5_schema() -> Any:
    """The keyword schema of projection version 5."""
    from whoosh.fields import ID, KEYWORD, TEXT, Schema

    return Schema(
        id=ID(stored=True, unique=True),
        kind=ID(stored=True),
        tags=KEYWORD(lowercase=True, commas=True, scorable=True),
        text=TEXT(analyzer=keyword_analyzer()),
        code=TEXT(analyzer=code_analyzer(), phrase=False),
    )


def build(folder: Path, schema: Any, docs: list[Doc], writer_args: dict[str, Any]) -> float:
    from whoosh import index

    folder.mkdir()
    ix = index.create_in(str(folder), schema)
    t0 = time.perf_counter()
    writer = ix.writer(**writer_args)
    for mid, kind, tags, text in docs:
        doc = {"id": mid, "kind": kind, "tags": ",".join(tags), "text": text, "code": text}
        writer.add_document(**{name: value for name, value in doc.items() if name in schema})
    writer.commit()
    return time.perf_counter() - t0


def size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def store_docs(n: int) -> tuple[list[Doc], int, int]:
    """The generated store's documents, the bytes of their text and of their files."""
    root = CACHE / f"store-{n}"
    if not (root / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        generate_store(root, n)
    config = Config().with_overrides({"git": {"stage": False, "commit": False}})
    catalog = Catalog(Store(root=root, scope="repo", config=config, worktree=None))
    catalog.refresh(persist=False)
    mems = catalog.memories.values()
    docs = [(m.id, m.kind, list(m.tags), m.text) for m in mems]
    text_bytes = sum(len(m.text.encode("utf-8")) for m in mems)
    file_bytes = sum(p.stat().st_size for kind_dir in root.iterdir() if kind_dir.is_dir()
                     and not kind_dir.name.startswith(".") and kind_dir.name != "events"
                     for p in kind_dir.glob("*.md"))
    return docs, text_bytes, file_bytes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000])
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    variants: list[tuple[str, Callable[[], Any], dict[str, Any]]] = [
        ("memstore", keyword._schema, {"limitmb": 128}),
        ("v5 schema, forked writer", v5_schema, {"procs": 2, "multisegment": True, "limitmb": 128}),
        ("v5 schema, one writer", v5_schema, {"limitmb": 128}),
    ]
    rows: list[dict[str, Any]] = []
    print("| memories | variant | index MB | x memory text | x memory files | build s |")
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        docs, text_bytes, file_bytes = store_docs(n)
        print(f"| {n} | memory text | {text_bytes / 1e6:.2f} | 1.0 | - | - |")
        print(f"| {n} | memory files | {file_bytes / 1e6:.2f} | {file_bytes / text_bytes:.1f} | 1.0 | - |")
        for name, schema, writer_args in variants:
            with tempfile.TemporaryDirectory(prefix="memstore-ixsize-") as tmp:
                folder = Path(tmp) / "keyword"
                seconds = build(folder, schema(), docs, writer_args)
                got = size(folder)
            rows.append({"memories": n, "variant": name, "bytes": got, "text_bytes": text_bytes,
                         "file_bytes": file_bytes, "build_s": round(seconds, 2)})
            print(f"| {n} | {name} | {got / 1e6:.2f} | {got / text_bytes:.1f} | {got / file_bytes:.2f} "
                  f"| {seconds:.1f} |")
    print(f"- load average {os.getloadavg()[0]:.1f}")
    out = json.dumps({"rows": rows})
    if args.json_out:
        args.json_out.write_text(out + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
