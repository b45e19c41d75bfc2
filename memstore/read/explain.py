"""Why a read answered what it did (``read --explain``) and why it left a memory out
(``read --expect ID``).

Nothing here scores: the pipeline notes what it computed in a ``trace`` dict when a request
asks for an explanation (``retrieve.answer_in``, ``ranking.rank``), and this module reads those
notes back into words and numbers. A plain read passes no trace and computes nothing extra.

What the trace holds (each key written by the step that computed it):
- ``ranking.rank``: ``kw`` (row -> the keyword feature fused), ``scored`` (row -> (fused
  score, reasons) before the cuts), ``floor``, ``cap``, ``gap`` (the relative drop and the rows
  after it), ``by_name`` (rows a look-up by name answered);
- ``retrieve.answer_in``: ``rows``, ``qvec``, ``lane_b``, ``ranked``, ``ok``, ``waiting``,
  ``limit``, ``params``, ``found`` / ``linked`` / ``weighed`` (id -> score after the ranking,
  after the links, after the votes), ``utils``, ``problem_id``, ``psim``, ``chosen``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..store.model import Memory
from .answers import ReadAnswer
from .scope import Scope


def explain(answer: ReadAnswer, sc: Scope, request: Mapping[str, Any], trace: dict[str, Any]) -> None:
    """Add ``explain`` to each result (``request["explain"]``) and the ``expected`` list
    (``request["expect"]``) to ``answer``. An expected id that names no memory in any store
    raises the lookup's error (NotFound, AmbiguousId): the question was about that memory, and
    a typo must not read as "not returned"."""
    if request.get("explain"):
        for result in answer["results"]:
            result["explain"] = _explain_result(result["id"], result["reasons"], sc, trace)
    if request.get("expect"):
        returned = [r["id"] for r in answer["results"]]
        answer["expected"] = [_expected(sc.find(e, field_name="expect"), returned, sc, request, trace)
                              for e in request["expect"]]


# -- what came back ---------------------------------------------------------------------------------
def _explain_result(mid: str, reasons: list[str], sc: Scope, t: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"lanes": lanes(mid, t), "gates": _gates(mid, sc, t), "steps": _steps(reasons)}
    scores = {name: round(float(t[key][mid]), 4) for name, key in
              (("ranked", "found"), ("after_links", "linked"), ("final", "weighed")) if mid in t.get(key, {})}
    out["scores"] = scores
    out["votes"] = _votes(mid, sc, t)
    return out


def similarities(t: dict[str, Any]) -> np.ndarray | None:
    """Every row's cosine with the query, NaN for rows out of scope or without a vector yet
    (computed once per explained read)."""
    if "sims" in t:
        return t["sims"]
    rows, qvec = t.get("rows"), t.get("qvec")
    sims = None
    if rows is not None and qvec is not None and rows.matrix.shape[0]:
        sims = (rows.matrix @ qvec.astype(np.float32, copy=False)).astype(np.float64)
        if rows.excluded is not None:
            sims[rows.excluded] = np.nan
        for mid in t.get("waiting", ()):
            if mid in rows.pos:
                sims[rows.pos[mid]] = np.nan
    t["sims"] = sims
    return sims


def lanes(mid: str, t: dict[str, Any]) -> dict[str, Any]:
    """The vector lane (similarity and its rank among the memories in scope), the keyword lane
    (BM25 over its store's best, rank, the share of the query's idf the memory holds, and the
    feature the fusion used) and the fused score, each None where that lane did not see it."""
    rows = t.get("rows")
    row = rows.pos.get(mid) if rows is not None else None
    rp = t.get("params")
    vector = keyword = None
    sims = similarities(t)
    if row is not None and sims is not None and not np.isnan(sims[row]):
        s = float(sims[row])
        vector = {"similarity": round(s, 4), "rank": int(np.sum(sims > s)) + 1,
                  "pool": rp.semantic_pool if rp is not None else None}
    lane_b = t.get("lane_b")
    if row is not None and lane_b is not None:
        at = next((n for n, (r, _) in enumerate(lane_b.hits) if r == row), None)
        if at is not None:
            ev = lane_b.evidence.get(row)
            keyword = {"bm25": round(float(lane_b.hits[at][1]), 4), "rank": at + 1,
                       "coverage": round(float(ev[0]), 4) if ev else None,
                       "feature": round(float(t.get("kw", {}).get(row, 0.0)), 4),
                       "lane": rp.keyword_lane if rp is not None else None}
    scored = t.get("scored") or {}
    fused = round(float(scored[row][0]), 4) if row is not None and row in scored else None
    weight = rp.keyword_weight if rp is not None else None
    return {"vector": vector, "keyword": keyword, "fused": fused, "keyword_weight": weight}


def _gate(t: dict[str, Any]) -> dict[str, Any] | None:
    ranked = t.get("ranked")
    if ranked is None:
        return None
    g = ranked.gate
    return {"gate": "query", "passed": g.passed, "how": g.reason, "top_similarity": round(g.top_similarity, 4),
            "bar": round(g.bar, 4)}


def _floor(row: int, sc: Scope, t: dict[str, Any]) -> dict[str, Any] | None:
    """The per-result bar a ranked memory had to clear: the larger of the mode's floor and the
    relative cut's share of the best score, plus its kind's offset."""
    scored, rp, rows = t.get("scored"), t.get("params"), t.get("rows")
    if not scored or rp is None or rows is None or row not in scored or "floor" not in t:
        return None
    offset = float(rp.kind_offset.get(rows.kinds[row], 0.0))
    best = max(s for s, _ in scored.values())
    bar = float(t["floor"]) + offset
    return {"gate": "result_floor", "score": round(float(scored[row][0]), 4), "bar": round(bar, 4),
            "passed": float(scored[row][0]) >= bar, "best": round(best, 4),
            "relative_floor": rp.relative_floor, "kind_offset": offset}


def _gates(mid: str, sc: Scope, t: dict[str, Any]) -> list[dict[str, Any]]:
    out = [g for g in (_gate(t),) if g]
    rows = t.get("rows")
    row = rows.pos.get(mid) if rows is not None else None
    floor = _floor(row, sc, t) if row is not None else None
    if floor is not None:
        out.append(floor)
    elif row is not None and row in t.get("by_name", ()):
        out.append({"gate": "by_name", "passed": True, "how": "holds a name the query is made of, verbatim"})
    elif mid in t.get("linked", {}):
        out.append({"gate": "link", "passed": True,
                    "how": "brought by a link: a linked memory scores its parent's score times the link factor, "
                           "past the per-result floor"})
    gap = t.get("gap")
    if gap is not None and floor is not None:  # the gap ends the ranking's list; links come after it
        out.append({"gate": "relative_gap", "passed": True, "drop": round(float(gap[0]), 4)})
    if mid in t.get("chosen", ()):
        out.append({"gate": "limit", "passed": True, "position": t["chosen"].index(mid) + 1,
                    "limit": t.get("limit")})
    return out


def _steps(reasons: list[str]) -> list[dict[str, Any]]:
    """The reasons the pipeline gave, as steps: which lane, association hop or link brought it."""
    out: list[dict[str, Any]] = []
    for why in reasons:
        head, _, rest = why.partition(":")
        if head in ("semantic", "keyword"):
            out.append({"step": head, "score": float(rest)})
        elif head == "assoc":
            parent, _, sim = rest.rpartition(":")
            out.append({"step": "association", "from": parent, "similarity": float(sim)})
        elif head == "link":
            kind, _, parent = rest.partition(":")
            out.append({"step": "link", "type": kind, "from": parent})
        elif head == "supersedes":
            out.append({"step": "supersedes", "replaces": rest})
        else:
            out.append({"step": why})
    return out


def _votes(mid: str, sc: Scope, t: dict[str, Any]) -> dict[str, Any]:
    """The votes on this memory and what they did to its score: U_local (votes weighed by how
    close their problem is to this read's), U_global, and the factor the score was multiplied by."""
    votes = sc.graph.votes.get(mid, [])
    local, glob, n = t.get("utils", {}).get(mid, (0.0, 0.0, len(votes)))
    up = sc.params.utility
    problem_id, psim = t.get("problem_id"), t.get("psim", {})
    listed = []
    for v in votes:
        rel = (0.0 if v.problem is None else 1.0 if problem_id is not None and v.problem == problem_id
               else max(0.0, float(psim.get(v.problem, 0.0))))
        listed.append({"value": v.value, "weight": v.weight, "problem": v.problem, "author": v.author,
                       "created": v.created, "relevance": round(rel, 4)})
    return {"count": n, "local": round(local, 4), "global": round(glob, 4),
            "factor": round(1.0 + up.alpha * local + up.beta * glob, 4), "alpha": up.alpha, "beta": up.beta,
            "negative_cut": up.negative_cut, "votes": listed}


# -- what did not -------------------------------------------------------------------------------------
def _expected(mem: Memory, returned: list[str], sc: Scope, request: Mapping[str, Any],
              t: dict[str, Any]) -> dict[str, Any]:
    mid = mem.id
    out: dict[str, Any] = {"id": mid, "kind": mem.kind, "returned": mid in returned}
    if mid in returned:
        return {**out, "why": "returned", "position": returned.index(mid) + 1,
                "detail": f"returned at position {returned.index(mid) + 1}"}
    why, detail, extra = _missed(mem, sc, request, t)
    out.update(why=why, detail=detail, **extra)
    if why not in ("out_of_scope", "archived", "filtered", "superseded"):
        out["lanes"] = lanes(mid, t)
    return out


def _missed(mem: Memory, sc: Scope, request: Mapping[str, Any],
            t: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(code, sentence, values) of the first step that left ``mem`` out, in pipeline order."""
    mid, g = mem.id, sc.graph
    if mem.scope not in sc.stores:
        return "out_of_scope", f"it is in the {mem.scope} store, which this read left out", {}
    if mid in g.archived:
        return "archived", "it is archived: archived memories are never returned", {}
    if mid in g.superseded_by:
        head = g.head(mid)
        state = "returned in its place" if head in t.get("chosen", ()) else "not returned either"
        return ("superseded", f"superseded by {g.superseded_by[mid]}: a superseded fact folds into its "
                f"current head {head} ({state})", {"superseded_by": g.superseded_by[mid], "head": head})
    blocked = _filter(mem, sc, request)
    if blocked is not None:
        return "filtered", blocked, {}
    rows = t.get("rows")
    if rows is None or mid not in rows.pos or rows.is_excluded(rows.pos[mid]):
        return "not_indexed", "it is not in the index yet (run `memstore reindex`, or read again)", {}
    row = rows.pos[mid]
    if mid in t.get("linked", {}):
        return _after_links(mid, sc, t)
    if mid in t.get("found", {}):  # ranked, then dropped by a link step other than supersession
        return "folded", "ranked, then folded into another memory by the links", {}
    gate = _gate(t)
    if gate is not None and not gate["passed"]:
        return ("query_gate", f"the whole query was refused ({gate['how']}): no memory was returned",
                {"gate": gate})
    scored = t.get("scored") or {}
    if row not in scored:
        return _not_candidate(mid, row, t)
    score = float(scored[row][0])
    floor = _floor(row, sc, t)
    if floor is not None and not floor["passed"]:
        return ("below_floor", f"fused score {score:.4f} is under the result bar {floor['bar']:.4f} (the larger "
                f"of the floor and {floor['relative_floor']} x the best score {floor['best']:.4f}, plus the kind "
                f"offset {floor['kind_offset']:+.2f})", {"score": round(score, 4), "bar": floor["bar"]})
    gap = t.get("gap")
    if gap is not None and row in gap[1]:
        return ("relative_gap", f"fused score {score:.4f} comes after a drop of at least {gap[0]:.4f} between "
                "neighbouring results: the answer ends where relevance falls off", {"score": round(score, 4),
                                                                                     "drop": round(gap[0], 4)})
    return ("limit", f"fused score {score:.4f} cleared every bar, but the ranking kept only its best {t.get('cap')}",
            {"score": round(score, 4), "limit": t.get("cap")})


def _filter(mem: Memory, sc: Scope, request: Mapping[str, Any]) -> str | None:
    """The read's filter that left ``mem`` out, named with its value, or None."""
    kinds = request.get("kinds")
    if kinds and mem.kind not in kinds:
        return f"its kind {mem.kind} is not among the kinds asked for ({', '.join(kinds)})"
    f = request.get("filters") or {}
    if f.get("since") and (mem.created or "") < f["since"]:
        return f"created {mem.created or 'at no recorded time'}, before the since filter {f['since']}"
    if "author" in f and mem.author.strip().lower() != f["author"].strip().lower():
        return f"written by {mem.author!r}, not the author asked for ({f['author']!r})"
    if "min_confidence" in f and (mem.confidence is None or mem.confidence < float(f["min_confidence"])):
        return f"its confidence {mem.confidence} is under min_confidence {f['min_confidence']}"
    tags = {t.lower() for t in f.get("tags") or []}
    if tags and not tags & {t.lower() for t in mem.tags}:
        return f"it carries none of the tags asked for ({', '.join(sorted(tags))})"
    return None


def _not_candidate(mid: str, row: int, t: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """Neither lane proposed it, or a look-up by name left everything but the name's holders out."""
    rp = t.get("params")
    ln = lanes(mid, t)
    vec, kw = ln["vector"], ln["keyword"]
    if t.get("by_name") is not None and rp is not None and rp.named_holders_only:
        return ("not_named", "the query is nothing but names of the store, and only the memories holding one "
                "of them verbatim are answered; this one holds none", {})
    parts = []
    if vec is not None:
        parts.append(f"similarity {vec['similarity']:.4f} ranks {vec['rank']} (the vector lane takes the best "
                     f"{vec['pool']})")
    else:
        parts.append("the vector lane did not see it")
    if kw is not None:
        parts.append(f"BM25 rank {kw['rank']} (the keyword lane takes the best {kw['lane']})")
    else:
        parts.append("the keyword lane did not find the query's words in it")
    return "not_candidate", "neither lane proposed it: " + "; ".join(parts), {}


def _after_links(mid: str, sc: Scope, t: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """It reached the last stage: the votes dropped it, or the limit cut it."""
    local, _, n = t.get("utils", {}).get(mid, (0.0, 0.0, 0))
    cut = sc.params.utility.negative_cut
    if n and mid not in t.get("weighed", {}):
        return ("votes", f"its votes weigh U_local {local:+.4f} for this context, at or under the negative cut "
                f"{cut:+.2f}: it misled before in a problem like this one",
                {"votes": _votes(mid, sc, t)})
    score = float(t.get("weighed", {}).get(mid, 0.0))
    chosen = t.get("chosen", [])
    last = min((float(t["weighed"][c]) for c in chosen if c in t.get("weighed", {})), default=0.0)
    return ("limit", f"score {score:.4f} after links and votes, but the answer holds {len(chosen)} results "
            f"(limit {t.get('limit')}) and its last scores {last:.4f}", {"score": round(score, 4),
                                                                         "limit": t.get("limit")})

