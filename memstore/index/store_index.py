"""One store's projections kept in line with its files: catalog -> keyword + vector indexes.

Every call refreshes incrementally (SPEC §5): the catalog's stat walk finds changed files, only
their documents are re-indexed, and only text never embedded before goes through the model.
Writers in several processes serialise on ``.index/index.lock``; each save bumps a generation
so a process notices when another one moved the on-disk index ahead of its own copy.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DiskFull
from ..store.catalog import Catalog
from ..store.files import atomic_write, content_hash, file_lock, private_dir
from ..store.model import Memory
from ..store.userkey import projection_key, sealed_json, unseal
from .embcache import EmbeddingCache, text_key
from .embedder import Embedder, EmbedderUnavailable
from .keyword import BM25Params, KeywordIndex, folder_listing
from .scanlane import ScanLane
from .vectors import VectorIndex

log = logging.getLogger("memstore.index")

META_VERSION = 2
SAVE_EVERY_S = 1.0  # new vectors reach the embedding cache at least this often: a kill loses little
# A refresh with a time budget plans at most this many waiting memories: planning and looking up
# every waiting memory costs ~20 ms per slice at 10k (2 ms with this cap), so ~200 ms of each
# quarter-second slice at 100k.
PLAN_WAITING = 1024
# A long-lived process whose keyword index lacks more of the catalog's documents than this (a
# fresh clone, a big pull) builds the Whoosh index in the background, beside the old one, and
# answers meanwhile from a scan of the texts in memory (``scanlane``): Whoosh's writer takes ~4 s
# per 1k memories on 2 cores, the scan lane ~0.1 s, and their hits and scores are the same.
KW_DEFER = 256
# A read that finds more than KW_DEFER memories without a vector embeds only this many before it
# answers (partial): its wait cannot finish them, and the daemon embeds the rest behind it. The
# probe still shows at once whether the model works.
EMBED_PROBE = 4

# (store root, memories with a vector, memories): how far embedding has come, for a progress bar.
Progress = Callable[[Any, int, int], None]


def doc_key(mem: Memory) -> str:
    return content_hash("\x1f".join([mem.kind, ",".join(mem.tags), mem.text]).encode("utf-8"))


@dataclass
class IndexState:
    kw_manifest: dict[str, str] = field(default_factory=dict)  # id -> doc key in the keyword index
    vec_manifest: dict[str, str] = field(default_factory=dict)  # id -> text key in the vector index
    generation: int = 0


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
        self._synced_catalog_gen = -1
        self._cache: EmbeddingCache | None = None
        self._loaded = False
        self.defer_saves = False
        self._dirty = False
        self._disk_generation = 0  # the generation of the on-disk index this state started from
        self._keys: dict[str, tuple[Memory, str, str]] = {}  # id -> (parsed memory, doc key, text key)
        self._lock_depth = 0
        self._on_disk: dict[str, tuple[int, int, int] | None] = {}
        # Seconds a refresh may spend embedding before it returns with memories still without a
        # vector (``pending``); None: it embeds them all. The daemon bounds it so a read after a
        # clone or a big pull answers at once, and embeds the rest between requests.
        self.embed_wait: float | None = None
        self.progress: Progress | None = None
        self.pending: list[str] = []  # memories in the catalog whose vector is not made yet
        # Vectors a background encode made (``offer``) for text keys ``waiting_texts`` handed
        # out, until a refresh puts them into the index and the embedding cache.
        self._wanted: dict[str, list[str]] = {}  # text key -> the waiting memories with that text
        self._ready: dict[str, np.ndarray] = {}
        # While a background build of the keyword index runs: the lane reads answer from.
        self.scan: ScanLane | None = None
        self._scan_gen = -1  # the catalog generation the scan lane holds
        self._kw_build: _KeywordBuild | None = None
        self._kw_inline = False  # build the keyword index in the call (rebuild, a failed build)

    @property
    def lane(self) -> KeywordIndex | ScanLane | None:
        """What the keyword lane reads: the scan lane while the keyword index is being built."""
        return self.scan if self.scan is not None else self.keyword

    # -- loading -------------------------------------------------------------------------------
    @property
    def _meta_path(self) -> Any:
        return self.dir / "meta.json"

    def _fault(self, what: str, why: BaseException | str) -> None:
        """A damaged projection is rebuilt from the files; say so once, in the answer's
        ``warnings`` and in the log (the daemon's log file when the daemon runs)."""
        if isinstance(why, BaseException):
            why = f"{type(why).__name__}: {str(why)[:160]}"
        self._note(f"{what} was damaged ({why}); rebuilt from the files")

    def _note(self, msg: str) -> None:
        if msg not in self.warnings:  # a reload finds the same thing again: say it once
            self.warnings.append(msg)
        log.info("%s: %s", self.dir, msg)

    def _read_meta(self, *, quiet: bool = False) -> dict[str, Any] | None:
        try:
            raw = self._meta_path.read_bytes()
            body = unseal(raw, self.key)
            if body is None:
                # Not written here by this user (a clone or a pull brought it, or an older
                # memstore wrote it): nothing it records about the other files is believed.
                if not quiet:
                    self._note("the index in .index/ was not written here by this user (no valid seal); "
                               "not trusted, rebuilt from the files")
                return None
            meta = json.loads(body)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            if not quiet:
                self._fault("index metadata", exc)
            return None
        if not isinstance(meta, dict) or meta.get("version") != META_VERSION:
            return None
        return meta

    def _load(self) -> None:
        """Load what is on disk; anything unreadable is dropped and rebuilt on the next sync."""
        try:
            self._load_disk()
        except Exception as exc:  # whatever the damage, the files are the truth: start empty
            self._fault("index", exc)
            with self._lock():
                self._wipe()
                self._load_disk()

    def _wipe(self) -> None:
        if self.keyword is not None:
            self.keyword.close()
        self.keyword = None
        shutil.rmtree(self.dir / "keyword", ignore_errors=True)
        for name in ("vectors.faiss", "meta.json", "generation"):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / name).unlink()

    def _load_disk(self) -> None:
        self._loaded = True
        self._disk_generation = 0
        self._dirty = False
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        if self.store.scope == "global":
            # The global store's text (catalog, keyword index, vectors) is for its owner only,
            # whatever the umask: a 0700 directory keeps every file Whoosh or faiss creates in it
            # out of other users' reach.
            private_dir(self.dir)
        else:
            self.dir.mkdir(exist_ok=True)
        self._clean_builds()
        meta = self._read_meta()
        if meta is not None:
            meta = _valid_meta(meta)
        # Whoosh opens whatever the folder holds (pickles among it), so the folder must hold
        # exactly the files the sealed metadata records. Without metadata nothing says what the
        # keyword index holds: start it empty.
        kw_state = _keyword_state(self.dir, meta)
        kw_bad = kw_state != "saved"
        if self.keyword is not None:
            self.keyword.close()
        # Starting afresh deletes the folder: not while another process commits to it.
        with self._lock() if kw_bad else contextlib.nullcontext():
            if kw_bad and meta is not None:
                # That process may have committed to the folder and not yet saved the metadata
                # (it does both under this lock): look again now that it has finished.
                meta = self._read_meta(quiet=True)
                meta = _valid_meta(meta) if meta is not None else None
                kw_state = _keyword_state(self.dir, meta)
                kw_bad = kw_state != "saved"
            self.keyword = KeywordIndex(self.dir / "keyword", self.params, fresh=kw_bad)
        self.keyword.on_fault = self._heal_keyword
        self.keyword.vouch = self._vouch_keyword
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
            self._note_written()
            return
        self.state.generation = int(meta.get("generation", 0))
        self._disk_generation = self.state.generation
        if not self.keyword.created:
            self.state.kw_manifest = dict(meta.get("kw_manifest", {}))
        model_ok = self.embedder is not None and meta.get("model_id") == self.embedder.model_id
        if model_ok and meta.get("dim") == dim and (self.dir / "vectors.faiss").is_file():
            try:
                saved, now = meta.get("files", {}).get("vectors.faiss"), _stat(self.dir / "vectors.faiss")
                if saved is None or now is None or [now[0], now[1]] != list(saved):
                    raise ValueError("vectors.faiss is not the file that was saved")
                labels = {int(k): v for k, v in meta.get("labels", {}).items()}
                self.vectors = VectorIndex.load(self.dir / "vectors.faiss", dim, labels)
                self.state.vec_manifest = dict(meta.get("vec_manifest", {}))
            except (ValueError, RuntimeError, OSError, KeyError) as exc:
                self._fault("vector index", exc)
                self.vectors = VectorIndex(dim)
        elif meta.get("model_id") and self.embedder is not None and meta.get("model_id") != self.embedder.model_id:
            self.warnings.append(f"embedding model changed ({meta.get('model_id')} -> {self.embedder.model_id}); "
                                 "vectors rebuilt")
        self._note_written()

    def _clean_builds(self) -> None:
        """Remove keyword indexes a build left beside the live one (``keyword.next-<pid>-<n>``: a
        process that died mid-build; ``keyword.old-<pid>``: one that died mid-swap), except
        those of a build still running. Nothing is lost with them: the files are the truth."""
        ours = self._kw_build.folder.name if self._kw_build is not None else None
        with contextlib.suppress(OSError), os.scandir(self.dir) as entries:
            leftovers = [e for e in entries if e.name.startswith(("keyword.next-", "keyword.old-"))]
        for entry in leftovers:
            pid = entry.name.split("-")[1]  # keyword.next-<pid>-<n>
            if entry.name == ours or (entry.name.startswith("keyword.next-") and pid.isdigit()
                                      and int(pid) != os.getpid() and _alive(int(pid))):
                continue
            if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            else:
                shutil.rmtree(entry.path, ignore_errors=True)

    def _vouch_keyword(self, files: dict[str, list[int]]) -> bool:
        """Whether the sealed metadata on disk records exactly ``files`` as the keyword folder."""
        try:
            meta = self._read_meta(quiet=True)
            return meta is not None and _keyword_files_state(files, _valid_meta(meta)) == "saved"
        except ValueError:
            return False

    def _heal_keyword(self, exc: Exception) -> None:
        """The keyword index's files failed a read: build it again from the catalog, now."""
        assert self.keyword is not None
        self._fault("keyword index", exc)
        with self._lock():
            self.keyword.reset()
            self.state.kw_manifest = {}
            kw, _ = self._plan(None)
            self._sync(kw, {})
            self._changed_on_disk()

    def _keyword_to_disk(self) -> None:
        """A keyword index held in memory (the device was full) goes back to disk once there is
        room: tried when a long-lived process saves (the daemon, idle), not on every read."""
        assert self.keyword is not None
        with self._lock():
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
        self.state.generation = max(self.state.generation, self._disk_gen() or 0) + 1
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

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """The store's index lock, once per process however deep the calls nest (flock locks
        per open file: taking it again through a second descriptor would wait for ever)."""
        if self._lock_depth:
            yield
            return
        with file_lock(self.dir / "index.lock"):
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1

    def _note_written(self) -> None:
        """Remember the metadata and vectors as this process last saw them on disk."""
        self._on_disk = {name: _stat(self.dir / name) for name in ("meta.json", "vectors.faiss")}

    def _disk_intact(self) -> bool:
        """Whether the saved projections are still as this process left them: a deleted,
        truncated or garbled file is written again by the next flush."""
        return (self._meta_path.is_file() and self.keyword is not None and not self.keyword.damaged()
                and all(_stat(self.dir / name) == sig for name, sig in self._on_disk.items()))

    def _meta(self) -> dict[str, Any]:
        """What meta.json holds, as a snapshot (the manifests copied)."""
        assert self.vectors is not None and self.keyword is not None
        files = {f"keyword/{name}": sig for name, sig in self.keyword.files().items()}
        vec = _stat(self.dir / "vectors.faiss")
        if vec is not None:
            files["vectors.faiss"] = [vec[0], vec[1]]
        return {
            "version": META_VERSION,
            "generation": self.state.generation,
            "model_id": self.embedder.model_id if self.embedder else None,
            "dim": self.vectors.dim,
            "labels": {str(k): v for k, v in self.vectors.id_of.items()},
            "kw_manifest": dict(self.state.kw_manifest),
            "vec_manifest": dict(self.state.vec_manifest),
            # Size and mtime of each file as saved: a file that differs on the next load was
            # damaged (Whoosh can read a garbled segment without an error).
            "files": files,
        }

    def _write_meta(self, meta: dict[str, Any]) -> None:
        atomic_write(self._meta_path, sealed_json(json.dumps(meta, separators=(",", ":")), self.key))
        # A few bytes a writer checks under the lock instead of parsing the whole manifest.
        atomic_write(self.dir / "generation", str(meta["generation"]))
        self._note_written()

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
        if self._kw_build is not None and not self._kw_build.started:
            # Planned by an earlier call (a read, which answers sooner without a build beside
            # it on two cores): the daemon's next refresh, embedding behind that read, starts it.
            self._kw_build.start()
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
            elif budget is not None and len(head) > PLAN_WAITING:
                head, carry = head[:PLAN_WAITING], head[PLAN_WAITING:]
            ids = since[0] | set(head)
            carry = [m for m in carry if m not in ids]
        kw, vec = self._plan(ids)
        if not kw and (not vec or self.embedder is None or self.semantic_error):
            self._synced_catalog_gen = self.catalog.generation
            self.pending = carry
            return False
        with self._lock():
            disk = self._disk_gen()
            if disk is not None and disk != self._disk_generation:
                # Another process saved a newer index: start from it, it is probably closer.
                self._load()
                kw, vec = self._plan(None)
                carry = []
            changed = self._sync(kw, vec, budget, probe=probe and self.embed_wait is not None)
            self.pending += carry
            if changed:
                self._changed_on_disk()
        self._synced_catalog_gen = self.catalog.generation
        return changed

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

    def _disk_gen(self) -> int | None:
        """The generation of the index on disk, or None when there is none."""
        if not self._meta_path.is_file():
            return None
        try:
            return int((self.dir / "generation").read_text())
        except (OSError, ValueError):
            meta = self._read_meta(quiet=True)  # an index saved before the generation file existed
            return int(meta.get("generation", 0)) if meta is not None else None

    def _save(self) -> None:
        self._save_later()()

    def _save_later(self) -> Callable[[], None]:
        """Save under the store's index lock (the caller holds it), in two steps: the vectors
        now (faiss's storage may move once a caller's own lock is let go) and the metadata as a
        snapshot; the returned function writes the snapshot (~0.6 s of JSON at 100k)."""
        assert self.vectors is not None
        self.vectors.save(self.dir / "vectors.faiss")
        meta = self._meta()
        self._dirty = False

        def write() -> None:
            try:
                self._write_meta(meta)
            except BaseException:
                self._dirty = True  # saved next time
                raise
            self._disk_generation = meta["generation"]

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
        if self._kw_build is not None and (self._kw_build.done.is_set() or not self._kw_build.started):
            self.refresh(walk=False, budget=0.0)  # start a planned build; swap a finished one in
        if self.keyword is not None and self.keyword.in_memory and self._kw_build is None:
            self._keyword_to_disk()
        if not self._dirty:
            if self._disk_intact():
                return None
            # Deleted or damaged on disk while this process holds it: save it all again.
            if self.keyword is not None and self.keyword.damaged():
                self._heal_keyword(RuntimeError("its files were deleted or changed on disk"))
            self._dirty = True
        lock = file_lock(self.dir / "index.lock")
        lock.__enter__()
        try:
            disk = self._disk_gen()
            if disk is not None and disk != self._disk_generation:
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
                    known = keys[mid] = (mem, doc_key(mem), text_key(mem.text))
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
        if kw and not self._keyword_later(kw):
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
                vecs, done = self._embed([vec[m] or "" for m in upsert], [mems[m].text for m in upsert],
                                         budget, with_vector=len(mems) - len(upsert), probe=probe)
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

    # -- embedding in the background (the daemon) ------------------------------------------------
    def waiting_texts(self) -> dict[str, str]:
        """Text key -> text of the memories waiting for a vector that the embedding cache does
        not hold: what a background encode should make (the caller holds the workspace lock)."""
        cache = self.embedding_cache() if self.semantic_ready else None
        out: dict[str, str] = {}
        wanted: dict[str, list[str]] = {}
        for mid in self.pending:
            known = self._keys.get(mid)
            if known is not None and cache is not None and known[2] not in cache:
                out[known[2]] = known[0].text
                wanted.setdefault(known[2], []).append(mid)
        self._wanted = wanted
        return out

    def offer(self, keys: list[str], vecs: np.ndarray) -> None:
        """Vectors a background encode made, from any thread: kept for the next ``take_ready``."""
        for key, vec in zip(keys, vecs, strict=True):
            if key in self._wanted:
                self._ready[key] = vec

    def take_ready(self) -> bool:
        """Put offered vectors into the index: one refresh that embeds nothing itself, over the
        waiting memories whose vector is ready (the first ``PLAN_WAITING`` of them). Returns
        whether any were ready; call again until it returns False."""
        ready = self._ready
        if not ready or not self.embedding_pending:
            ready.clear()
            return False
        # Found from the ready vectors, not by scanning the waiting list: at 100k memories that
        # scan, every slice, took more of a core than the embedding left free.
        first: list[str] = []
        taken: list[str] = []
        for key in list(ready):
            if len(first) >= PLAN_WAITING:
                break
            taken.append(key)
            first += self._wanted.get(key, ())
        self.refresh(walk=False, budget=0.0, first=first)
        for key in taken:  # used, or its memories no longer wait (deleted, text changed)
            ready.pop(key, None)
        return True

    def embed_now(self, mids: list[str], budget: float) -> int:
        """Embed these waiting memories now, in this process and in this order, ahead of the
        rest, for at most ``budget`` seconds (a read's keyword candidates: the gate and the
        answer then judge them by their own vectors). Returns how many got their vector."""
        if not self.embedding_pending or not mids or self.embedder is None:
            return 0
        waiting = set(self.pending)
        known = [(m, self._keys[m]) for m in dict.fromkeys(mids) if m in waiting and m in self._keys]
        deadline = time.monotonic() + budget
        done = 0
        for mid, (mem, _doc, key) in known:
            if time.monotonic() >= deadline:
                break
            self._ready[key] = self.embedder.encode([mem.text])[0]
            self._wanted.setdefault(key, []).append(mid)
            done += 1
        while self.take_ready():
            pass
        return done

    # -- the keyword index built in the background ---------------------------------------------------
    def _keyword_later(self, kw: dict[str, str | None]) -> bool:
        """Whether the keyword plan is left to a background build (started now if none runs),
        with the scan lane answering from the catalog meanwhile; False: apply it now."""
        docs = None
        if self._kw_build is None:
            if self._kw_inline or sum(1 for key in kw.values() if key is not None) <= KW_DEFER:
                return False
            if not self.defer_saves:
                # A one-shot process would exit before a build ends. One that hands the store
                # to a daemon it starts (a bounded wait: the CLI or MCP server before a daemon
                # runs) scans and leaves the build to that daemon; any other builds it now.
                if self.embed_wait is None:
                    return False
                self._scan_docs(None)
                return True
            docs = self._docs()
            # Named for this process and build: a workspace the daemon evicted and opened again
            # may still have a build of its own running.
            folder = self.dir / f"keyword.next-{os.getpid()}-{next(_BUILDS)}"
            self._kw_build = _KeywordBuild(folder, self.params, docs)
            log.info("%s: building the keyword index of %d memories in the background", self.dir, len(docs))
        self._scan_docs(docs)
        return True

    def _scan_docs(self, docs: list[tuple[str, str, str, list[str], str]] | None) -> None:
        """Bring the scan lane to the catalog's generation."""
        if self.scan is None or self._scan_gen != self.catalog.generation:
            if self.scan is None:
                self.scan = ScanLane(self.params)
            self.scan.set_docs(self._docs() if docs is None else docs)
            self._scan_gen = self.catalog.generation

    def _docs(self) -> list[tuple[str, str, str, list[str], str]]:
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
        lock); the next plan then applies what changed since the build began. True if it did."""
        build = self._kw_build
        if build is None or not build.done.is_set():
            return False
        self._kw_build = None
        if build.error is not None:
            # Not worth a second try in the background: the next sync builds it in the call.
            log.warning("%s: building the keyword index failed (%s); built in the next call", self.dir, build.error)
            shutil.rmtree(build.folder, ignore_errors=True)
            self._kw_inline = True
            return True
        assert self.keyword is not None
        live = self.dir / "keyword"
        old = self.dir / f"keyword.old-{os.getpid()}"
        with self._lock():
            self.keyword.close()
            shutil.rmtree(old, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.replace(live, old)
            os.replace(build.folder, live)
            self.keyword = KeywordIndex(live, self.params)
            self.keyword.on_fault = self._heal_keyword
            self.keyword.vouch = self._vouch_keyword
            self.state.kw_manifest = build.manifest
            self.scan = None
            self._changed_on_disk()
            if self.defer_saves:
                self._save()  # the saved metadata names the keyword files: keep them together
        shutil.rmtree(old, ignore_errors=True)
        log.info("%s: keyword index of %d memories built in %.1f s", self.dir, len(build.manifest), build.seconds)
        return True

    def embedding_cache(self) -> EmbeddingCache:
        assert self.embedder is not None
        if self._cache is None:
            self._cache = EmbeddingCache(self.dir / "embeddings", self.embedder.model_id, self.embedder.dim,
                                         secret=self.key)
        return self._cache

    def _embed(self, keys: list[str], texts: list[str], budget: float | None,
               with_vector: int = 0, *, probe: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The texts' vectors, from the cache, a background encode (``offer``) or the model,
        and which of them are done: all, or (with a ``budget`` of seconds) those found or
        embedded within it. ``with_vector``: memories of the store that already have one (for the
        progress report). Without a budget the worker processes may encode (a rebuild);
        with one, this process does, a part at a time (a read's wait). ``probe``: a read's
        wait, which embeds only ``EMBED_PROBE`` texts of a backlog over ``KW_DEFER``."""
        assert self.embedder is not None
        # Resolving the model may export it first (seconds, once per machine): not the wait's.
        cache = self.embedding_cache()
        deadline = None if budget is None else time.monotonic() + budget
        out, missing = cache.get_many(keys)
        done = np.ones(len(keys), dtype=bool)
        done[missing] = False
        # Saved to the cache as it goes: embedding a large store takes minutes, and an
        # interrupted build (a kill, a read's time bound) must not lose what it paid for.
        unsaved: list[int] = []
        if self._ready and missing:
            for i in missing:
                vec = self._ready.get(keys[i])
                if vec is not None:
                    out[i], done[i] = vec, True
                    unsaved.append(i)
            missing = [i for i in missing if not done[i]]
        total = with_vector + len(keys)
        report = self.progress if missing or unsaved else None
        saved_at = time.monotonic()

        def save() -> None:
            try:
                cache.put_many([keys[i] for i in unsaved], out[unsaved])
            except DiskFull as exc:
                self._no_room(exc)  # the vectors are in ``out``: only the next process embeds again
            for i in unsaved:
                self._ready.pop(keys[i], None)

        todo = missing[:EMBED_PROBE] if probe and deadline is not None and len(missing) > KW_DEFER else missing
        parts = self.embedder.encode_parts([texts[i] for i in todo], pool=deadline is None)
        try:
            while deadline is None or time.monotonic() < deadline:
                got = next(parts, None)
                if got is None:
                    break
                rows = [todo[j] for j in got[0]]
                out[rows] = got[1]
                done[rows] = True
                unsaved += rows
                if time.monotonic() - saved_at >= SAVE_EVERY_S:
                    save()
                    unsaved, saved_at = [], time.monotonic()
                if report is not None:
                    report(self.store.root, with_vector + int(done.sum()), total)
        finally:
            parts.close()  # the work not handed out yet is dropped
            if unsaved:
                save()
        if report is not None:
            report(self.store.root, with_vector + int(done.sum()), total)
        return out, done

    # -- queries -----------------------------------------------------------------------------------
    @property
    def semantic_ready(self) -> bool:
        return self.embedder is not None and self.semantic_error is None

    def rebuild(self) -> None:
        """Drop the projections (the embedding cache only where it fails to validate) and the
        catalog's cache, and build them again from the files."""
        with self._lock():
            self._wipe()
        self.catalog.reset()
        self._loaded = False
        self._synced_catalog_gen = -1
        self.scan = None
        self._kw_inline = True  # whoever asks for a rebuild waits for the keyword index
        try:
            self.refresh()
        finally:
            self._kw_inline = False

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


class _KeywordBuild:
    """A Whoosh index of a snapshot of the catalog, built by a thread into its own folder."""

    def __init__(self, folder: Any, params: BM25Params, docs: list[tuple[str, str, str, list[str], str]]) -> None:
        self.folder = folder
        self.manifest = {mid: key for mid, key, *_ in docs}
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.done = threading.Event()
        self.started = False
        self._thread = threading.Thread(target=self._run, args=(params, docs), name="keyword-build", daemon=True)

    def start(self) -> None:
        self.started = True
        self._thread.start()

    def _run(self, params: BM25Params, docs: list[tuple[str, str, str, list[str], str]]) -> None:
        t0 = time.monotonic()
        try:
            index = KeywordIndex(self.folder, params, fresh=True)
            if index.in_memory:  # no room for its files: nothing to swap in
                raise DiskFull("no space left on the device for the keyword index")
            try:
                index.apply(((mid, kind, tags, text) for mid, _key, kind, tags, text in docs), [])
            finally:
                index.close()
        except BaseException as exc:  # reported by the swap; reads keep the scan lane until then
            self.error = exc
        finally:
            self.seconds = time.monotonic() - t0
            self.done.set()


_BUILDS = itertools.count(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stat(path: Any) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def _keyword_state(folder: Any, meta: dict[str, Any] | None) -> str:
    """Whether ``keyword/`` holds the files ``meta`` records, each with its recorded size and
    mtime, and no other ("saved"); files it does not record ("added": a newer table of contents,
    which Whoosh would open, may be anyone's); or a recorded file changed ("changed", also
    without metadata)."""
    if meta is None:
        return "changed"
    if not (folder / "keyword").is_dir():
        return "changed"
    return _keyword_files_state(folder_listing(folder / "keyword"), meta)


def _keyword_files_state(now: dict[str, list[int]], meta: dict[str, Any]) -> str:
    """``_keyword_state`` for a listing ``now`` of the keyword folder."""
    saved = {name[len("keyword/"):]: list(sig) for name, sig in meta.get("files", {}).items()
             if name.startswith("keyword/")}
    if not saved or any(name in now and now[name] != sig for name, sig in saved.items()):
        return "changed"
    # A recorded file that is gone is judged when it is read (a later commit may have merged it
    # away, and then it added files too).
    return "added" if set(now) - set(saved) else "saved"


def _valid_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The metadata if its fields have the types written; a ValueError otherwise."""
    for key in ("kw_manifest", "vec_manifest", "labels", "files"):
        value = meta.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ValueError(f"meta.json: {key} is not a mapping")
    for key in ("kw_manifest", "vec_manifest", "labels"):
        if not all(isinstance(v, str) for v in meta.get(key, {}).values()):
            raise ValueError(f"meta.json: {key} holds a value that is not a string")
    if not all(isinstance(v, list) and len(v) == 2 for v in meta.get("files", {}).values()):
        raise ValueError("meta.json: files holds a bad record")
    if not isinstance(meta.get("generation", 0), int):
        raise ValueError("meta.json: generation is not a number")
    return meta


def _patch(manifest: dict[str, str], plan: dict[str, str | None]) -> None:
    for mid, key in plan.items():
        if key is None:
            manifest.pop(mid, None)
        else:
            manifest[mid] = key
