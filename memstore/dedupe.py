"""The duplicate gate (SPEC §3 gate 4): refuse a near-duplicate of the same kind and suggest
reinforcing the existing memory with a utility vote instead."""

from __future__ import annotations

import re
from typing import Any

from .errors import DuplicateError
from .model import Memory
from .workspace import Workspace


def _norm(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


def find_duplicates(ws: Workspace, mem: Memory) -> list[dict[str, Any]]:
    """Same-kind memories whose text is the same (normalised) or, when the embedder is
    available, whose embedding is within the configured duplicate threshold."""
    scopes = ["global"] if mem.scope == "global" else ws.scopes()
    norm = _norm(mem.text)
    found: dict[str, dict[str, Any]] = {}
    for scope in scopes:
        for other in ws.catalog(scope).memories.values():
            if other.kind == mem.kind and _norm(other.text) == norm:
                found[other.id] = {"id": other.id, "kind": other.kind, "scope": other.scope,
                                   "similarity": 1.0, "text": other.text}
    if found:
        # An exact copy already refuses the write: skip loading the embedder to find more.
        return list(found.values())
    try:
        from .retrieve import semantic_duplicates
    except ImportError:  # the index layer is optional for the gate
        return list(found.values())
    threshold = float(ws.config.get("duplicates", "threshold", 0.95))
    for cand in semantic_duplicates(ws, mem, scopes, threshold):
        found.setdefault(cand["id"], cand)
    return sorted(found.values(), key=lambda c: -c["similarity"])


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
