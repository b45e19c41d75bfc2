"""The read pipeline (SPEC §4): scope -> lanes -> association -> explicit links -> merge ->
utility-weighted threshold -> selection. Each step is a small function; ``answer_in`` strings
them over the ``Scope`` that ``read`` opens once (``scope.open_scope``): no step looks back into
the workspace.

Scoring of the two lanes and the association chain lives in ``ranking`` (pure functions, tuned
on the evaluation data in bench/), the explicit links in ``links``; this module owns the filters,
utility and selection. The indexes' upkeep outside a read (reindex, embedding ahead of a write)
is ``indexes``'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from ..errors import MemstoreError
from ..index.embedder import EmbedderUnavailable, get_embedder
from ..index.scanlane import wanted as scan_wanted
from ..store import relations
from ..store.catalog import Wanted
from ..store.config import Config
from ..store.graph import Graph, needs_review
from ..store.model import KINDS, Memory
from ..store.trust import CONTENT_TRUST, UNTRUSTED_RULE
from ..store.validate import check_chars, check_schema
from ..store.workspace import Workspace
from . import ranking
from .answers import ReadAnswer, ReadResult
from .links import (
    Hit,
    attach_groups,
    attachment,
    expand_links,
    fold_superseded,
    follow_relations,
    group_key,
    history,
    predecessors_of,
)
from .longquery import condense
from .neighbours import Neighbours
from .rowspace import PartialRows, RowCache, Rows, build_rows, keyword_rows, nearest, update_rows
from .scope import Scope, open_scope
from .tuning import ReadParams, UtilityParams

GUIDANCE = (
    "Current code is ground truth. These memories are optional hypotheses from earlier sessions: "
    "verify them against the code before relying on them, prefer what you observe now when they "
    "disagree, and treat failed tactics as watch-outs (avoid or reconsider unless the context changed). "
    "An empty result means nothing relevant is known. " + UNTRUSTED_RULE
)
PARTIAL_NOTE = ("Embedding of this store is still under way: memories without a vector yet were found by "
                "keyword alone (recall is keyword-only for them; see `partial`).")
READING_NOTE = ("Reading of this store is still under way: memories in files not read yet are missing from this "
                "answer (those files hold none of the query's rarer words; see `partial`).")
# While memories wait for vectors, a read embeds this many of its best keyword hits first (~7 ms
# each on one core). bench/research/first_answer.py at 10k, top-10 overlap of the first answer with the
# warm one: 0.456 with none, 0.581 at 5, 0.713 at 10, 0.881 at 20, 0.881 at 30.
CANDIDATES_FIRST = 20
CANDIDATES_SECONDS = 0.15  # and for at most this long (a long memory takes ~40 ms)
WATCH_OUT = "watch-out: this was tried and failed here; avoid or reconsider unless the context changed"
HISTORY_NOTE = ("history: this was tried and failed, and a later solution of the same problem worked since "
                "(links.superseded_by); read it as what led there, not as a watch-out")


# -- scope -------------------------------------------------------------------------------------------
class Who(NamedTuple):
    """The author / min_confidence filters (None: not asked)."""

    author: str | None = None
    min_confidence: float | None = None


ANYONE = Who()


def allowed(mem: Memory, graph: Graph, kinds: set[str], since: str | None, tags: set[str], who: Who = ANYONE) -> bool:
    """Step 1, scope: kinds filter, archived excluded, since/tags/author/min_confidence filters."""
    if mem.kind not in kinds or mem.id in graph.archived:
        return False
    if since and (mem.created or "") < since:
        return False
    if who.author is not None and mem.author.strip().lower() != who.author:
        return False
    if who.min_confidence is not None and (mem.confidence is None or mem.confidence < who.min_confidence):
        return False
    return not tags or bool(tags & {t.lower() for t in mem.tags})


def scoped_rows(sc: Scope, kinds: set[str], since: str | None, tags: set[str],
                semantic: bool, who: Who = ANYONE) -> tuple[set[str], Rows]:
    """The memories in scope and the row space the ranking sees, reused while nothing in scope
    changed and the filters are the same (the common case for an agent's reads), and brought
    up to date by the scope's delta when a few memories changed."""
    filters = (frozenset(kinds), since, frozenset(tags), semantic, who)
    vectors = [si.vectors for si in sc.indexes if si.vectors is not None] if semantic else []
    state = (sc.view.generation, tuple(si.state.generation for si in sc.indexes))
    dim = get_embedder().dim
    cached: RowCache | None = sc.cache.get("rows")
    if (cached is not None and cached.filters == filters and cached.view is sc.view
            and len(cached.vectors) == len(vectors) and all(map(operator.is_, cached.vectors, vectors))):
        if cached.state == state:
            return cached.ok, cached.rows
        changed = sc.view.changes_since(cached.state[0])
        if changed is not None:
            ok = cached.ok
            for mid in changed:
                mem = sc.memories.get(mid)
                if mem is not None and allowed(mem, sc.graph, kinds, since, tags, who):
                    ok.add(mid)
                else:
                    ok.discard(mid)
            rows = (update_rows(cached.rows, vectors, ok, sc.memories, changed, dim) if semantic
                    else keyword_rows(ok, sc.memories, dim))
            if rows is not None:
                sc.cache["rows"] = RowCache(filters, sc.view, vectors, state, ok, rows)
                return ok, rows
    ok = {m for m, mem in sc.memories.items() if allowed(mem, sc.graph, kinds, since, tags, who)}
    rows = build_rows(vectors, ok, sc.memories, dim) if semantic else keyword_rows(ok, sc.memories, dim)
    sc.cache["rows"] = RowCache(filters, sc.view, vectors, state, ok, rows)
    return ok, rows


def _partial(sc: Scope, rows: Rows, waiting: list[str], ok: set[str]) -> tuple[Rows, np.ndarray]:
    """The row space while memories wait for a vector: ``rows`` and a placeholder row for each
    waiting memory, kept between reads (``rowspace.PartialRows``) while the daemon embeds."""
    vectors = [si.vectors for si in sc.indexes if si.vectors is not None]
    dim = get_embedder().dim
    kept: PartialRows | None = sc.cache.get("partial")
    if kept is None or not kept.serves(vectors):
        kept = PartialRows(tuple(vectors), dim)
        sc.cache["partial"] = kept
    return kept.rows(rows, waiting, ok, sc.memories, dim)


def kept_neighbours(sc: Scope, rows: Rows, rp: ranking.RankingParams) -> Neighbours | None:
    """The rows' nearest neighbours the association chain keeps between reads (one set for
    every filter: a filter masks rows, it does not change their neighbours)."""
    bars = rp.hop_bars[: rp.semantic_hops]
    if rows.tokens is None or not bars or rp.hop_seeds <= 0:
        return None
    owner = tuple(si.vectors for si in sc.indexes if si.vectors is not None)
    near: Neighbours | None = sc.cache.get("near")
    if near is None or near.bar != min(bars) or not near.serves(owner):
        near = Neighbours(min(bars), owner)
        sc.cache["near"] = near
    near.sync(rows.tokens, rows.matrix)
    return near


# -- lanes ------------------------------------------------------------------------------------------
def row_offsets(rows: Rows, rp: ranking.RankingParams) -> np.ndarray:
    return rows.offsets(rp.kind_offset)


class LaneB(NamedTuple):
    hits: list[tuple[int, float]]  # (row, BM25 / its store's best), best first
    # row -> (query idf share covered, memories holding its rarest verbatim identifier, store
    # size, memories holding its rarest query word)
    evidence: dict[int, tuple[float, int, int, int]]
    named: bool  # the query is nothing but identifiers of a store in scope


# id(StoreIndex) -> (the lane asked, its hits for the query): what ``_embed_candidates`` found,
# handed to ``keyword_lane`` so a read while memories wait asks the lane once.
LaneHits = dict[int, tuple[object, list[Any]]]


def keyword_lane(sc: Scope, query: str, rows: Rows, pool: int, met: LaneHits | None = None) -> LaneB:
    """Lane B over every store in scope. BM25 scores of different indexes have different scales
    (their idf comes from different corpora), so each store's are divided by its own best.
    ``met``: the hits for ``query`` and ``pool`` already found, by the lane that found them."""
    hits: list[tuple[int, float]] = []
    evidence: dict[int, tuple[float, int, int, int]] = {}
    named = False
    for si in sc.indexes:
        lane = si.lane  # the scan lane while the keyword index is built in the background
        if lane is None:
            continue
        known = met.get(id(si)) if met else None
        # Only from the same lane: a refresh meanwhile may have swapped in the built index.
        lane_hits = known[1] if known is not None and known[0] is lane else lane.hits(query, pool)
        found = [(row, h) for h in lane_hits
                 if (row := rows.pos.get(h.id)) is not None and not rows.is_excluded(row)]
        best = max((h.score for _, h in found), default=0.0)
        if best > 0:
            hits += [(row, h.score / best) for row, h in found]
            evidence.update((row, (h.coverage, h.code_df, h.docs, h.word_df)) for row, h in found)
            named = named or any(h.named for _, h in found)
    hits.sort(key=lambda h: -h[1])
    return LaneB(hits[:pool], evidence, named)


def _embed_candidates(sc: Scope, query: str, pool: int) -> LaneHits:
    """While memories wait for vectors (a clone, a big pull), embed this query's best keyword
    hits first. The vectors made so far are a sample of the store, unrelated to the query: the
    gate judged the query by them and refused it (the first read after a 10k clone came back
    empty for an ordinary question), and the waiting hits took a stand-in similarity. Returns
    each lane's ``pool`` hits, for the keyword lane: a store's best hits are the head of its
    longer list, and the scan lane asked twice cost a read 33 ms more while 9,000 memories
    waited (under the profiler)."""
    met: LaneHits = {}
    if CANDIDATES_FIRST <= 0:
        return met
    for si in sc.indexes:
        lane = si.lane
        if si.embedding_pending and lane is not None:
            found = lane.hits(query, max(pool, CANDIDATES_FIRST))
            met[id(si)] = (lane, found[:pool])
            with contextlib.suppress(EmbedderUnavailable):
                si.embed_now([h.id for h in found[:CANDIDATES_FIRST]], CANDIDATES_SECONDS)
    return met


def doc_freq_fn(sc: Scope) -> Any:
    def doc_freq(term: str) -> int:
        return sum(lane.doc_freq(term) for si in sc.indexes if (lane := si.lane) is not None)

    return doc_freq


# -- utility ------------------------------------------------------------------------------------------
def utility(mem_id: str, sc: Scope, problem_id: str | None, problem_sim: Mapping[str, float],
            up: UtilityParams) -> tuple[float, float, int]:
    """(U_local, U_global, votes). U_local weighs each vote by how close its problem is to the
    problem in hand: identity with ``problem_id``, else the query's similarity to that problem."""
    votes = sc.graph.votes.get(mem_id, [])
    if not votes:
        return 0.0, 0.0, 0
    num = den = 0.0
    for v in votes:
        if v.problem is None:
            rel = 0.0
        elif problem_id is not None and v.problem == problem_id:
            rel = 1.0
        else:
            rel = max(0.0, problem_sim.get(v.problem, 0.0))
        num += v.weight * rel * v.value
        den += v.weight * rel
    local = num / (den + up.local_prior) if den > 0 else 0.0
    return local, sc.graph.utility_global(mem_id, config_of(sc).half_life_days), len(votes)


def config_of(sc: Scope) -> Config:
    """The settings the scope's stores were opened with (one workspace's: the same for each)."""
    return next(iter(sc.stores.values())).config


def problem_similarities(sc: Scope, rows: Rows, qvec: np.ndarray | None, wanted: set[str]) -> dict[str, float]:
    """Cosine of the query with the problems the candidates were voted on in the context of."""
    if qvec is None or not wanted:
        return {}
    found = [pid for pid in wanted if pid in rows.pos and not rows.is_excluded(rows.pos[pid])]
    if not found:
        return {}
    sims = rows.matrix[[rows.pos[pid] for pid in found]] @ qvec
    return {pid: float(s) for pid, s in zip(found, sims, strict=True)}


# -- selection ------------------------------------------------------------------------------------------
def select_groups(hits: list[Hit], limit: int) -> list[Hit]:
    """Cap at ``limit`` keeping linked groups together, best group first. Within a group, what
    worked comes before what failed: the attempts' places go to its solutions first."""
    groups: dict[str, list[Hit]] = {}
    for h in sorted(hits, key=lambda h: -h.score):
        groups.setdefault(h.group, []).append(h)
    out: list[Hit] = []
    for members in groups.values():
        room = limit - len(out)
        if room <= 0:
            break
        slots = [i for i, h in enumerate(members) if h.mem.kind in ATTEMPT_ORDER]
        attempts = sorted((members[i] for i in slots), key=lambda h: ATTEMPT_ORDER[h.mem.kind])
        for i, h in zip(slots, attempts, strict=True):
            members[i] = h
        out += members[:room]
    return out


ATTEMPT_ORDER = {"solution": 0, "failed_tactic": 1}


def result_json(hit: Hit, sc: Scope, util: tuple[float, float, int],
                predecessors: Mapping[str, list[str]], attached_to: dict[str, str] | None = None) -> ReadResult:
    mem, g = hit.mem, sc.graph
    attempts = g.attempts.get(mem.id, [])
    overtaken = g.superseded_tactic(mem, sc.memories)
    data: ReadResult = {
        "id": mem.id, "kind": mem.kind, "scope": mem.scope, "text": mem.text, "score": round(hit.score, 4),
        "reasons": hit.reasons,
        "links": {
            "problem": mem.problem,
            "solutions": [a for a in attempts if sc.memories[a].kind == "solution"],
            "failed_tactics": [a for a in attempts if sc.memories[a].kind == "failed_tactic"],
            "changes": list(g.changes_for.get(mem.id, [])),
            "superseded_by": g.superseded_by.get(mem.id) or overtaken,
            "relations": relations.relation_lists(mem.id, g, sc.memories, active_only=True),
        },
        "attached_to": attached_to,
        "utility": {"local": round(util[0], 4), "global": round(util[1], 4), "votes": util[2]},
        "stale": None,
        "confidence": mem.confidence,
        "review": needs_review(mem, config_of(sc), g),
        "doubts": [],
        "evidence": mem.evidence,
        "tags": mem.tags,
        "created": mem.created,
        "path": sc.stores[mem.scope].display_path(mem.path),
        "history": history(mem.id, sc, predecessors) if mem.id in predecessors else [],
    }
    if mem.kind == "failed_tactic":
        data["note"] = HISTORY_NOTE if overtaken else WATCH_OUT
    return data


def add_doubts(results: list[ReadResult], sc: Scope, problem_id: str | None,
               unverified: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """``doubts`` for each result, once ``stale`` is known (``relations.doubts``, the rule every
    surface applies); a problem in hand is the problem whose down-votes count; ``unverified``:
    by id, the ``repo:`` citations no checkout confirmed (``git/stale.check_repo_refs``)."""
    config = config_of(sc)
    for r in results:
        r["doubts"] = relations.doubts(sc.memories[r["id"]], sc.graph, sc.memories, config, stale=r.get("stale"),
                                       problem=problem_id, unverified=(unverified or {}).get(r["id"]))


# -- the verb ----------------------------------------------------------------------------------------
def read(ws: Workspace, request: dict[str, Any], *, params: ReadParams | None = None,
         log_episode: bool = True, episode: str | None = None) -> ReadAnswer:
    """Answer a read request (SPEC §3 read JSON). Empty results are a correct answer.

    The read is logged (query and ids returned) to ``episode``, else to the repo's current
    episode while one is open; ``log_episode=False`` opts out (benchmarks, internal reads)."""
    t0 = time.perf_counter()
    check_schema("read", request)
    check_chars({"query": request["query"]})  # an ESC or NUL in a query is a mistake or an attack
    find_anywhere = bool(request.get("problem_id") or request.get("expect"))
    sc = open_scope(ws, request.get("include_global", True), params,  # the one look at the workspace
                    find_anywhere=find_anywhere, include_shared=request.get("include_shared", True),
                    wanted=None if find_anywhere else first_load_wanted(ws, request["query"]))
    if not sc.stores:
        return {"ok": True, "guidance": GUIDANCE, "content_trust": CONTENT_TRUST, "results": [],
                "warnings": ["no memory store here yet"],
                "stats": {"candidates": 0, "elapsed_ms": 0}}
    # Only an explained read keeps what the pipeline computed; a plain one passes None down.
    trace: dict[str, Any] | None = {} if request.get("explain") or request.get("expect") else None
    answer, problem_id = answer_in(sc, request, t0, trace)
    if trace is not None:
        from .explain import explain  # raises on an --expect id no store holds: nothing is logged

        explain(answer, sc, request, trace)
    if log_episode:  # reads during an open episode are logged so `reflect` knows what to vote on
        from ..store.episodes import log_read

        log_read(ws, {**request, "problem_id": problem_id}, answer, episode)  # the resolved full id
    return answer


def first_load_wanted(ws: Workspace, query: str) -> Wanted | None:
    """What this read looks for, so that the first load of a large store may parse only the
    files that can hold it and answer partial (``Catalog.refresh``); None: every file is read
    first. Only where the rest is read after the answer: the daemon (its background work after
    the reply, or its next request), or a process that hands the store to the daemon it starts
    (``embed_wait`` is set for both); a read that names ids (``problem_id``, ``expect``) needs them
    all, and one without a word the keyword lane looks for (only stop words) may be answered by any."""
    if ws.embed_wait is None:
        return None
    got = scan_wanted(condense(query)[0])
    # A query with no word the keyword lane looks for is the vector lane's alone: any file may
    # answer it.
    return None if got is None or not got[0] else Wanted(tuple(got[0]), frozenset(got[1]))


def answer_in(sc: Scope, request: dict[str, Any], started: float,
              trace: dict[str, Any] | None = None) -> tuple[ReadAnswer, str | None]:
    """The read pipeline over an opened scope: the answer to a checked ``request``, and the
    full id of the problem it named (None: none, or not found). ``trace``: a dict the steps
    note what they computed in, for ``explain`` (None: a plain read, nothing noted)."""
    p = sc.params
    mode = request.get("mode", "targeted")
    query, condensed = condense(request["query"])
    expand = request.get("expand") or {}
    filters = request.get("filters") or {}
    rp = p.ranking
    if "semantic_hops" in expand:
        rp = dataclasses.replace(rp, semantic_hops=int(expand["semantic_hops"]))
    if "relation_hops" in expand:
        rp = dataclasses.replace(rp, relation_hops=int(expand["relation_hops"]))
    kinds = set(request.get("kinds") or KINDS)
    tags = {t.lower() for t in filters.get("tags") or []}

    warnings = list(sc.warnings)
    warnings += [condensed] if condensed else []

    qvec: np.ndarray | None = None
    semantic = all(si.semantic_ready for si in sc.indexes)
    if semantic:
        try:
            qvec = get_embedder().encode([query])[0]
        except EmbedderUnavailable as exc:
            semantic = False
            warnings.append(f"semantic lane unavailable: {exc}")
    else:
        err = next((si.semantic_error for si in sc.indexes if si.semantic_error), "embedder unavailable")
        warnings.append(f"semantic lane unavailable: {err}")

    met = _embed_candidates(sc, query, rp.keyword_pool) if semantic else {}
    waiting = [m for si in sc.indexes if si.embedding_pending for m in si.pending] if semantic else []
    unembedded: np.ndarray | None = None
    # While memories wait, the rows with a vector still come from the kept row space, brought up
    # to date by what each slice of embedding added (built afresh for every read they cost
    # ~0.5 s at 100k memories); the daemon embeds the rest between requests.
    who = Who(filters["author"].strip().lower() if "author" in filters else None,
              float(filters["min_confidence"]) if "min_confidence" in filters else None)
    ok, rows = scoped_rows(sc, kinds, filters.get("since"), tags, semantic, who)
    if waiting:
        rows, unembedded = _partial(sc, rows, waiting, ok)
    else:
        sc.cache.pop("partial", None)  # its buffer holds a copy of every vector
    limit = int(request.get("limit") or rp.for_mode(rp.limit, mode))
    lane_b = keyword_lane(sc, query, rows, rp.keyword_pool, met)
    # A store at its approximate threshold: the vector lane from its inverted file's candidates.
    approx = None if waiting or qvec is None else nearest(
        rows, [si.vectors for si in sc.indexes if si.vectors is not None])
    ranked = ranking.rank(
        qvec, rows.matrix, lane_b.hits, rows.kinds, evidence=lane_b.evidence, named=lane_b.named,
        salient=ranking.salient_terms(query), doc_freq=doc_freq_fn(sc),
        params=rp, mode=mode, limit=limit, ids=rows.ids, offsets=row_offsets(rows, rp),
        exclude=rows.excluded if rows.excluded is not None else (),
        # The approximate lane answers the hops too: no kept lists (each new row costs them a
        # pass over every row).
        near=None if waiting or approx is not None else kept_neighbours(sc, rows, rp), unembedded=unembedded,
        prose=ranking.prose_query(query), trace=trace, nearest=approx,
    )
    hits = {rows.ids[r.index]: Hit(sc.memories[rows.ids[r.index]], r.score, list(r.reasons),
                                   group_key(sc.memories[rows.ids[r.index]])) for r in ranked.results}
    if trace is not None:
        trace.update(rows=rows, qvec=qvec, lane_b=lane_b, ranked=ranked, ok=ok, waiting=set(waiting),
                     limit=limit, params=rp, found={m: h.score for m, h in hits.items()})
    fold_superseded(hits, sc)
    if hits and rp.relation_hops > 0 and rp.hop_seeds > 0:
        follow_relations(hits, sc, ok, rp, rp.relation_hops)
    if hits:
        expand_links(hits, sc, ok, p.utility, problem_links=expand.get("include_problem_links", True),
                     update_links=expand.get("include_update_links", True))
    problem_id = request.get("problem_id")
    if problem_id:
        try:
            problem_id = sc.find(problem_id, field_name="problem_id").id
        except MemstoreError:  # an unknown or ambiguous problem id only loses its utility boost
            warnings.append(f"problem_id {problem_id!r} not found; utility is weighed by the query instead")
            problem_id = None
    wanted = {v.problem for mid in hits for v in sc.graph.votes.get(mid, []) if v.problem}
    psim = problem_similarities(sc, rows, qvec, wanted)
    up = p.utility
    if trace is not None:
        trace["linked"] = {m: h.score for m, h in hits.items()}
    scored: list[Hit] = []
    utils: dict[str, tuple[float, float, int]] = {}
    for mid, hit in hits.items():
        u = utility(mid, sc, problem_id, psim, up)
        utils[mid] = u
        # Only context-weighted evidence hides a memory: votes cast for this problem or similar
        # ones (U_local). Votes from unrelated problems make U_global, a prior that only nudges
        # the score: a memory useless for one class of problems may be the answer to another.
        if u[2] and u[0] <= up.negative_cut:
            continue  # firmly negative: it misled before in this context
        hit.score = hit.score * (1.0 + up.alpha * u[0] + up.beta * u[1])
        scored.append(hit)
    attach_groups(scored, sc.graph)
    chosen = select_groups(scored, limit)
    if trace is not None:
        trace.update(utils=utils, problem_id=problem_id, psim=psim,
                     weighed={h.mem.id: h.score for h in scored}, chosen=[h.mem.id for h in chosen])
    by_id = {h.mem.id: h for h in chosen}
    attached = relations.anchors(by_id, sc.graph)
    order = relations.place(list(by_id), attached) if attached else list(by_id)
    predecessors = predecessors_of(sc.graph) if any(h.mem.kind == "fact" for h in chosen) else {}
    results = [result_json(by_id[mid], sc, utils[mid], predecessors, attachment(mid, attached, sc.graph))
               for mid in order]
    disputes = relations.disputes(order, sc.graph, sc.memories)
    from ..git.stale import annotate, annotate_repo_refs  # fill "stale" for the returned results only

    for mid in annotate(sc.stores.get("repo"), results, sc.memories):
        warnings.append(f"{mid} is a committed memory edited in the work tree: this answer shows the edit, which "
                        "`memstore check` and the pre-commit hook refuse (undo it with git restore, or write a "
                        "new memory that supersedes it)")
    unverified = annotate_repo_refs(results, sc.memories, sc.checkouts, sc.checkout_cache)
    add_doubts(results, sc, problem_id, unverified)
    answer: ReadAnswer = {
        "ok": True,
        "guidance": GUIDANCE + (" " + relations.DISPUTE_RULE if disputes else ""),
        "content_trust": CONTENT_TRUST,
        "results": results,
        "disputes": disputes,
        "stats": {
            "candidates": ranked.candidates,
            "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
            "gate": {"passed": ranked.gate.passed, "top_similarity": round(ranked.gate.top_similarity, 4),
                     "bar": round(ranked.gate.bar, 4)},
        },
    }
    if approx is not None:
        # Which vector lane answered: inverted-file searches, and passes over every row (the
        # candidates could not settle the gate or the pool, docs/decisions/approximate-index.md).
        answer["stats"]["approximate"] = {"searches": approx.searches, "flat": approx.whole}
    if waiting or sc.unread:
        counts = [si.vector_counts() for si in sc.indexes]
        answer["partial"] = {"embedded": sum(c[0] for c in counts), "total": sum(c[1] for c in counts)}
        reasons = []
        if sc.unread:
            answer["partial"]["unread"] = sc.unread
            reasons.append(f"the store is still being read: {sc.unread} memory files are not read yet")
        if waiting:
            reasons.append(f"embedding is still under way: {len(waiting)} memories have no vector yet")
        answer["partial"]["reason"] = "; ".join(reasons)
        answer["guidance"] = " ".join([GUIDANCE, *([READING_NOTE] if sc.unread else []),
                                       *([PARTIAL_NOTE] if waiting else [])])
    if warnings:
        answer["warnings"] = warnings
    return answer, problem_id
