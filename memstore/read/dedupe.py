"""The duplicate gate (SPEC §3 gate 4): refuse a near-duplicate of the same kind and suggest
reinforcing the existing memory with a utility vote instead."""

from __future__ import annotations

import re
from typing import Any

from ..errors import DuplicateError
from ..store.model import Memory
from ..store.workspace import Workspace


def _norm(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


def find_duplicates(ws: Workspace, mem: Memory) -> list[dict[str, Any]]:
    """Same-kind memories within the configured cosine of ``mem``'s text; an exact copy has
    cosine 1.0. Without an embedder, same-kind memories with the same normalised text."""
    scopes = ["global"] if mem.scope == "global" else ws.scopes()
    threshold = float(ws.config.number("duplicates", "threshold"))
    try:
        from ..index.embedder import EmbedderUnavailable
        from .retrieve import semantic_duplicates

        return semantic_duplicates(ws, mem, scopes, threshold)
    except (ImportError, EmbedderUnavailable):
        pass  # no model here: fall back to exact (normalised) text
    norm = _norm(mem.text)
    found: list[dict[str, Any]] = []
    for scope in scopes:
        for other in ws.catalog(scope).memories.values():
            if other.kind == mem.kind and _norm(other.text) == norm:
                found.append({"id": other.id, "kind": other.kind, "scope": other.scope,
                              "similarity": 1.0, "text": other.text})
    return found


def check_duplicates(ws: Workspace, mem: Memory) -> None:
    dups = find_duplicates(ws, mem)
    if not dups:
        return
    best = dups[0]
    raise DuplicateError(
        f"a {mem.kind} like this already exists ({best['id']}, similarity {best['similarity']:.2f})",
        field="memory.text",
        hint="reinforce it with a utility_vote instead, or pass allow_duplicate: true if it is really new",
        details={
            "duplicates": dups,
            "suggestion": {"op": "update", "type": "utility_vote", "memory_id": best["id"], "vote": 1,
                           "rationale": "seen again"},
        },
    )
