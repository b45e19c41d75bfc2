"""config.yaml's three-way merge by key (git/confmerge), the part `memstore sync` relies on; the
sync itself is tested end to end in tests/test_sync.py."""

from __future__ import annotations

import pytest
import yaml

from memstore.git.confmerge import Unpatchable, conflicts_and_takes, merge_text

BASE = """\
# settings
write_mode: review        # review | autonomous
git:
  stage: true             # stage new files
  commit: false
daemon:
  idle_seconds: 1800
"""


def test_a_key_the_other_side_added_lands_in_its_section_and_mine_stay() -> None:
    mine = BASE.replace("idle_seconds: 1800", "idle_seconds: 600   # laptop")
    theirs = BASE.replace("  commit: false\n", "  commit: false\n  sign: true      # theirs\n") + "extra:\n  level: 1\n"
    out = merge_text(BASE, mine, theirs)
    assert "  sign: true      # theirs\n" in out and "idle_seconds: 600   # laptop" in out
    assert yaml.safe_load(out) == {**yaml.safe_load(theirs), "daemon": {"idle_seconds": 600}}


def test_a_key_the_other_side_removed_goes_with_an_emptied_section() -> None:
    theirs = BASE.split("daemon:")[0]
    mine = BASE.replace("write_mode: review  ", "write_mode: autonomous")
    out = merge_text(BASE, mine, theirs)
    assert "daemon" not in out and "write_mode: autonomous" in out and out.startswith("# settings\n")


def test_the_same_key_changed_both_ways_is_named_and_keep_decides() -> None:
    mine = BASE.replace("stage: true ", "stage: false")
    theirs = BASE.replace("stage: true ", "stage: 0    ")
    conflicts, _, _ = conflicts_and_takes(BASE, mine, theirs)
    assert [(c.key, c.mine, c.theirs, c.base) for c in conflicts] == [("git.stage", False, 0, True)]
    with pytest.raises(Unpatchable):
        merge_text(BASE, mine, theirs)
    assert merge_text(BASE, mine, theirs, keep="mine") == mine
    assert merge_text(BASE, mine, theirs, keep="theirs") == theirs


def test_a_layout_that_cannot_be_patched_by_line_is_refused_not_written() -> None:
    mine = BASE.replace("git:\n  stage: true             # stage new files\n  commit: false\n",
                        "git: {stage: true, commit: false}\n")
    theirs = BASE.replace("commit: false", "commit: true")
    with pytest.raises(Unpatchable):
        merge_text(BASE, mine, theirs)
