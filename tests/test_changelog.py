"""The change log behind the watcher, the catalog and the scope view: a reader gets what changed
since its version, or None (rebuild) when the log was trimmed past it or forgot."""

from __future__ import annotations

from memstore.store.changelog import ChangeLog


def test_since_unions_later_changes_per_group() -> None:
    log = ChangeLog(limit=100, groups=2)
    log.note(1, ["a"], ["e1"])
    log.note(2, ["b"], [])
    assert log.since(0) == ({"a", "b"}, {"e1"})
    assert log.since(1) == ({"b"}, set())
    assert log.since(2) == (set(), set())
    assert log.since(3) is None  # a version this log never had


def test_trimmed_or_forgotten_past_means_rebuild() -> None:
    log = ChangeLog(limit=3)
    log.note(1, ["a", "b"])
    log.note(2, ["c", "d"])  # over the limit: version 1 is dropped
    assert log.since(0) is None
    assert log.since(1) == ({"c", "d"},)
    log.forget(3)
    assert log.since(2) is None
    assert log.since(3) == (set(),)
    log.note(4, ["x"])
    assert log.since(3) == ({"x"},)
