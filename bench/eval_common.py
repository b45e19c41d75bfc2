"""Shared machinery for the retrieval benchmarks (LoCoMo, GitBugs).

The benches build, per isolated store, exactly the inputs the real read pipeline has
(SPEC §4-5): a matrix of unit-normalised embeddings, a Whoosh BM25F keyword index over the
memory text (+ kind), the kind of every memory, and no explicit links. A *retriever* turns
(store, query) into a ranked list; the default one calls ``memstore.read.ranking`` — the same pure
functions the real pipeline calls — so numbers measured here carry over. A retriever backed
by the real ``memstore.read`` can be plugged in through ``Retriever``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # The benches run as scripts (python bench/eval_x.py) from a source checkout.
    sys.path.insert(0, str(ROOT))

from memstore.index.embedder import get_embedder  # noqa: E402
from memstore.index.terms import STOP_WORDS, keyword_terms, keyword_weighting  # noqa: E402
from memstore.read import ranking  # noqa: E402

DEFAULT_CACHE = ROOT / "bench" / ".cache"


# ---------------------------------------------------------------------------------------
# Embeddings with an on-disk cache keyed by model id + text hash
# ---------------------------------------------------------------------------------------


def _text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class EmbeddingCache:
    """Append-only cache: ``<dir>/<model>.keys.json`` (text hashes) + ``<dir>/<model>.npy``.

    Re-running a bench re-embeds nothing it has seen, which turns minutes of MiniLM on
    2 cores into a fraction of a second.
    """

    def __init__(self, cache_dir: Path = DEFAULT_CACHE, model_id: str | None = None) -> None:
        self.dir = Path(cache_dir)
        # Keyed by the backend's id too: onnx and torch vectors differ slightly.
        safe = (model_id or get_embedder().model_id).replace("/", "_")
        self.keys_path = self.dir / f"{safe}.keys.json"
        self.vecs_path = self.dir / f"{safe}.npy"
        self.index: dict[str, int] = {}
        self.vecs = np.zeros((0, get_embedder().dim), dtype=np.float32)
        if self.keys_path.exists() and self.vecs_path.exists():
            keys = json.loads(self.keys_path.read_text())
            vecs = np.load(self.vecs_path)
            if len(keys) == len(vecs):
                self.index = {k: i for i, k in enumerate(keys)}
                self.vecs = vecs.astype(np.float32, copy=False)

    def embed(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        keys = [_text_key(t) for t in texts]
        missing: dict[str, str] = {}
        for k, t in zip(keys, texts, strict=True):
            if k not in self.index and k not in missing:
                missing[k] = t
        if missing:
            t0 = time.perf_counter()
            new = get_embedder().encode(list(missing.values()), batch_size=batch_size)
            base = len(self.vecs)
            for i, k in enumerate(missing):
                self.index[k] = base + i
            self.vecs = np.concatenate([self.vecs, new]) if base else new
            self._save()
            log(f"embedded {len(missing)} new texts in {time.perf_counter() - t0:.1f}s")
        if not keys:
            return np.zeros((0, self.vecs.shape[1]), dtype=np.float32)
        return self.vecs[[self.index[k] for k in keys]]

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        ordered = sorted(self.index, key=self.index.__getitem__)
        tmp_keys = self.keys_path.with_suffix(".tmp.json")
        tmp_vecs = self.vecs_path.with_suffix(".tmp.npy")
        tmp_keys.write_text(json.dumps(ordered))
        np.save(tmp_vecs, self.vecs)
        os.replace(tmp_vecs, self.vecs_path)
        os.replace(tmp_keys, self.keys_path)


# ---------------------------------------------------------------------------------------
# Keyword lane: an in-memory Whoosh BM25F index, as the real store builds on disk
# ---------------------------------------------------------------------------------------


def plain_analyzer() -> object:
    """The baseline's analyser: words and identifiers kept whole (``resp.raise_for_status``),
    lower-cased, stop words dropped, Porter-stemmed: plain BM25 as memstore had it before the
    code lane, and close to the identifiers README's ``[a-z0-9_.]+`` reference."""
    from whoosh.analysis import LowercaseFilter, RegexTokenizer, StemFilter, StopFilter

    return (RegexTokenizer(r"\w+(?:[.\-/:]\w+)*") | LowercaseFilter()
            | StopFilter(stoplist=STOP_WORDS, minsize=2) | StemFilter())


class KeywordIndex:
    """Plain BM25 (the baseline): Whoosh BM25F over ``text`` (+ ``kind``), ``plain_analyzer()``."""

    def __init__(self, texts: Sequence[str], kinds: Sequence[str], b: float = 0.4, k1: float = 1.2) -> None:
        from whoosh.fields import ID, KEYWORD, NUMERIC, TEXT, Schema
        from whoosh.filedb.filestore import RamStorage

        self.analyzer = plain_analyzer()
        schema = Schema(
            idx=NUMERIC(stored=True, unique=True),
            text=TEXT(analyzer=self.analyzer),
            kind=KEYWORD(),
            ident=ID(),
        )
        # Whoosh's writer spills to "<tmp>/<indexname>.tmp" and removes that folder when done:
        # under the default name "MAIN" two bench processes on one machine delete each other's
        # files mid-build, so each index gets a name of its own.
        self._ix = RamStorage().create_index(schema, indexname=f"bench{os.getpid()}x{id(self):x}")
        writer = self._ix.writer()
        for i, (t, k) in enumerate(zip(texts, kinds, strict=True)):
            writer.add_document(idx=i, text=t, kind=k)
        writer.commit()
        self._searcher = self._ix.searcher(weighting=keyword_weighting(b, k1))
        self.n_docs = len(texts)

    def analyze(self, text: str) -> list[str]:
        return [tok.text for tok in self.analyzer(text)]

    def search(self, terms: Sequence[str], limit: int) -> list[tuple[int, float]]:
        from whoosh import query as wq

        toks: list[str] = []
        for term in terms:
            toks.extend(self.analyze(term))
        toks = list(dict.fromkeys(toks))
        if not toks or limit <= 0:
            return []
        q = wq.Or([wq.Term("text", t) for t in toks])
        hits = self._searcher.search(q, limit=limit)
        return [(int(h["idx"]), float(h.score)) for h in hits]


Evidence = tuple[float, int, int, int]  # what ``ranking.rank`` takes per keyword hit


class ProductKeyword:
    """The product's keyword index (``memstore.index.keyword``: code + text fields, the array
    scorer, the gates' evidence) built in a temporary folder, addressed by row number."""

    def __init__(self, texts: Sequence[str], kinds: Sequence[str], params: ranking.RankingParams) -> None:
        import tempfile

        from memstore.index.keyword import KeywordIndex as StoreKeyword

        self._dir = tempfile.TemporaryDirectory(prefix="memstore-kw-")
        self.index = StoreKeyword(Path(self._dir.name) / "keyword", params)
        self.index.apply(((str(i), k, [], t) for i, (t, k) in enumerate(zip(texts, kinds, strict=True))), [])

    def hits(self, query: str, limit: int) -> tuple[list[tuple[int, float]], dict[int, Evidence], bool]:
        """(row, BM25) best first, row -> (coverage, memories holding its rarest verbatim
        identifier, store size, memories holding its rarest query word), and whether the
        query is nothing but identifiers of the store."""
        got = self.index.hits(query, limit)
        evidence = {int(h.id): (h.coverage, h.code_df, h.docs, h.word_df) for h in got}
        return [(int(h.id), h.score) for h in got], evidence, any(h.named for h in got)

    def doc_freq(self, term: str) -> int:
        return self.index.doc_freq(term)


# ---------------------------------------------------------------------------------------
# Stores, retrievers, metrics
# ---------------------------------------------------------------------------------------


@dataclass
class Store:
    """One isolated memory store, as the read pipeline sees it."""

    name: str
    texts: list[str]
    kinds: list[str]
    matrix: np.ndarray
    keyword: KeywordIndex  # plain BM25, the baseline
    code: ProductKeyword  # what the product's keyword lane sees
    labels: list[list[str]] = field(default_factory=list)  # bench-only ground-truth ids


Retriever = Callable[[Store, str, np.ndarray], list[ranking.Ranked]]


def build_store(name: str, texts: list[str], kinds: list[str], cache: EmbeddingCache) -> Store:
    matrix = cache.embed(texts)
    return Store(name=name, texts=texts, kinds=kinds, matrix=matrix, keyword=KeywordIndex(texts, kinds),
                 code=ProductKeyword(texts, kinds, ranking.RankingParams()))


def ranking_retriever(params: ranking.RankingParams, mode: str = "targeted", limit: int | None = 25,
                      keyword_only: bool = False) -> Retriever:
    """The memstore algorithm over one store (what ``memstore.read`` does per store).

    ``limit`` defaults to 25 so recall@25 is measurable; the product's default is 10.
    ``keyword_only``: as a read without the embedding model (no query vector).
    """

    def run(store: Store, query: str, qvec: np.ndarray, own: int | None = None) -> list[ranking.Ranked]:
        # ``own``: a row left out of scope entirely (GitBugs: the query's own report).
        pool = params.keyword_pool + (own is not None)
        hits, evidence, named = store.code.hits(query, pool)
        return ranking.rank(
            None if keyword_only else qvec,
            store.matrix,
            hits,
            store.kinds,
            evidence=evidence,
            named=named,
            salient=ranking.salient_terms(query),
            doc_freq=store.code.doc_freq,
            params=params,
            mode=mode,
            limit=limit,
            exclude=() if own is None else {own},
            prose=ranking.prose_query(query),
        ).results

    return run


def bm25_retriever(limit: int = 50, stop_words: bool = True) -> Retriever:
    """Baseline: BM25 alone, no bar (stop words and question words removed from the query)."""

    def run(store: Store, query: str, qvec: np.ndarray) -> list[ranking.Ranked]:
        terms = keyword_terms(query) if stop_words else query.split()
        return [ranking.Ranked(i, s, (f"keyword:{s:.2f}",)) for i, s in store.keyword.search(terms, limit)]

    return run


def vector_retriever(limit: int = 50) -> Retriever:
    """Baseline: cosine top-k alone, no bar."""

    def run(store: Store, query: str, qvec: np.ndarray) -> list[ranking.Ranked]:
        return [
            ranking.Ranked(i, s, (f"semantic:{s:.2f}",))
            for i, s in ranking.semantic_lane(qvec, store.matrix, k=limit, floor=-1.0)
        ]

    return run


def cluster_halves(qids: Sequence[str], rels: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Each query's half (0 or 1) for two-fold cross-validation on duplicate reports: a cluster
    (a connected component of the qrels) never spans the two halves."""
    parent = {q: q for q in qids}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for q in qids:
        for d in rels[q]:
            parent[find(d)] = find(q)
    half = {root: i % 2 for i, root in enumerate(sorted({find(q) for q in qids}))}
    return {q: half[find(q)] for q in qids}


def percentile_ms(samples: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(samples) * 1000.0, q)), 2) if samples else 0.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fmt(x: float) -> str:
    return f"{x:.3f}"


# ---------------------------------------------------------------------------------------
# The real pipeline: the same store written as memory files and read through memstore.read
# ---------------------------------------------------------------------------------------


class PipelineStores:
    """Writes each bench store as a real memstore store (Markdown files in a temp dir, outside
    any git repo) and answers queries with ``memstore.read.retrieve.read`` — scope, lanes,
    association, links, utility and selection exactly as an agent's read runs them.

    The store's own embedding cache is seeded from the bench cache, so no text is embedded
    twice; the projections (faiss, Whoosh, catalog) are built by the product's index code on
    the first read.
    """

    def __init__(self, cache: EmbeddingCache, kind: str = "fact") -> None:
        import tempfile

        self.cache = cache
        self.kind = kind
        self.root = Path(tempfile.mkdtemp(prefix="memstore-eval-"))
        self._ws: dict[str, tuple[object, dict[str, int]]] = {}

    def _open(self, store: Store) -> tuple[object, dict[str, int]]:
        if store.name in self._ws:
            return self._ws[store.name]
        from memstore.index.embcache import EmbeddingCache as StoreCache
        from memstore.index.embcache import text_key
        from memstore.store import ids
        from memstore.store.config import Config
        from memstore.store.disk import Store as MemStore
        from memstore.store.files import atomic_write
        from memstore.store.model import Memory
        from memstore.store.userkey import projection_key
        from memstore.store.workspace import open_workspace

        safe = "".join(c if c.isalnum() else "_" for c in store.name)
        root = self.root / safe / ".memory"
        ms = MemStore(root=root, scope="repo", config=Config())
        ms.init()
        row_of: dict[str, int] = {}
        texts = []
        for i, text in enumerate(store.texts):
            mid = ids.derived_id(f"{store.name}:{i}")
            mem = Memory(id=mid, kind=store.kinds[i] if store.kinds else self.kind, text=text.strip(),
                         created="2026-01-01T00:00:00Z", author="eval", evidence=["user:benchmark data"])
            atomic_write(ms.memory_path(mem), ms.render_memory(mem))
            row_of[mid] = i
            texts.append(mem.text)
        emb = get_embedder()
        # Filed under this user's key, as the store's own index looks them up (memstore.store.userkey).
        seed = StoreCache(root / ".index" / "embeddings", emb.model_id, emb.dim, secret=projection_key())
        seed.put_many([text_key(t) for t in texts], self.cache.embed(texts))
        env = {"MEMSTORE_HOME": str(self.root / "_global"), "MEMSTORE_DAEMON": "0"}
        ws = open_workspace(cwd=self.root, store_dir=root, env=env)
        self._ws[store.name] = (ws, row_of)
        return ws, row_of

    def retriever(self, mode: str = "targeted", limit: int = 25, exclude_own: bool = False) -> Callable[..., list]:
        """A Retriever (``(store, query, qvec[, own]) -> [Ranked]``) backed by memstore.read.
        ``qvec`` is ignored: the pipeline embeds the query itself, as a real read does."""
        from memstore.read.retrieve import read

        def run(store: Store, query: str, qvec: np.ndarray, own: int | None = None) -> list[ranking.Ranked]:
            ws, row_of = self._open(store)
            req: dict = {"query": query, "mode": mode, "limit": limit + (1 if own is not None else 0),
                         "include_global": False}
            answer = read(ws, req, log_episode=False)  # type: ignore[arg-type]
            out = []
            for r in answer["results"]:
                row = row_of[r["id"]]
                if own is not None and row == own:
                    continue
                out.append(ranking.Ranked(row, float(r["score"]), tuple(r["reasons"])))
            return out[:limit]

        return run

    def close(self) -> None:
        import shutil

        shutil.rmtree(self.root, ignore_errors=True)
