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
    similar: list[dict[str, Any]]  # the closest existing memories; may_contradict on same-kind claims
    review: bool  # confidence below review.confidence_below: stored, flagged for review
    pending: bool  # a global memory in review mode: proposed, committed once approved
    # scope shared:NAME: the branch pushed to the shared store's remote for review (docs/shared.md)
    url: str
    branch: str
    base: str
    commit: str
    evidence: list[str]
    dropped_links: list[str]
    next: str
    gh: str


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


class ShowAnswer(TypedDict):
    """One memory with everything derived about it (links both ways, supersession, archive
    state, utility) under ``memory.derived``."""

    ok: bool
    content_trust: str
    memory: dict[str, Any]


class ListedMemory(TypedDict):
    id: str
    kind: str
    scope: str
    created: str | None
    author: str | None
    text: str
    tags: list[str]
    archived: bool
    path: str


class ListAnswer(TypedDict):
    """Newest first; ``count`` counts them all, ``memories`` stops at the limit; ``invalid`` lists
    the first files that do not parse and ``invalid_count`` counts every one."""

    ok: bool
    content_trust: str
    count: int
    memories: list[ListedMemory]
    invalid: list[dict[str, str]]
    invalid_count: int
