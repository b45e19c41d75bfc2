"""``memstore snapshot``: the derived "top of block" view of a store, computed, never stored.

Current facts (supersession heads, not archived), preferences, the best solution per problem
by utility, and open problems (no solution yet, or none a change has not overtaken), from the
repo store and the global store. A solution a change memory targets is listed as no longer
applying, with the change, never as a fix that works now. Printed as JSON or Markdown, or written with
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
    def changes(mem: Memory) -> list[Memory]:
        """The live change memories that target ``mem``: what may have made it stop applying."""
        return [live[c] for c in graph.changes_for.get(mem.id, []) if c in live]

    def changed(mem: Memory) -> dict[str, Any]:
        return {**_item(ws, mem, graph),
                "changed_by": [{"id": c.id, "scope": c.scope, "text": c.text} for c in changes(mem)]}

    solved, open_ = [], []
    for problem in sorted((m for m in live.values() if m.kind == "problem"), key=lambda m: (m.created, m.id)):
        attempts = [live[a] for a in graph.attempts.get(problem.id, []) if a in live]
        solutions = by_utility([a for a in attempts if a.kind == "solution"])
        failed = [_item(ws, a, graph) for a in by_utility([a for a in attempts if a.kind == "failed_tactic"])]
        entry: dict[str, Any] = {"problem": _item(ws, problem, graph), "failed_tactics": failed}
        # A solution a change targets worked once; the change says something moved under it.
        # It is shown apart, with the change, never as a fix that works now.
        current = [a for a in solutions if not changes(a)]
        outdated = [changed(a) for a in solutions if changes(a)]
        if outdated:
            entry["no_longer_applies"] = outdated
        if current:
            entry["best_solution"] = _item(ws, current[0], graph)
            entry["other_solutions"] = [_item(ws, s, graph) for s in current[1:]]
            solved.append(entry)
        else:  # never solved, or every fix was overtaken by a change: open (again)
            open_.append(entry)
    scopes = {scope: sum(1 for m in memories.values() if m.scope == scope) for scope in ws.scopes()}
    return {"ok": True, "facts": [changed(m) if changes(m) else _item(ws, m, graph) for m in facts],
            "preferences": [_item(ws, m, graph) for m in prefs], "solutions": solved, "open_problems": open_,
            "counts": {"memories": len(memories), "archived": len(memories) - len(live), **scopes}}


def _line(m: dict[str, Any], prefix: str = "- ") -> str:
    text = " ".join(m["text"].split())
    util = f", utility {m['utility']:+.2f}" if m["votes"] else ""
    line = f"{prefix}{text} (`{m['id'][:10]}`{', global' if m['scope'] == 'global' else ''}{util})"
    for c in m.get("changed_by", []):
        line += f"\n  - changed since: {' '.join(c['text'].split())} (`{c['id'][:10]}`)"
    return line


def to_markdown(snap: dict[str, Any]) -> str:
    out = ["# Memory snapshot", "",
           "Derived from `.memory/` and the global store (`~/.memory`, marked global) by "
           "`memstore snapshot --markdown`; do not edit, regenerate it. "
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
        out += [_line(o, "- No longer applies (a change targets it): ") for o in s.get("no_longer_applies", [])]
        out += [_line(f, "- Watch-out (failed): ") for f in s["failed_tactics"]]
        out.append("")
    out += ["## Open problems", ""]
    if not snap["open_problems"]:
        out += ["(none)", ""]
    for p in snap["open_problems"]:
        out.append(_line(p["problem"]))
        out += [_line(o, "  - solved once, no longer applies (a change targets it): ")
                for o in p.get("no_longer_applies", [])]
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
