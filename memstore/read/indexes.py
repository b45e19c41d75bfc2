"""The indexes a workspace keeps of its stores, and their upkeep outside a read: the one
``StoreIndex`` per store (``store_index``), rebuilding (``reindex``), embedding ahead of a write
(``embed_for_store``, ``prewarm_embeddings``), a memory's nearest by vector (what a write is
judged against), and filling the association chain's neighbour lists in a pause.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..errors import NoStore
from ..index.embcache import text_key
from ..index.embedder import get_embedder
from ..index.store_index import StoreIndex
from ..store.files import file_lock
from ..store.graph import archived_ids
from ..store.model import Memory
from ..store.workspace import Workspace
from .neighbours import Neighbours
from .rowspace import RowCache, current_matrix
from .tuning import ReadParams, params_from_config


def store_index(ws: Workspace, scope: str, params: ReadParams) -> StoreIndex:
    si = ws.indexes.get(scope)
    store = ws.store(scope)
    if si is None or si.store.root != store.root:
        cat = ws.catalog(scope, refresh=False)
        si = ws.shared("index", store, lambda: StoreIndex(cat, get_embedder(), params.ranking, key=ws.key))
        si.defer_saves = ws.defer_saves
        ws.indexes[scope] = si
    si.use_bm25(params.ranking)  # one index per store, whatever BM25 constants this workspace reads with
    # Taken on every call: the daemon shortens the wait while it embeds in the background.
    si.embed_wait = ws.embed_wait
    si.progress = ws.progress
    return si



def fill_neighbours(ws: Workspace, budget: int) -> int:
    """Work ahead for the association chain in a pause (the daemon calls this when idle): fill
    up to ``budget`` rows' kept neighbour lists for the row space of the last read. Returns how
    many; 0 when all are filled, or when the rows changed since that read."""
    cache: RowCache | None = ws.read_cache.get("rows")
    near: Neighbours | None = ws.read_cache.get("near")
    if cache is None or near is None or cache.rows.tokens is None:
        return 0
    if not near.serves(cache.vectors):
        return 0
    matrix = current_matrix(cache.rows, cache.vectors)
    if matrix is None or not np.array_equal(near.tokens, cache.rows.tokens):
        return 0
    return near.fill(matrix, budget)



def semantic_neighbours(ws: Workspace, mem: Memory, scopes: list[str], bar: float) -> list[dict[str, Any]]:
    """The memories of any kind (archived left out) among the 50 nearest in each store whose
    embedding is within ``bar`` cosine of ``mem``'s text, closest first: what a write is judged
    against."""
    p = params_from_config(ws.config)
    out: list[dict[str, Any]] = []
    qvec = embed_for_store(ws, mem.scope, mem.text, p)  # EmbedderUnavailable: the caller falls back
    for scope in scopes:
        try:
            si = store_index(ws, scope, p)
        except NoStore:
            continue
        if not si.store.exists():
            continue
        ws.catalog(scope)
        si.refresh(walk=False)
        if si.vectors is None or not si.semantic_ready:
            continue
        archived = archived_ids(si.catalog.events.values())
        for mid, sim in si.vectors.search(qvec, 50):
            other = si.catalog.memories.get(mid)
            if other is None or mid in archived or sim < bar:
                continue
            out.append({"id": mid, "kind": other.kind, "scope": other.scope, "similarity": round(sim, 4),
                        "text": other.text})
    return sorted(out, key=lambda d: -d["similarity"])


def embed_for_store(ws: Workspace, scope: str, text: str, p: ReadParams) -> np.ndarray:
    """Embed ``text`` through the store's embedding cache: the memory about to be written is then
    not embedded a second time when the index picks up its file."""
    emb = get_embedder()
    store = ws.store(scope)
    if not store.exists():
        return emb.encode([text])[0]
    cache = store_index(ws, scope, p).embedding_cache()
    key = text_key(text)
    vecs, missing = cache.get_many([key])
    if missing:
        vecs = emb.encode([text])
        with file_lock(store.index_dir / "index.lock"):
            cache.put_many([key], vecs)
    return vecs[0]


def prewarm_embeddings(ws: Workspace, scope: str, texts: list[str]) -> int:
    """Batch-embed texts into the store's embedding cache; returns how many were new."""
    store = ws.store(scope)
    if not store.exists() or not texts:
        return 0
    p = params_from_config(ws.config)
    cache = store_index(ws, scope, p).embedding_cache()
    keys = [text_key(t) for t in texts]
    _, missing = cache.get_many(keys)
    todo = list(dict.fromkeys(missing_key for missing_key in (keys[i] for i in missing)))
    if not todo:
        return 0
    text_of = dict(zip(keys, texts, strict=True))
    vecs = get_embedder().encode([text_of[k] for k in todo], batch_size=64)
    with file_lock(store.index_dir / "index.lock"):
        cache.put_many(todo, vecs)
    return len(todo)


def reindex(ws: Workspace, *, full: bool = False) -> dict[str, Any]:
    p = params_from_config(ws.config)
    out: dict[str, Any] = {"ok": True, "stores": []}
    for scope in ws.scopes():
        t0 = time.perf_counter()
        si = store_index(ws, scope, p)
        if full:
            si.rebuild()
        else:
            si.refresh()
        out["stores"].append({
            "scope": scope, "root": str(si.store.root), "memories": len(si.catalog.memories),
            "vectors": len(si.vectors) if si.vectors is not None else 0,
            "invalid": len(si.catalog.invalid), "seconds": round(time.perf_counter() - t0, 3),
            "warnings": list(si.warnings) + ([f"semantic lane unavailable: {si.semantic_error}"]
                                            if si.semantic_error else []),
        })
    return out
