"""``memstore eval``: a team measures its own store with the questions it already answered.

Each problem in the store is a query (its text, as an agent would describe it) and the answers
the store itself records for it are what a good read returns: the problem's solutions and failed
tactics (their ``problem`` link), and every memory voted up for that problem. The problem finds
itself, so it is set aside before judging. Each query is read once, through the whole pipeline
under the settings in force (and again under ``--set`` overrides); the same read's lanes, each
alone (memories by similarity, by BM25), are judged beside it, so a team sees what the fusion,
the gates and the links add over either lane.

Figures always come with their n: a store with three such problems measures three queries.
Nothing is written (the read is not logged to any episode).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import UsageError
from ..read.explain import similarities
from ..read.retrieve import answer_in
from ..read.scope import Scope, open_scope
from ..read.tuning import ReadParams, section_settings
from ..store.plainyaml import parse
from ..store.workspace import Workspace

KS = (1, 5, 10)
SYSTEMS = ("memstore", "keyword_only", "vector_only")
NOTHING = ("no problem in scope has a solution or failed tactic linked to it, or a memory voted up for it: "
           "nothing to measure yet (write the solutions and failed tactics of the problems you solve, "
           "linked to them, or vote on what helped)")


def evaluate(ws: Workspace, *, overrides: Sequence[str] = (), include_global: bool = False) -> dict[str, Any]:
    """Recall@1/5/10, MRR and abstention of the store's reads over its own problems, for the
    settings in force and (``overrides``: ``read.NAME=VALUE``) with those changed, each beside
    the keyword lane and the vector lane alone. Raises UsageError for an override memstore
    cannot use (before anything is read)."""
    current_section = ws.config.get("read") or {}
    runs: list[tuple[str, dict[str, Any], ReadParams | None]] = [("current", {}, None)]
    if overrides:
        changed = _overrides(overrides)
        merged = _merge(current_section if isinstance(current_section, Mapping) else {}, changed)
        params, problems = section_settings(merged)
        bad = [msg for _, msg in problems if any(f"read.{name}" in msg for name in changed)]
        if bad:
            said = [m.replace("config.yaml ", "--set ").replace(", ignored", "").replace("; the default applies", "")
                    for m in bad]
            raise UsageError("; ".join(said),
                             hint="a name of RankingParams or UtilityParams (docs/configuration.md)")
        runs.append(("overrides", changed, params))
    out: dict[str, Any] = {"ok": True, "queries": 0, "k": list(KS), "runs": []}
    for label, changed, params in runs:
        sc = open_scope(ws, include_global, params)
        cases = cases_in(sc)
        out.update(queries=len(cases), sources=_sources(cases),
                   expected_answers=sum(len(c["expected"]) for c in cases))
        if not cases:
            out["message"] = NOTHING
            return out
        warnings: list[str] = []
        judged = [_judge(sc, c, warnings) for c in cases]
        out["runs"].append({"settings": label, "overrides": changed,
                            "systems": {s: _score([j[s] for j in judged], [c["expected"] for c in cases])
                                        for s in SYSTEMS}})
        if warnings:
            out["warnings"] = list(dict.fromkeys([*out.get("warnings", []), *warnings]))
        if label == "current":
            out["per_query"] = [{"problem": c["problem"], "expected": sorted(c["expected"]),
                                 "from": sorted(c["from"]),
                                 **{s: _first(j[s], c["expected"]) for s in SYSTEMS}}
                                for c, j in zip(cases, judged, strict=True)]
    return out


def cases_in(sc: Scope) -> list[dict[str, Any]]:
    """One query per problem in scope that has answers on record: its linked solutions and
    failed tactics, and the memories voted up for it (archived and superseded ones left out:
    a read never returns them)."""
    g, mems = sc.graph, sc.memories
    live = {m for m in mems if m not in g.archived and m not in g.superseded_by}
    voted: dict[str, set[str]] = {}
    for mid, votes in g.votes.items():
        for v in votes:
            if v.problem and v.value > 0:
                voted.setdefault(v.problem, set()).add(mid)
    cases = []
    for pid in sorted(m for m in live if mems[m].kind == "problem"):
        linked = {a for a in g.attempts.get(pid, []) if a in live}
        up = {m for m in voted.get(pid, ()) if m in live and m != pid}
        if linked or up:
            cases.append({"problem": pid, "query": mems[pid].text, "expected": linked | up,
                          "from": {*(["links"] if linked else []), *(["votes"] if up else [])}})
    return cases


def _sources(cases: list[dict[str, Any]]) -> dict[str, int]:
    return {src: sum(1 for c in cases if src in c["from"]) for src in ("links", "votes")}


def _judge(sc: Scope, case: dict[str, Any], warnings: list[str]) -> dict[str, list[str] | None]:
    """The ranked ids each system answers for one case, its own problem set aside (None: that
    lane could not run, e.g. no embedder; the read's warnings say why, added to ``warnings``)."""
    trace: dict[str, Any] = {}
    # One more than the deepest cut, so ten remain when the problem itself comes back.
    request = {"query": case["query"], "limit": max(KS) + 1}
    answer, _ = answer_in(sc, request, time.perf_counter(), trace)
    warnings += answer.get("warnings", [])
    me = case["problem"]
    got = [r["id"] for r in answer["results"] if r["id"] != me]
    rows = trace.get("rows")
    keyword = vector = None
    if rows is not None and trace.get("lane_b") is not None:
        keyword = [rows.ids[r] for r, _ in trace["lane_b"].hits if rows.ids[r] != me][: max(KS)]
    sims = similarities(trace)
    if rows is not None and sims is not None:
        order = np.argsort(-np.nan_to_num(sims, nan=-np.inf), kind="stable")
        vector = [rows.ids[i] for i in order[: max(KS) + 1] if not np.isnan(sims[i]) and rows.ids[i] != me]
        vector = vector[: max(KS)]
    return {"memstore": got[: max(KS)], "keyword_only": keyword, "vector_only": vector}


def _score(answers: list[list[str] | None], expected: list[set[str]]) -> dict[str, Any] | None:
    """recall@k (the share of each query's expected answers in its top k, averaged), MRR (the
    first expected answer's 1/rank, 0 when none is in the top 10) and how many queries came back
    empty, over the ``n`` queries the system could answer."""
    pairs = [(a, e) for a, e in zip(answers, expected, strict=True) if a is not None]
    if not pairs:
        return None
    n = len(pairs)
    out: dict[str, Any] = {"n": n}
    for k in KS:
        out[f"recall@{k}"] = round(sum(len(e & set(a[:k])) / len(e) for a, e in pairs) / n, 4)
    out["mrr"] = round(sum(1.0 / (_rank(a, e) or float("inf")) for a, e in pairs) / n, 4)
    out["abstained"] = sum(1 for a, _ in pairs if not a)
    return out


def _rank(answer: list[str], expected: set[str]) -> int | None:
    return next((i + 1 for i, mid in enumerate(answer[: max(KS)]) if mid in expected), None)


def _first(answer: list[str] | None, expected: set[str]) -> dict[str, Any] | None:
    if answer is None:
        return None
    return {"first_hit": _rank(answer, expected), "found": len(expected & set(answer[: max(KS)])),
            "returned": len(answer)}


def _overrides(given: Sequence[str]) -> dict[str, Any]:
    """``read.NAME=VALUE`` (``read.query_bar.targeted=0.35`` for one key of a mapping), each
    value read as config.yaml would read it."""
    out: dict[str, Any] = {}
    for item in given:
        key, sep, raw = item.partition("=")
        path = key.strip().split(".")
        if not sep or len(path) not in (2, 3) or path[0] != "read" or not all(path) or "\n" in raw:
            raise UsageError(f"--set {item!r}: expected read.NAME=VALUE (or read.NAME.KEY=VALUE)",
                             hint="e.g. --set read.relative_floor=0.3")
        parsed = parse(f"v: {raw.strip()}") if raw.strip() else None
        value = parsed["v"] if parsed is not None and "v" in parsed else raw.strip()
        if len(path) == 3:
            out.setdefault(path[1], {})
            if not isinstance(out[path[1]], dict):
                raise UsageError(f"--set {item!r}: read.{path[1]} is given twice, whole and by key")
            out[path[1]][path[2]] = value
        else:
            out[path[1]] = value
    return out


def _merge(section: Mapping[str, Any], changed: Mapping[str, Any]) -> dict[str, Any]:
    """config.yaml's ``read:`` with the overrides on top (a mapping's keys one by one)."""
    out = dict(section)
    for name, value in changed.items():
        old = out.get(name)
        out[name] = {**old, **value} if isinstance(old, Mapping) and isinstance(value, Mapping) else value
    return out
