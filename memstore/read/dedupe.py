"""Write-time judgment (SPEC §3 gate 4): what a new memory is up against.

Redundancy and contradiction are the agent's call: a write answers with the closest existing
memories (``similar``), marking the stored facts and preferences the new one may contradict (same
kind, the same subject by similarity, but not a copy), so the agent can reinforce one (a
utility vote), supersede it (a new fact and a ``fact_update_link``) or link ``contradicts``. Only
a near-exact repeat of the same kind is refused outright, with the id it repeats.

The bars (config ``duplicates``): ``threshold`` 0.95 for a repeat, ``similar`` 0.6 for what is
shown, chosen by bench/research/writebar.py (docs/writing.md has the figures).
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import DuplicateError
from ..store.model import Memory
from ..store.workspace import Workspace

# Kinds that state how things are: two of them on the same subject that are not copies may
# disagree. Problems, attempts and changes describe events; two alike are related, not at odds.
CLAIM_KINDS = ("fact", "preference")


def _norm(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


def _setting(ws: Workspace, key: str, default: float) -> float:
    value = ws.config.get("duplicates", key, default)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def neighbours(ws: Workspace, mem: Memory) -> list[dict[str, Any]]:
    """The memories within the ``similar`` bar of ``mem``, closest first (repo and global for a
    repo memory, global alone for a global one). Without an embedder: those with the same
    normalised text, at similarity 1.0."""
    scopes = ["global"] if mem.scope == "global" else ws.scopes()
    bar = min(float(ws.config.number("duplicates", "similar")), float(ws.config.number("duplicates", "threshold")))
    try:
        from ..index.embedder import EmbedderUnavailable
        from .indexes import semantic_neighbours

        return semantic_neighbours(ws, mem, scopes, bar)
    except (ImportError, EmbedderUnavailable):
        pass  # no model here: fall back to exact (normalised) text
    norm = _norm(mem.text)
    found: list[dict[str, Any]] = []
    for scope in scopes:
        for other in ws.catalog(scope).memories.values():
            if _norm(other.text) == norm:
                found.append({"id": other.id, "kind": other.kind, "scope": other.scope,
                              "similarity": 1.0, "text": other.text})
    return found


def judge(ws: Workspace, mem: Memory) -> list[dict[str, Any]]:
    """The ``similar`` entries a write answers with (at most ``duplicates.candidates``). A
    same-kind memory at or above ``duplicates.threshold`` refuses the write (DuplicateError);
    below it, a fact or preference of the same kind is marked ``may_contradict``."""
    threshold = _setting(ws, "threshold", 0.95)
    k = max(1, int(_setting(ws, "candidates", 5)))
    # Only a retried write (its id fixed by the caller) finds its own file: not a duplicate.
    near = [d for d in neighbours(ws, mem) if d["id"] != mem.id]
    dups = [d for d in near if d["kind"] == mem.kind and d["similarity"] >= threshold]
    if dups:
        best = dups[0]
        raise DuplicateError(
            f"a {mem.kind} like this already exists ({best['id']}, similarity {best['similarity']:.2f})",
            field="memory.text",
            hint="reinforce it with a utility_vote instead, or pass allow_duplicate: true if it is really new",
            details={
                "duplicates": dups[:k],
                "suggestion": {"op": "update", "type": "utility_vote", "memory_id": best["id"], "vote": 1,
                               "rationale": "seen again"},
            },
        )
    shown = near[:k]
    for d in shown:
        if d["kind"] == mem.kind and mem.kind in CLAIM_KINDS and d["similarity"] < threshold:
            d["may_contradict"] = True
    return shown
