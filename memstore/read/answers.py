"""The read verb's answer, typed: what ``retrieve.read`` returns and every surface renders (the
CLI prints it as JSON or text, the daemon forwards it, the MCP server hands it to the agent).
The README's "JSON contracts" section documents the same fields."""

from __future__ import annotations

from typing import Any, TypedDict


class ResultLinks(TypedDict):
    problem: str | None
    solutions: list[str]
    failed_tactics: list[str]
    changes: list[str]
    superseded_by: str | None
    relations: dict[str, list[dict[str, str]]]  # {"out": [{type, id}], "in": [...]}


class Doubt(TypedDict):
    """One doubt a memory carries (``store/relations.doubts``): ``doubt`` is disputed,
    unconfirmed, stale or voted_down; ``why`` says what makes it so."""

    doubt: str
    why: str


class ReadResult(TypedDict, total=False):
    """One memory in an answer. ``note`` comes with failed tactics only."""

    id: str
    kind: str
    scope: str
    text: str
    score: float
    reasons: list[str]
    links: ResultLinks
    attached_to: dict[str, str] | None
    utility: dict[str, float]  # {"local", "global", "votes"}: "global" is a Python keyword
    stale: dict[str, Any] | None
    confidence: float | None
    review: bool  # written less sure than review.confidence_below, not confirmed by a vote since
    doubts: list[Doubt]
    evidence: list[str]
    tags: list[str]
    created: str | None
    path: str
    history: list[dict[str, Any]]
    note: str
    explain: Explanation  # with ``explain: true`` only


class Explanation(TypedDict):
    """Why one result came back (``read --explain``; docs/json.md)."""

    lanes: dict[str, Any]  # {"vector", "keyword", "fused", "keyword_weight"}
    gates: list[dict[str, Any]]  # the query gate, the per-result bar, the relative gap, the limit
    steps: list[dict[str, Any]]  # the lanes, association hops and links that brought it
    scores: dict[str, float]  # {"ranked", "after_links", "final"}
    votes: dict[str, Any]  # the votes on it and the factor they gave its score


class Expected(TypedDict, total=False):
    """One id of ``read --expect``: where it came back, or the step that left it out."""

    id: str
    kind: str
    returned: bool
    why: str  # returned, out_of_scope, archived, superseded, filtered, not_indexed, query_gate, ...
    detail: str
    position: int
    lanes: dict[str, Any]
    score: float
    bar: float
    drop: float
    limit: int
    gate: dict[str, Any]
    votes: dict[str, Any]
    superseded_by: str
    head: str


class DisputeSide(TypedDict):
    id: str
    kind: str
    scope: str
    text: str
    author: str | None
    created: str | None
    confidence: float | None
    evidence: list[str]


class Dispute(TypedDict):
    ids: list[str]
    sides: list[DisputeSide]
    guidance: str


class Partial(TypedDict, total=False):
    """``embedded`` and ``total`` always; ``unread`` while a store is still being read."""

    embedded: int
    total: int
    unread: int  # memory files of the stores in scope not read yet
    reason: str  # what is unfinished: the reading, the embedding, or both


class ReadAnswer(TypedDict, total=False):
    """``ok``, ``guidance``, ``content_trust``, ``results``, ``disputes`` and ``stats`` always;
    ``partial`` while vectors are missing; ``warnings`` when something was degraded or cut;
    ``expected`` when the request names memories it expected."""

    ok: bool
    guidance: str
    content_trust: str
    results: list[ReadResult]
    disputes: list[Dispute]
    stats: dict[str, Any]
    partial: Partial
    warnings: list[str]
    expected: list[Expected]  # with ``expect`` only
