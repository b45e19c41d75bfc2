"""bench/headline.py: the headline table of bench/RESULTS.md comes from one command.

Run as a user runs it (a real subprocess, the real model, the eval modules over a tiny copy of
each data set's layout in tests/data/headline/); the figures of the tiny sets mean nothing,
what is held is that every row is measured and that only the part between the markers changes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURE = REPO_ROOT / "tests" / "data" / "headline"
SCRIPT = REPO_ROOT / "bench" / "headline.py"


def run_headline(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--data-dir", str(FIXTURE),
                           "--cache-dir", str(tmp_path / "cache"), *args],
                          capture_output=True, text=True, timeout=600, check=False)


def test_write_replaces_only_the_table_between_the_markers(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    before = "# Results\n\nintro\n<!-- headline:begin -->\nan old table\n<!-- headline:end -->\n\nthe rest\n"
    results.write_text(before)
    proc = run_headline(tmp_path, "--results", str(results), "--write")
    assert proc.returncode == 0, proc.stderr
    text = results.read_text()
    assert text.startswith("# Results\n\nintro\n<!-- headline:begin -->\n")
    assert text.endswith("<!-- headline:end -->\n\nthe rest\n")
    assert "an old table" not in text
    table = text.split("<!-- headline:begin -->\n")[1].split("<!-- headline:end -->")[0]
    assert table == proc.stdout  # what it printed is what it wrote
    for row in ("| LoCoMo dev, turns, cat 1-4 | recall@5 / @10 / @25 |", "| | abstention on mismatched queries |",
                "| LoCoMo, keyword only (no model) |", "| GitBugs Hadoop, title-only |",
                "| GitBugs Hadoop, title+body |", "| identifiers (requests), whole names |"):
        assert row in table
    # The tiny LoCoMo set is answered by the real pipeline: each question finds its one turn.
    assert "| LoCoMo dev, turns, cat 1-4 | recall@5 / @10 / @25 | **1.000 / 1.000 / 1.000** |" in table
    assert "Goals met:" in table and "code at " in table


def test_a_results_file_without_markers_is_refused_before_measuring(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nno markers here\n")
    proc = run_headline(tmp_path, "--results", str(results), "--write")
    assert proc.returncode == 2
    assert "headline:begin" in proc.stderr and "Traceback" not in proc.stderr
    assert results.read_text() == "# Results\n\nno markers here\n"
    assert proc.stdout == ""
    assert not (tmp_path / "cache").exists()  # refused before anything was embedded

