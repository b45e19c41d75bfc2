"""Whoosh analysis pieces of our own. A Whoosh schema is pickled into the index with its
analysers, so a filter class must live at a stable module path (not inside a function)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from whoosh.analysis import Filter

from .. import ranking


class CodeFormsFilter(Filter):
    """Each token becomes its ``ranking.code_forms``: an identifier whole and by pieces,
    a plain word nothing (the ``text`` field has it)."""

    def __call__(self, tokens: Iterator[Any]) -> Iterator[Any]:
        for tok in tokens:
            for form in ranking.code_forms(tok.text):
                tok.text = form
                yield tok
