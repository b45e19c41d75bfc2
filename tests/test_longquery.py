"""Condensing a long query (a pasted traceback) to its head and error lines."""

from __future__ import annotations

from memstore.read.longquery import MAX_QUERY_CHARS, condense


def test_short_queries_are_used_whole() -> None:
    assert condense("why does the migration fail?") == ("why does the migration fail?", None)


def test_a_long_traceback_keeps_its_head_and_its_last_error_line() -> None:
    frames = "".join(f'  File "mod{i}.py", line {i}, in f{i}\n    call()\n' for i in range(200))
    query = "the nightly import job crashes\nTraceback (most recent call last):\n" + frames + \
        "KeyError: 'tracking_code'\n"
    text, note = condense(query)
    assert len(text) <= MAX_QUERY_CHARS
    assert text.startswith("the nightly import job crashes") and text.endswith("KeyError: 'tracking_code'")
    assert "mod1.py" not in text and "call()" not in text  # frames and their source lines are noise
    assert note is not None and str(len(query)) in note and "without its stack frames" in note


def test_what_is_still_too_long_keeps_its_head_and_error_lines() -> None:
    query = "the import job crashes\n" + "".join(f"WARNING: row {i} skipped, no tracking code\n" for i in range(200)) \
        + "KeyError: 'tracking_code'\n"
    text, note = condense(query)
    assert len(text) <= MAX_QUERY_CHARS
    assert text.startswith("the import job crashes") and text.endswith("KeyError: 'tracking_code'")
    assert note is not None and "1 error line" in note


def test_a_long_query_without_error_lines_keeps_its_head() -> None:
    text, note = condense("word " * 1000)
    assert len(text) <= MAX_QUERY_CHARS and text.startswith("word word") and note and "error line" not in note
