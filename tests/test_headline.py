"""bench/headline.py: the headline table of bench/RESULTS.md comes from one command.

Run as a user runs it (a real subprocess, the real model, the eval modules over a tiny copy of
each data set's layout in tests/data/headline/, bench/perf.py and bench/faults.py at the smallest
sizes); the figures mean nothing at these sizes, what is held is that every row is measured, that
the table says what it ran at and under which load, and that only the part between the markers
changes.
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
    proc = run_headline(tmp_path, "--results", str(results), "--write", "--skip", "speed", "faults")
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
    assert "Goals met:" in table and "code at " in table and "load average " in table
    assert "not measured in this run: speed, faults" in table


def test_a_results_file_without_markers_is_refused_before_measuring(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nno markers here\n")
    proc = run_headline(tmp_path, "--results", str(results), "--write")
    assert proc.returncode == 2
    assert "headline:begin" in proc.stderr and "Traceback" not in proc.stderr
    assert results.read_text() == "# Results\n\nno markers here\n"
    assert proc.stdout == ""
    assert not (tmp_path / "cache").exists()  # refused before anything was embedded



def test_faults_join_the_table_with_the_counts_they_ran_at(tmp_path: Path) -> None:
    proc = run_headline(tmp_path, "--skip", "quality", "speed", "--fault-only", "yaml,branches",
                        "--fault-trials", "1", "--fault-writers", "1", "--fault-writes", "2")
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout
    assert "faults at 1 trials, 1 writers x 2 writes" in table
    assert "not measured in this run: quality, speed" in table
    # bench/faults.py's own scenarios, each with its audit: nothing acknowledged lost, no corrupt store.
    for scenario in ("hand-broken YAML among good files", "two branches of memories, merged",
                     "two branches of memories, rebased"):
        row = next(line for line in table.splitlines() if scenario in line)
        assert row.endswith("0 lost, 0 failed, 0 corrupt ✓ |"), row
    assert "Goals met: faults ✓." in table
    assert "LoCoMo" not in table


def test_speed_joins_the_table_beside_its_floor_from_the_same_run(tmp_path: Path) -> None:
    proc = run_headline(tmp_path, "--skip", "quality", "faults", "--speed-size", "40", "--speed-reps", "3",
                        "--no-cold")
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout
    assert "speed at 40 memories, 3 reads per figure" in table
    row = next(line for line in table.splitlines() if line.startswith("| speed, 40 memories (bench/perf.py) |"))
    assert "`python -c pass` p50" in row and "(not checked at this size)" in row  # the goal is at 10k
    assert "| | write through the daemon p50 / p95 (CLI p50) |" in table
    assert "| | a file changed by hand -> visible to a read, p50 / max |" in table
    assert "first read after a clone" not in table  # --no-cold
    assert "Goals met: speed (the goals that apply at 40 memories)" in table
