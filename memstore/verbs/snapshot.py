"""``memstore snapshot``: the derived "top of block" view of a store, computed, never stored.

Current facts (supersession heads, not archived), preferences, the best solution per problem
by utility, and open problems (no solution yet, or none a change has not overtaken), from the
repo store and the global store. A solution a change memory targets is listed as no longer
applying, with the change, never as a fix that works now; one voted down for its problem is
listed apart too (``voted_down``), never as the best. Both sides of an open dispute are listed
under ``disputed``, never as current facts, and every memory listed carries the doubts a read
gives it (``relations.doubts``, by ``with_doubts``). Printed as JSON or Markdown, or written
with ``--out`` to a file in the repository (never in a store or in ``.git/``): it is a projection,
and the files it is derived from stay the only truth. ``output_path`` is the rule for every file
memstore writes where a flag says (``snapshot --out``, ``guide --install --file``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from .. import gitops
from ..errors import DiskFull, GitError, InvalidRequest
from ..store import relations
from ..store.disk import STORE_DIRNAME
from ..store.files import atomic_write
from ..store.graph import Graph, needs_review
from ..store.model import Memory
from ..store.workspace import Workspace


def _item(ws: Workspace, mem: Memory, graph: Graph) -> dict[str, Any]:
    return {"id": mem.id, "kind": mem.kind, "scope": mem.scope, "text": mem.text, "created": mem.created,
            "utility": round(graph.utility_global(mem.id, ws.config.half_life_days), 4),
            "votes": graph.vote_count(mem.id), "confidence": mem.confidence,
            "path": ws.store(mem.scope).display_path(mem.path)}


def with_doubts(ws: Workspace, items: list[dict[str, Any]], memories: dict[str, Memory], graph: Graph) -> None:
    """``stale``, ``review`` and ``doubts`` for each of ``items`` (memories as ``context`` and
    ``snapshot`` list them), in place: one stale check for them all, then the one rule
    (``relations.doubts``) the reads apply."""
    from ..git.stale import repo_stale, stale_of
    from ..read.scope import checkout_cache

    mems = [memories[i["id"]] for i in items if i["id"] in memories]
    found = stale_of(ws.repo, mems)
    unverified = repo_stale(found, mems, ws.checkouts, checkout_cache(ws))
    for item in items:
        mem = memories.get(item["id"])
        if mem is None:
            continue
        item["stale"] = found.get(mem.id)
        item["review"] = needs_review(mem, ws.config, graph)
        item["doubts"] = relations.doubts(mem, graph, memories, ws.config, stale=item["stale"],
                                          unverified=unverified.get(mem.id))
        if (solution := graph.superseded_tactic(mem, memories)) is not None:
            item["superseded_by"] = solution



def _items_in(snap: dict[str, Any]) -> list[dict[str, Any]]:
    """Every memory item a snapshot lists, wherever it sits."""
    out = [*snap["facts"], *snap["disputed"], *snap["preferences"]]
    for entry in [*snap["solutions"], *snap["open_problems"]]:
        out.append(entry["problem"])
        for key in ("best_solution",):
            if key in entry:
                out.append(entry[key])
        for key in ("other_solutions", "voted_down", "no_longer_applies", "failed_tactics"):
            out += entry.get(key, [])
    return out


def snapshot(ws: Workspace) -> dict[str, Any]:
    from .api import combined_graph

    memories, graph = combined_graph(ws)
    live = {mid: m for mid, m in memories.items() if mid not in graph.archived}
    half_life = ws.config.half_life_days

    def by_utility(mems: list[Memory]) -> list[Memory]:
        return sorted(mems, key=lambda m: (-graph.utility_global(m.id, half_life), m.created, m.id))

    def disputed(mem: Memory) -> bool:
        return any(relations.state(o, graph, memories) == "active" for o in relations.contradicting(mem.id, graph))

    # Both sides of an open dispute are listed as disputed, never as current facts or preferences.
    heads = [m for m in live.values() if m.kind == "fact" and m.id not in graph.superseded_by]
    facts = by_utility([m for m in heads if not disputed(m)])
    prefs = by_utility([m for m in live.values() if m.kind == "preference" and not disputed(m)])
    contested = by_utility([m for m in [*heads, *live.values()] if m.kind in ("fact", "preference") and disputed(m)
                            and m.id not in graph.superseded_by])
    contested = list({m.id: m for m in contested}.values())
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
        # It is shown apart, with the change, never as a fix that works now. One voted down for
        # this problem is never the best: listed apart too.
        down = [a for a in solutions if not changes(a) and graph.problem_votes(a.id, problem.id) < 0]
        current = [a for a in solutions if not changes(a) and a not in down]
        outdated = [changed(a) for a in solutions if changes(a)]
        if outdated:
            entry["no_longer_applies"] = outdated
        if down:
            entry["voted_down"] = [_item(ws, a, graph) for a in down]
        if current:
            entry["best_solution"] = _item(ws, current[0], graph)
            entry["other_solutions"] = [_item(ws, s, graph) for s in current[1:]]
            solved.append(entry)
        else:  # never solved, or every fix was overtaken by a change: open (again)
            open_.append(entry)
    scopes = {scope: sum(1 for m in memories.values() if m.scope == scope) for scope in ws.scopes()}
    snap = {"ok": True, "facts": [changed(m) if changes(m) else _item(ws, m, graph) for m in facts],
            "disputed": [_item(ws, m, graph) for m in contested],
            "preferences": [_item(ws, m, graph) for m in prefs], "solutions": solved, "open_problems": open_,
            "counts": {"memories": len(memories), "archived": len(memories) - len(live), **scopes}}
    with_doubts(ws, _items_in(snap), memories, graph)
    return snap


def _doubt_text(m: dict[str, Any]) -> str:
    label = relations.doubt_label(m.get("doubts"))
    if m.get("superseded_by"):
        label += f" (history: a later solution worked, `{m['superseded_by'][:10]}`)"
    return label


def _line(m: dict[str, Any], prefix: str = "- ") -> str:
    text = " ".join(m["text"].split())
    util = f", utility {m['utility']:+.2f}" if m["votes"] else ""
    line = f"{prefix}{text} (`{m['id'][:10]}`{', global' if m['scope'] == 'global' else ''}{util}){_doubt_text(m)}"
    for c in m.get("changed_by", []):
        line += f"\n  - changed since: {' '.join(c['text'].split())} (`{c['id'][:10]}`)"
    return line


def to_markdown(snap: dict[str, Any]) -> str:
    out = ["# Memory snapshot", "",
           "Derived from `.memory/` and the global store (`~/.memory`, marked global) by "
           "`memstore snapshot --markdown`; do not edit, regenerate it. "
           "Current code is ground truth: these are hypotheses to verify.", ""]
    out += ["## Current facts", ""] + ([_line(m) for m in snap["facts"]] or ["(none)"]) + [""]
    if snap.get("disputed"):
        out += ["## Disputed", "", "These contradict each other: settle them against the code, then record the "
                "outcome.", ""] + [_line(m) for m in snap["disputed"]] + [""]
    out += ["## Preferences", ""] + ([_line(m) for m in snap["preferences"]] or ["(none)"]) + [""]
    out += ["## Best solutions", ""]
    if not snap["solutions"]:
        out += ["(none)", ""]
    for s in snap["solutions"]:
        out += [f"### {' '.join(s['problem']['text'].split())[:120]} (`{s['problem']['id'][:10]}`)", ""]
        out.append(_line(s["best_solution"], "- **Solution:** "))
        out += [_line(o, "- Also worked: ") for o in s["other_solutions"]]
        out += [_line(o, "- No longer applies (a change targets it): ") for o in s.get("no_longer_applies", [])]
        out += [_line(o, "- Voted down for this problem: ") for o in s.get("voted_down", [])]
        out += [_line(f, "- Failed before: " if f.get("superseded_by") else "- Watch-out (failed): ")
                for f in s["failed_tactics"]]
        out.append("")
    out += ["## Open problems", ""]
    if not snap["open_problems"]:
        out += ["(none)", ""]
    for p in snap["open_problems"]:
        out.append(_line(p["problem"]))
        out += [_line(o, "  - solved once, no longer applies (a change targets it): ")
                for o in p.get("no_longer_applies", [])]
        out += [_line(o, "  - voted down for this problem: ") for o in p.get("voted_down", [])]
        out += [_line(f, "  - tried, failed: ") for f in p["failed_tactics"]]
    return "\n".join(out).rstrip() + "\n"


OUTSIDE_FLAG = "--outside-repo"
_PSEUDO_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


def _bad_path(given: Path | str, flag: str, why: str, hint: str | None = None) -> InvalidRequest:
    return InvalidRequest(f"{flag} {given}: {why}; nothing was written", field=flag.lstrip("-").split()[-1],
                          code="bad_path", hint=hint)


def output_path(ws: Workspace, given: Path | str, *, flag: str, base: Path, outside_repo: bool = False) -> Path:
    """Where a flag asks memstore to write ``given`` (relative to ``base``), once it is safe:
    inside the repository's work tree (outside a repository: inside ``base``) unless
    ``outside_repo`` (the ``--outside-repo`` flag) says otherwise; never in ``.git/`` (a hook
    there runs code), never in a store (``.memory/``, the global store: only memories live
    there), never in /proc, /sys or /dev, and only over a regular file. Symlinks are resolved
    first, so a link cannot lead the write out of bounds. ``bad_path`` otherwise."""
    path = Path(given).expanduser()
    target = (path if path.is_absolute() else base / path).resolve()
    if any(target == root or root in target.parents for root in _PSEUDO_ROOTS):
        raise _bad_path(given, flag, f"{target} is a system pseudo-file, not a file to write")
    for store in (ws.repo, ws.global_):
        if store is not None and (target == store.root or target.is_relative_to(store.root)):
            raise _bad_path(given, flag, f"{target} is inside the {store.scope} store ({store.root}), where only "
                            "memory files live", hint="write it elsewhere, e.g. docs/MEMORY.md")
    parts = target.parts
    if ".git" in parts or STORE_DIRNAME in parts:
        name = ".git" if ".git" in parts else STORE_DIRNAME
        raise _bad_path(given, flag, f"{target} is inside a {name}/ folder, which memstore never writes into "
                        "from a flag")
    top = ws.repo.worktree if ws.repo is not None and ws.repo.worktree is not None else gitops.toplevel(base)
    if top is not None:
        try:
            gitdirs = {gitops.git_dir(top).resolve(), gitops.git_dir(top, common=True).resolve()}
        except GitError:
            gitdirs = set()
        if any(target == d or target.is_relative_to(d) for d in gitdirs):
            raise _bad_path(given, flag, f"{target} is inside the repository's git directory")
    root = (top or base).resolve()
    if not outside_repo and not target.is_relative_to(root):
        where = "repository" if top is not None else "current folder"
        raise _bad_path(given, flag, f"{target} is outside the {where} ({root})",
                        hint=f"write inside it, or pass {OUTSIDE_FLAG} to write there on purpose")
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise _bad_path(given, flag, f"cannot use {target}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _bad_path(given, flag, f"{target} exists and is not a regular file (a folder, FIFO or device)")
    return target


def write_output(target: Path, text: str, given: Path | str, flag: str) -> None:
    """``text`` into ``target`` (an ``output_path``): an OS refusal is ``bad_path``, not a crash."""
    try:
        atomic_write(target, text)
    except OSError as exc:
        if isinstance(exc, DiskFull):
            raise
        raise _bad_path(given, flag, f"cannot write {target}: {exc.strerror or exc}") from None


def write_out(ws: Workspace, path: Path, text: str, *, cwd: Path | None = None,
              outside_repo: bool = False) -> dict[str, Any]:
    """Write a snapshot file where ``output_path`` allows (never among the canonical files)."""
    target = output_path(ws, path, flag="--out", base=(cwd or Path.cwd()).resolve(), outside_repo=outside_repo)
    write_output(target, text, path, "--out")
    return {"ok": True, "path": str(target), "bytes": len(text.encode("utf-8"))}
