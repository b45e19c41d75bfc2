"""Whoosh analysis pieces of our own. A Whoosh schema is pickled into the index with its
analysers, so a filter class must live at a stable module path (not inside a function)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from whoosh.analysis import Filter


class CodeFormsFilter(Filter):
    """Each token becomes its ``forms`` (``terms.code_forms``: an identifier whole and by
    pieces, a plain word nothing, the ``text`` field has it). The rule is passed in, not
    imported: terms.py builds its analysers from this module, so this one cannot import it back."""

    def __init__(self, forms: Callable[[str], list[str]]) -> None:
        self.forms = forms

    def __call__(self, tokens: Iterator[Any]) -> Iterator[Any]:
        for tok in tokens:
            for form in self.forms(tok.text):
                tok.text = form
                yield tok
