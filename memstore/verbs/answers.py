"""The write and update verbs' answers, typed (the README's "JSON contracts": write, update).
The read answer is ``memstore.read.answers.ReadAnswer``."""

from __future__ import annotations

from typing import Any, TypedDict


class WriteAnswer(TypedDict, total=False):
    """``content`` (the file that would be written) with ``mode: dry_run`` only."""

    ok: bool
    id: str
    kind: str
    scope: str
    path: str
    mode: str
    content: str


class UpdateAnswer(TypedDict, total=False):
    """``effect`` says what the event changes (the memory's utility, archive state, links)."""

    ok: bool
    id: str
    type: str
    scope: str
    effect: dict[str, Any]
    path: str
    mode: str
    content: str
