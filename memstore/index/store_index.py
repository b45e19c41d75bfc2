"""One store's projections kept in line with its files: catalog -> keyword + vector indexes.

Every call refreshes incrementally (SPEC §5): the catalog's stat walk finds changed files, only
their documents are re-indexed, and only text never embedded before goes through the model.
Writers in several processes serialise on ``.index/index.lock``; each save bumps a generation
so a process notices when another one moved the on-disk index ahead of its own copy.

``StoreIndex`` owns the state (the indexes, the manifests, what waits for a vector) and decides
when to load, sync and save; its collaborators do the rest: ``index_files`` the files of
``.index/`` (sealed metadata, the lock, damage and leftovers), ``embedding`` where vectors come
from, ``keyword_build`` the keyword index built in the background and the scan lane meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..errors import DiskFull
from ..store.catalog import Catalog
from ..store.config import env_count
from ..store.files import content_hash
from ..store.model import Memory
from ..store.userkey import projection_key
from .embcache import EmbeddingCache, text_key
from .embedder import Embedder, EmbedderUnavailable
from .embedding import Embedding, MemoKeys, Progress
from .index_files import IndexFiles, IndexState, damaged
from .keyword import BM25Params, KeywordIndex
from .keyword_build import Doc, KeywordBuilder
from .scanlane import ScanLane
from .vectors import VectorIndex

log = logging.getLogger("memstore.index")

# A refresh with a time budget plans at most this many waiting memories: planning and looking up
# every waiting memory costs ~20 ms per slice at 10k (2 ms with this cap), so ~200 ms of each
# quarter-second slice at 100k.
PLAN_WAITING = 1024
# The most memories waiting for a vector for which the daemon holds a clone's keyword build
# until they have one: ~2-4 minutes of the encoder pool on two cores (bench/RESULTS.md, "Background
# embedding against the encoder pool"); the build takes 40 s beside it at 10k.
BUILD_AFTER_EMBEDDING = 20_000
BUILD_AFTER_EMBEDDING_ENV = "MEMSTORE_BUILD_AFTER_EMBEDDING"  # another threshold (tests lower it)


def build_after_embedding_setting() -> int:
    """``MEMSTORE_BUILD_AFTER_EMBEDDING``, or ``BUILD_AFTER_EMBEDDING``."""
    return env_count(BUILD_AFTER_EMBEDDING_ENV, BUILD_AFTER_EMBEDDING)


def doc_key(mem: Memory) -> str:
    return content_hash("\x1f".join([mem.kind, ",".join(mem.tags), mem.text]).encode("utf-8"))


class StoreIndex:
    def __init__(self, catalog: Catalog, embedder: Embedder | None, params: BM25Params,
                 key: bytes = b"") -> None:
        self.catalog = catalog
        # This user's key (memstore.store.userkey): what is loaded from .index/ must carry its seal.
        self.key = key or projection_key()
        self.store = catalog.store
        self.embedder = embedder
        self.params = params
        self.dir = self.store.index_dir
        self.warnings: list[str] = []
        self.semantic_error: str | None = None if embedder is not None else "no embedder configured"
        self.state = IndexState()
        self.vectors: VectorIndex | None = None
        self.keyword: KeywordIndex | None = None
        self.files = IndexFiles(self.dir, self.key, self._note)
        self.embedding = Embedding(embedder, self.dir, self.key, self.store.root, self._no_room)
        self.kw_builder = KeywordBuilder(self.dir, self._docs, lambda: self.catalog.generation)
        self._synced_catalog_gen = -1
        self._loaded = False
        self.defer_saves = False
        self._dirty = False
        self._keys: MemoKeys = {}  # id -> (parsed memory, doc key, text key)
        # Seconds a refresh may spend embedding before it returns with memories still without a
        # vector (``pending``); None: it embeds them all. The daemon bounds it so a read after a
        # clone or a big pull answers at once, and embeds the rest between requests.
        self.embed_wait: float | None = None
        self.progress: Progress | None = None
        self.pending: list[str] = []  # memories in the catalog whose vector is not made yet

    @property
    def scan(self) -> ScanLane | None:
        """While the keyword index is built in the background: the lane reads answer from."""
        return self.kw_builder.scan

    @scan.setter
    def scan(self, lane: ScanLane | None) -> None:
        self.kw_builder.scan = lane

    @property
    def lane(self) -> KeywordIndex | ScanLane | None:
        """What the keyword lane reads: the scan lane while the keyword index is being built."""
        return self.kw_builder.scan if self.kw_builder.scan is not None else self.keyword

    # -- loading -------------------------------------------------------------------------------
    def _fault(self, what: str, why: BaseException | str) -> None:
        """A damaged projection is rebuilt from the files; say so once, in the answer's
        ``warnings`` and in the log (the daemon's log file when the daemon runs)."""
        self._note(damaged(what, why))

    def _note(self, msg: str) -> None:
        if msg not in self.warnings:  # a reload finds the same thing again: say it once
            self.warnings.append(msg)
        log.info("%s: %s", self.dir, msg)

    def _load(self) -> None:
        """Load what is on disk; anything unreadable is dropped and rebuilt on the next sync."""
        try:
            self._load_disk()
        except Exception as exc:  # whatever the damage, the files are the truth: start empty
            self._fault("index", exc)
            with self.files.lock():
                self._wipe()
                self._load_disk()

    def _wipe(self) -> None:
        if self.keyword is not None:
            self.keyword.close()
        self.keyword = None
        self.files.wipe()

    def _load_disk(self) -> None:
        self._loaded = True
        self.files.generation = 0
        self._dirty = False
        self.files.prepare(private=self.store.scope == "global")
        self.files.clean_builds(self.kw_builder.ours)
        if self.keyword is not None:
            self.keyword.close()
        keyword, meta, kw_state = self.files.open_keyword(self.params)
        self._use_keyword(keyword)
        if meta is not None and kw_state == "changed":
            self._fault("keyword index", "its files changed since they were saved")
        elif kw_state == "added":
            # Another process committed after the metadata was saved (the daemon saves it when
            # idle), or a pull dropped files in: which, nothing here can tell, so it is rebuilt.
            log.info("%s: keyword index holds files its metadata does not record; rebuilt", self.dir)
        dim = self.embedder.dim if self.embedder else 384
        self.vectors = VectorIndex(dim)
        self.state = IndexState()
        if meta is None:
            self.files.note_written()
            return
        self.state.generation = int(meta.get("generation", 0))
        self.files.generation = self.state.generation
        own = self._own_id
        if not keyword.created:
            self.state.kw_manifest = {own(k): v for k, v in dict(meta.get("kw_manifest", {})).items()}
        model_ok = self.embedder is not None and meta.get("model_id") == self.embedder.model_id
        if model_ok and meta.get("dim") == dim and (self.dir / "vectors.faiss").is_file():
            try:
                self.vectors, self.state.vec_manifest = self.files.saved_vectors(meta, dim, own)
            except (ValueError, RuntimeError, OSError, KeyError) as exc:
                self._fault("vector index", exc)
                self.vectors = VectorIndex(dim)
        elif meta.get("model_id") and self.embedder is not None and meta.get("model_id") != self.embedder.model_id:
            self.warnings.append(f"embedding model changed ({meta.get('model_id')} -> {self.embedder.model_id}); "
                                 "vectors rebuilt")
        self.files.note_written()

    def _own_id(self, mid: str) -> str:
        """The catalog's own string for the id ``mid`` (``mid`` when it holds no such memory):
        meta.json's manifests and labels, decoded, were three more copies of every id (75 bytes
        each), ~22 MB at 100k memories."""
        mem = self.catalog.memories.get(mid)
        return mem.id if mem is not None else mid

    def _use_keyword(self, keyword: KeywordIndex | None) -> None:
        """Make ``keyword`` the live keyword index, healed and vouched for by this index."""
        self.keyword = keyword
        if keyword is not None:
            keyword.on_fault = self._heal_keyword
            keyword.vouch = self.files.vouch_keyword
            keyword.seal = self.key  # its postings projection's seal: this index's key

    def _heal_keyword(self, exc: Exception) -> None:
        """The keyword index's files failed a read: build it again from the catalog, now."""
        assert self.keyword is not None
        if not self.keyword.in_memory and not self.keyword.folder.is_dir():
            # Deleted, as the docs invite (`rm -rf .memory/.index`): nothing is damaged.
            self._note("keyword index not found on disk (deleted?): building it again from the files")
        else:
            self._fault("keyword index", exc)
        with self.files.lock():
            # Only the keyword side is rebuilt: the memories still waiting for a vector (the
            # daemon embedding a clone behind its reads) wait on, or they would never get one.
            pending = self.pending
            self.keyword.reset()
            self.state.kw_manifest = {}
            kw, _ = self._plan(None)
            self._sync(kw, {})
            self.pending = pending
            self._changed_on_disk()

    def _keyword_to_disk(self) -> None:
        """A keyword index held in memory (the device was full) goes back to disk once there is
        room: tried when a long-lived process saves (the daemon, idle), not on every read."""
        assert self.keyword is not None
        with self.files.lock():
            self.keyword.reset()
            if self.keyword.in_memory:
                return  # still no room
            pending = self.pending
            self.state.kw_manifest = {}
            kw, _ = self._plan(None)
            self._sync(kw, {})
            self.pending = pending
            self._dirty = True

    def _changed_on_disk(self) -> None:
        """This process changed the files (the caller holds the index lock): a new generation,
        saved now or, with ``defer_saves``, at the next flush."""
        self.state.generation = max(self.state.generation, self.files.disk_gen() or 0) + 1
        self._dirty = True
        if not self.defer_saves:
            try:
                self._save()
            except DiskFull as exc:
                self._no_room(exc)

    def _no_room(self, exc: DiskFull) -> None:
        """The device is full: the projections stay in this process's memory, unsaved (the
        answer says so); the files are the truth, so a later process only catches up."""
        self._dirty = True
        self._note("no space left on the device: the index is held in memory and not saved "
                   f"({exc.message}); free some space")

    # -- syncing ---------------------------------------------------------------------------------
    def refresh(self, *, walk: bool = True, budget: float | None = -1.0, first: list[str] | None = None) -> bool:
        """Bring the projections in line with the files. Returns True if anything changed.

        ``walk=False``: the caller has just refreshed the catalog (or a file watcher vouches
        that nothing changed), so skip its stat walk and only sync the projections to it.
        ``budget``: seconds it may spend embedding (default ``embed_wait``; None: no bound);
        what is left stays in ``pending`` for the next refresh. ``first``: the waiting memories to
        plan, in place of the head of the waiting list (those whose vectors are ready)."""
        probe = budget is not None and budget < 0  # a read's own wait, not a background slice
        if budget is not None and budget < 0:
            budget = self.embed_wait
        if not self._loaded:
            self._load()
        elif self.keyword is not None and self.keyword.damaged():
            # Under a long-lived process: files deleted or rewritten since it last looked.
            self._heal_keyword(RuntimeError("its files were deleted or changed on disk"))
        swapped = self._finish_keyword()
        # Planned by an earlier call (a read, which answers sooner without a build beside it on
        # two cores): a later refresh starts it, once no memory waits for a vector.
        self.start_keyword_build()
        if walk:
            self.catalog.refresh()
        if self.catalog.generation == self._synced_catalog_gen and not self.embedding_pending and not swapped:
            return False
        # Only the memories the catalog changed since the last sync (and those still waiting for
        # a vector) can differ from the manifests (comparing all of them costs ~100 ms at 100k);
        # the first sync compares all, and so does the first after a keyword build swapped in.
        since = (self.catalog.changes_since(self._synced_catalog_gen)
                 if self._synced_catalog_gen >= 0 and not swapped else None)
        carry: list[str] = []  # waiting memories left out of this plan: still waiting after it
        ids = None
        if since is not None:
            head = self.pending
            if first is not None:
                head, carry = first, self.pending
            elif probe and budget == 0 and self.defer_saves:
                # A read in the daemon while it embeds in the background: the vectors of what
                # waits come from that embedding, which puts them in itself (``take_ready``).
                # Planning the head of the queue again found none and cost every read ~10 ms at
                # 10k waiting, and a new generation of the index (the row space taken again).
                head, carry = [], self.pending
            elif budget is not None and len(head) > PLAN_WAITING:
                head, carry = head[:PLAN_WAITING], head[PLAN_WAITING:]
            ids = since[0] | set(head)
            if ids:
                carry = [m for m in carry if m not in ids]
        kw, vec = self._plan(ids)
        if not kw and (not vec or self.embedder is None or self.semantic_error):
            self._synced_catalog_gen = self.catalog.generation
            self.pending = carry
            self._lane_outside()
            return False
        with self.files.lock():
            if self.files.moved_ahead():
                # Another process saved a newer index: start from it, it is probably closer.
                self._load()
                kw, vec = self._plan(None)
                carry = []
            changed = self._sync(kw, vec, budget, probe=probe and self.embed_wait is not None)
            self.pending += carry
            if changed:
                self._changed_on_disk()
        self._synced_catalog_gen = self.catalog.generation
        self._lane_outside()
        return changed

    def _lane_outside(self) -> None:
        """Tell the scan lane what of the store a partial catalog has not read yet."""
        lane = self.scan
        if lane is not None:
            lane.outside = self.catalog.unread
            lane.outside_holding = self.catalog.unread_holding if lane.outside else {}
            lane.outside_chars = self.catalog.unread_chars if lane.outside else 0

    @property
    def embedding_pending(self) -> bool:
        """Memories wait for a vector (a refresh with a budget ran out of time)."""
        return bool(self.pending) and self.semantic_ready

    @property
    def synced(self) -> bool:
        """A first sync has completed: until then the catalog may still be empty."""
        return self._synced_catalog_gen >= 0

    def vector_counts(self) -> tuple[int, int]:
        """(memories with a vector, memories). Counted from the vectors themselves: ``daemon
        status`` asks from another thread, also while a first sync has not yet said what waits."""
        total = len(self.catalog.memories)
        return min(len(self.vectors) if self.vectors is not None else 0, total), total

    def _plan(self, ids: set[str] | None) -> tuple[dict[str, str | None], dict[str, str | None]]:
        """Where the manifests differ from the catalog: id -> the doc / text key it should have
        (None: drop it). ``ids``: only these memories changed since the last sync; None: any
        may differ (a first sync, or manifests another process saved)."""
        mems = self.catalog.memories
        kw_old, vec_old = self.state.kw_manifest, self.state.vec_manifest
        if ids is None:
            self._keys = {m: known for m, known in self._keys.items() if m in mems}
            order: list[str] = [*mems, *(m for m in kw_old if m not in mems),
                                *(m for m in vec_old if m not in mems and m not in kw_old)]
        else:
            order = sorted(ids)  # the order new vectors are added in: the same in every process
        kw: dict[str, str | None] = {}
        vec: dict[str, str | None] = {}
        keys = self._keys
        for mid in order:
            mem = mems.get(mid)
            if mem is None:
                keys.pop(mid, None)
                doc = text = None
            else:
                # The catalog keeps the same Memory object while its file is unchanged, so only
                # re-parsed files are hashed again.
                known = keys.get(mid)
                if known is None or known[0] is not mem:
                    doc, text = doc_key(mem), text_key(mem.text)
                    # The manifests' own strings when they agree: two fewer per memory (~16 MB at 100k).
                    if kw_old.get(mid) == doc:
                        doc = kw_old[mid]
                    if vec_old.get(mid) == text:
                        text = vec_old[mid]
                    known = keys[mid] = (mem, doc, text)
                doc, text = known[1], known[2]
            if kw_old.get(mid) != doc:
                kw[mid] = doc
            if vec_old.get(mid) != text:
                vec[mid] = text
        return kw, vec

    def _sync(self, kw: dict[str, str | None], vec: dict[str, str | None], budget: float | None = None,
              *, probe: bool = False) -> bool:
        assert self.keyword is not None and self.vectors is not None
        mems = self.catalog.memories
        changed = False
        if kw and not self.kw_builder.later(kw, self.params, long_lived=self.defer_saves,
                                            hands_over=self.embed_wait is not None, partial=self.catalog.partial):
            upsert = [m for m, key in kw.items() if key is not None]
            try:
                self.keyword.apply(
                    ((m, mems[m].kind, mems[m].tags, mems[m].text) for m in upsert),
                    [m for m, key in kw.items() if key is None],
                )
            except DiskFull as exc:
                if self.keyword.in_memory:
                    raise
                # No room for a new segment: the whole index again, in memory.
                self._no_room(exc)
                self.keyword.to_memory()
                self.state.kw_manifest = {}
                kw = self._plan(None)[0]
                self.keyword.apply(((m, mems[m].kind, mems[m].tags, mems[m].text)
                                    for m, key in kw.items() if key is not None), [])
            _patch(self.state.kw_manifest, kw)
            self.scan = None  # the index holds the catalog again
            changed = True
        # Replaced at the end, never emptied before: ``daemon status`` reads it meanwhile.
        pending: list[str] = []
        if vec and self.embedder is not None and self.semantic_error is None:
            upsert = [m for m, key in vec.items() if key is not None]
            try:
                vecs, done = self.embedding.embed([vec[m] or "" for m in upsert], [mems[m].text for m in upsert],
                                                  budget, with_vector=len(mems) - len(upsert), probe=probe,
                                                  report=self.progress, long_lived=self.defer_saves)
            except EmbedderUnavailable as exc:
                self.semantic_error = str(exc)
            else:
                ready = [m for m, ok in zip(upsert, done, strict=True) if ok]
                pending = [m for m, ok in zip(upsert, done, strict=True) if not ok]
                waiting = set(pending)
                # A memory whose text changed keeps no stale vector while it waits for its new one.
                self.vectors.remove([m for m, key in vec.items() if key is None or m in waiting])
                self.vectors.add(ready, vecs[done])
                _patch(self.state.vec_manifest, {m: None if m in waiting else key for m, key in vec.items()})
                changed = True
        self.pending = pending
        return changed


    # -- saving ------------------------------------------------------------------------------------
    def _save(self) -> None:
        self._save_later()()

    def _save_later(self) -> Callable[[], None]:
        """Save under the store's index lock (the caller holds it), in two steps: the vectors
        now (faiss's storage may move once a caller's own lock is let go) and the metadata as a
        snapshot; the returned function writes the snapshot (~0.6 s of JSON at 100k)."""
        assert self.vectors is not None and self.keyword is not None
        self.files.save_vectors(self.vectors)
        meta = self.files.snapshot(self.state, self.vectors, self.keyword,
                                   self.embedder.model_id if self.embedder else None)
        self._dirty = False

        def write() -> None:
            try:
                self.files.write_meta(meta)
            except BaseException:
                self._dirty = True  # saved next time
                raise

        return write

    def flush(self) -> None:
        """Save projections held back by ``defer_saves`` (the daemon calls this when idle)."""
        save = self.flush_later()
        if save is not None:
            save()

    def flush_later(self) -> Callable[[], None] | None:
        """``flush`` in two steps, for a caller holding a lock others wait on (the daemon's
        workspace lock): the vectors are saved now and the rest taken as a snapshot; the
        returned function writes the snapshot without that lock. The store's index lock is held
        from now until it has run, so no process sees the vectors without their metadata."""
        if not self._loaded or not self.store.root.is_dir():
            return None  # a store deleted under a long-lived process is not brought back by its index
        if self.kw_builder.due():
            self.refresh(walk=False, budget=0.0)  # start a planned build; swap a finished one in
        if self.keyword is not None and self.keyword.in_memory and self.kw_builder.build is None:
            self._keyword_to_disk()
        if not self._dirty:
            if self.files.intact(self.keyword):
                return None
            # Deleted or damaged on disk while this process holds it: save it all again.
            if self.keyword is not None and self.keyword.damaged():
                self._heal_keyword(RuntimeError("its files were deleted or changed on disk"))
            self._dirty = True
        lock = self.files.outer_lock()
        lock.__enter__()
        try:
            if self.files.moved_ahead():
                # Someone else saved meanwhile; ours may be older. The next sync reconciles.
                self._dirty = False
                lock.__exit__(None, None, None)
                return None
            write = self._save_later()
        except DiskFull as exc:
            lock.__exit__(None, None, None)
            self._no_room(exc)
            return None
        except BaseException:
            lock.__exit__(None, None, None)
            raise

        def finish() -> None:
            try:
                write()
            except DiskFull as exc:
                self._no_room(exc)
            finally:
                lock.__exit__(None, None, None)

        return finish
    # -- embedding in the background (the daemon) ------------------------------------------------
    def waiting_texts(self) -> dict[str, str]:
        """Text key -> text of the memories waiting for a vector that the embedding cache does
        not hold: what a background encode should make (the caller holds the workspace lock)."""
        cache = self.embedding_cache() if self.semantic_ready else None
        return self.embedding.waiting_texts(self.pending, self._keys, cache)

    def offer(self, keys: list[str], vecs: np.ndarray) -> None:
        """Vectors a background encode made, from any thread: kept for the next ``take_ready``."""
        self.embedding.offer(keys, vecs)

    def made_ahead(self, key: str) -> bool:
        """A read encoded this text key itself (its keyword candidates, ``embed_now``): the
        background encode need not. Safe from any thread."""
        return key in self.embedding.ahead

    def take_ready(self) -> bool:
        """Put offered vectors into the index: one refresh that embeds nothing itself, over the
        waiting memories whose vector is ready (the first ``PLAN_WAITING`` of them). Returns
        whether any were ready; call again until it returns False."""
        if not self.embedding.ready or not self.embedding_pending:
            self.embedding.ready.clear()
            return False
        first, taken = self.embedding.pick_ready(PLAN_WAITING)
        self.refresh(walk=False, budget=0.0, first=first)
        self.embedding.drop(taken)
        return True

    def start_keyword_build(self) -> None:
        """Start the keyword build a refresh planned, unless memories wait for a vector in the
        daemon (which embeds them in the background): the build then waits for them, and the
        scan lane answers reads meanwhile. Beside the embedding the build (pure Python, at the
        daemon's priority, in the daemon's one share of the cores, where the workers' nice 10
        ranks them below it) took more than half of the workers' part while it ran, 40 s at 10k
        memories, and the interpreter from the in-process encoder (bench/RESULTS.md
        "Background embedding against the encoder pool"). Only while the backlog is at most
        ``BUILD_AFTER_EMBEDDING`` memories: a larger one takes the workers longer than the scan
        lane should answer alone (at 100k, an hour of reads each analysing the store's texts
        for their words), so its build runs beside the embedding, as before."""
        if not (self.defer_saves and self.embedding_pending and len(self.pending) <= build_after_embedding_setting()):
            self.kw_builder.start_planned()

    def embed_now(self, mids: list[str], budget: float) -> int:
        """Embed these waiting memories now, in this process and in this order, ahead of the
        rest, for at most ``budget`` seconds (a read's keyword candidates: the gate and the
        answer then judge them by their own vectors). Returns how many got their vector."""
        if not self.embedding_pending or not mids or self.embedder is None:
            return 0
        waiting = set(self.pending)
        known = [(m, self._keys[m]) for m in dict.fromkeys(mids) if m in waiting and m in self._keys]
        done = self.embedding.encode_ahead([(mid, mem.text, key) for mid, (mem, _doc, key) in known], budget)
        while self.take_ready():
            pass
        return done

    def embedding_cache(self) -> EmbeddingCache:
        return self.embedding.cache()

    # -- the keyword index built in the background ---------------------------------------------------
    def _docs(self) -> list[Doc]:
        """(id, doc key, kind, tags, text) of every memory of the catalog."""
        out = []
        keys = self._keys
        for mid, mem in self.catalog.memories.items():
            known = keys.get(mid)
            if known is None or known[0] is not mem:
                known = keys[mid] = (mem, doc_key(mem), text_key(mem.text))
            out.append((mid, known[1], mem.kind, mem.tags, mem.text))
        return out

    def _finish_keyword(self) -> bool:
        """Swap a finished background build in for the live keyword index (under the index
        lock); the next plan then applies what changed since the build began. True if it did,
        or if the build failed (the next sync then builds it in the call)."""
        build = self.kw_builder.take_done()
        if build is None:
            return False
        if build.error is not None:
            return True
        assert self.keyword is not None
        with self.files.lock():
            self.keyword.close()
            live = self.kw_builder.swap_in(build)
            self._use_keyword(KeywordIndex(live, self.params))
            self.state.kw_manifest = build.manifest
            self.scan = None
            self._changed_on_disk()
            if self.defer_saves:
                self._save()  # the saved metadata names the keyword files: keep them together
        self.kw_builder.swapped(build)
        return True

    # -- queries -----------------------------------------------------------------------------------
    @property
    def semantic_ready(self) -> bool:
        return self.embedder is not None and self.semantic_error is None

    def rebuild(self) -> None:
        """Drop the projections (the embedding cache only where it fails to validate) and the
        catalog's cache, and build them again from the files."""
        with self.files.lock():
            self._wipe()
        self.catalog.reset()
        self._loaded = False
        self._synced_catalog_gen = -1
        self.scan = None
        self.kw_builder.inline = True  # whoever asks for a rebuild waits for the keyword index
        try:
            self.refresh()
        finally:
            self.kw_builder.inline = False

    def use_bm25(self, params: BM25Params) -> None:
        """Score with ``params``' BM25 constants: a long-lived process shares one index of a store
        among workspaces whose ``read:`` settings may differ; the files do not depend on them."""
        if (params.bm25_b, params.bm25_k1) == (self.params.bm25_b, self.params.bm25_k1):
            return
        self.params = params
        if self.keyword is not None:
            self.keyword.set_bm25(params)
        if self.scan is not None:
            self.scan.b, self.scan.k1 = params.bm25_b, params.bm25_k1

    def close(self) -> None:
        if self.keyword is not None:
            self.keyword.close()


def _patch(manifest: dict[str, str], plan: dict[str, str | None]) -> None:
    for mid, key in plan.items():
        if key is None:
            manifest.pop(mid, None)
        else:
            manifest[mid] = key
