"""meta.json is written a slice of its manifests at a time: a save never holds the whole text
(16 MB at 100k memories) beside the encoder's pieces of it, and the file is the same JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memstore.index.index_files import IndexFiles, meta_chunks

KEY = b"k" * 32


def _meta(n: int) -> dict[str, object]:
    ids = [f"01J{i:023d}" for i in range(n)]
    return {"version": 2, "generation": 1, "model_id": "all-MiniLM-L6-v2-onnx-int8", "dim": 384,
            "labels": {str(i + 1): m for i, m in enumerate(ids)},
            "kw_manifest": {m: f"{i:016x}" for i, m in enumerate(ids)},
            "vec_manifest": {m: f"{i:016x}" for i, m in enumerate(ids)},
            "files": {"vectors.faiss": [123, 456]}}


PROBE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from memstore.index.index_files import IndexFiles
    sys.path.insert(0, sys.argv[3])
    from test_meta_save_memory import KEY, _meta

    def vm():
        out = {}
        for line in open("/proc/self/status"):
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line[:5]] = int(line.split()[1]) * 1024
        return out["VmRSS"], out["VmHWM"]

    meta = _meta(int(sys.argv[2]))
    files = IndexFiles(Path(sys.argv[1]), KEY, lambda note: None)
    Path("/proc/self/clear_refs").write_text("5")
    before = vm()[0]
    files.write_meta(meta)
    print(vm()[1] - before)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and its reset are Linux's")
def test_a_save_of_meta_json_holds_less_than_the_file_it_writes(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    folder.mkdir()
    out = subprocess.run([sys.executable, "-c", PROBE, str(folder), "40000", str(Path(__file__).parent)],
                         capture_output=True, text=True, check=True)
    size = (folder / "meta.json").stat().st_size  # ~5 MB; json.dumps held ~3.7x that at its peak
    assert int(out.stdout) < size, (int(out.stdout), size)
    files = IndexFiles(folder, KEY, lambda note: None)
    assert files.read_meta() == _meta(40000)


@pytest.mark.parametrize("n", [0, 1, 4096, 4097, 9000])
def test_meta_json_streamed_is_the_text_json_dumps_makes(n: int) -> None:
    meta = _meta(n)
    meta["model_id"] = "modèle \"quoted\" \u2028"
    assert "".join(meta_chunks(meta)) == json.dumps(meta, separators=(",", ":"))


def test_whole_number_labels_are_written_as_the_strings_a_load_reads(tmp_path: Path) -> None:
    meta = _meta(5000)
    meta["labels"] = {int(k): v for k, v in meta["labels"].items()}  # type: ignore[attr-defined]
    files = IndexFiles(tmp_path / "index", KEY, lambda note: None)
    (tmp_path / "index").mkdir()
    files.write_meta(meta)
    assert files.read_meta() == _meta(5000)
