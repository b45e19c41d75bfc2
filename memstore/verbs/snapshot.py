"""``memstore snapshot``: the derived "top of block" view of a store, computed, never stored.

Current facts (supersession heads, not archived), preferences, the best solution per problem
by utility, and open problems (no solution yet). Printed as JSON or Markdown, or written with
``--out`` to a file outside the stores' canonical folders: it is a projection, and the files
it is derived from stay the only truth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InvalidRequest
from ..store.files import atomic_write
from ..store.graph import Graph
from ..store.model import Memory
from ..store.workspace import Workspace


def _item(ws: Workspace, mem: Memory, graph: Graph) -> dict[str, Any]:
    return {"id": mem.id, "kind": mem.kind, "scope": mem.scope, "text": mem.text, "created": mem.created,
            "utility": round(graph.utility_global(mem.id), 4), "votes": graph.vote_count(mem.id),
            "path": ws.store(mem.scope).display_path(mem.path)}


def snapshot(ws: Workspace) -> dict[str, Any]:
    from .api import combined_graph

    memories, graph = combined_graph(ws)
    live = {mid: m for mid, m in memories.items() if mid not in graph.archived}

    def by_utility(mems: list[Memory]) -> list[Memory]:
        return sorted(mems, key=lambda m: (-graph.utility_global(m.id), m.created, m.id))

    facts = by_utility([m for m in live.values() if m.kind == "fact" and m.id not in graph.superseded_by])
    prefs = by_utility([m for m in live.values() if m.kind == "preference"])
    solved, open_ = [], []
    for problem in sorted((m for m in live.values() if m.kind == "problem"), key=lambda m: (m.created, m.id)):
        attempts = [live[a] for a in graph.attempts.get(problem.id, []) if a in live]
        solutions = by_utility([a for a in attempts if a.kind == "solution"])
        failed = [_item(ws, a, graph) for a in by_utility([a for a in attempts if a.kind == "failed_tactic"])]
        entry: dict[str, Any] = {"problem": _item(ws, problem, graph), "failed_tactics": failed}
        if solutions:
            entry["best_solution"] = _item(ws, solutions[0], graph)
            entry["other_solutions"] = [_item(ws, s, graph) for s in solutions[1:]]
            solved.append(entry)
        else:
            open_.append(entry)
    return {"ok": True, "facts": [_item(ws, m, graph) for m in facts],
            "preferences": [_item(ws, m, graph) for m in prefs], "solutions": solved, "open_problems": open_,
            "counts": {"memories": len(memories), "archived": len(memories) - len(live)}}


def _line(m: dict[str, Any], prefix: str = "- ") -> str:
    text = " ".join(m["text"].split())
    util = f", utility {m['utility']:+.2f}" if m["votes"] else ""
    return f"{prefix}{text} (`{m['id'][:10]}`{', global' if m['scope'] == 'global' else ''}{util})"


def to_markdown(snap: dict[str, Any]) -> str:
    out = ["# Memory snapshot", "",
           "Derived from `.memory/` by `memstore snapshot --markdown`; do not edit, regenerate it. "
           "Current code is ground truth: these are hypotheses to verify.", ""]
    out += ["## Current facts", ""] + ([_line(m) for m in snap["facts"]] or ["(none)"]) + [""]
    out += ["## Preferences", ""] + ([_line(m) for m in snap["preferences"]] or ["(none)"]) + [""]
    out += ["## Best solutions", ""]
    if not snap["solutions"]:
        out += ["(none)", ""]
    for s in snap["solutions"]:
        out += [f"### {' '.join(s['problem']['text'].split())[:120]} (`{s['problem']['id'][:10]}`)", ""]
        out.append(_line(s["best_solution"], "- **Solution:** "))
        out += [_line(o, "- Also worked: ") for o in s["other_solutions"]]
        out += [_line(f, "- Watch-out (failed): ") for f in s["failed_tactics"]]
        out.append("")
    out += ["## Open problems", ""]
    if not snap["open_problems"]:
        out += ["(none)", ""]
    for p in snap["open_problems"]:
        out.append(_line(p["problem"]))
        out += [_line(f, "  - tried, failed: ") for f in p["failed_tactics"]]
    return "\n".join(out).rstrip() + "\n"


def write_out(ws: Workspace, path: Path, text: str) -> dict[str, Any]:
    """Write a snapshot file, refusing the stores themselves (the canonical files live there)."""
    target = path.expanduser().resolve()
    for store in (ws.repo, ws.global_):
        if store is not None and target.is_relative_to(store.root):
            raise InvalidRequest(f"{path} is inside the {store.scope} store ({store.root}); a snapshot is a "
                                 "derived view and is never written among the canonical files",
                                 field="out", code="bad_path", hint="write it elsewhere, e.g. docs/MEMORY.md")
    atomic_write(target, text)
    return {"ok": True, "path": str(target), "bytes": len(text.encode("utf-8"))}
