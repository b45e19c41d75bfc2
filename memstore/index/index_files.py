"""The files of one store's ``.index/`` folder, and what this process knows of them.

``meta.json`` records what the projections hold (the manifests, the vectors' labels) and the
size and mtime of every file it vouches for; it is sealed with this user's key, so nothing a
clone, a pull or another user left there is believed. ``generation`` is the few bytes a writer
reads under ``index.lock`` to see whether another process saved since. This module reads,
checks and writes those files, takes the lock, and clears what a damaged index or a dead build
left behind. Kept apart from ``store_index`` (which decides when to load, sync and save) so
that everything that trusts or distrusts a file on disk is read in one place.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..store.files import (
    NotOurs,
    alive,
    atomic_write,
    clear_way,
    file_lock,
    private_dir,
    read_projection,
    recheck_dir,
)
from ..store.userkey import looks_sealed, sealing, unseal
from .keyword import BM25Params, KeywordIndex, folder_listing
from .vectors import VectorIndex, ann_path

META_VERSION = 2
# The files whose size, mtime and inode this process remembers as it last wrote or read them.
WATCHED = ("meta.json", "vectors.faiss", "vectors.ann")
# meta.json records ~200 bytes per memory (its vector label and two manifest keys): 1,000,000
# memories, the ceiling of limits.max_files, fit well within this. A larger file was not written
# here; its size is checked on the open file, and its seal's place at the end, before any read.
MAX_META_BYTES = 512 * 1024 * 1024
MAX_GENERATION_BYTES = 32  # a decimal number
# Entries of a manifest encoded at a time when meta.json is written (``meta_chunks``).
META_SLICE = 4096


@dataclass
class IndexState:
    kw_manifest: dict[str, str] = field(default_factory=dict)  # id -> doc key in the keyword index
    vec_manifest: dict[str, str] = field(default_factory=dict)  # id -> text key in the vector index
    generation: int = 0


def damaged(what: str, why: BaseException | str) -> str:
    """What a warning says of a damaged projection, which is rebuilt from the files."""
    if isinstance(why, BaseException):
        why = f"{type(why).__name__}: {str(why)[:160]}"
    return f"{what} was damaged ({why}); rebuilt from the files"


class IndexFiles:
    """One store's ``.index/`` folder. ``note`` receives what a reader of the answer should be
    told (a damaged or foreign file, rebuilt)."""

    def __init__(self, folder: Path, key: bytes, note: Callable[[str], None]) -> None:
        self.dir = folder
        self.key = key
        self._note = note
        self.generation = 0  # the generation of the on-disk index this process's state started from
        self._lock_depth = 0
        self._on_disk: dict[str, tuple[int, int, int] | None] = {}

    @property
    def meta_path(self) -> Path:
        return self.dir / "meta.json"

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """The store's index lock, once per process however deep the calls nest (flock locks
        per open file: taking it again through a second descriptor would wait for ever)."""
        if self._lock_depth:
            yield
            return
        with file_lock(clear_way(self.dir / "index.lock")):
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1

    def outer_lock(self) -> contextlib.AbstractContextManager[None]:
        """The index lock as a context manager of its own, for a caller that holds it across a
        return (``StoreIndex.flush_later``)."""
        return file_lock(clear_way(self.dir / "index.lock"))

    def prepare(self, *, private: bool) -> None:
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        if private:
            # The global store's text (catalog, keyword index, vectors) is for its owner only,
            # whatever the umask: a 0700 directory keeps every file Whoosh or faiss creates in it
            # out of other users' reach.
            private_dir(self.dir)
        else:
            self.dir.mkdir(exist_ok=True)

    # -- meta.json -------------------------------------------------------------------------------
    def read_meta(self, *, quiet: bool = False) -> dict[str, Any] | None:
        try:
            raw = read_projection(self.meta_path, MAX_META_BYTES, tail=looks_sealed)
            body = unseal(raw, self.key)
        except FileNotFoundError:
            return None
        except NotOurs:
            body = None
        except OSError as exc:
            if not quiet:
                self._note(damaged("index metadata", exc))
            return None
        try:
            if body is None:
                # Not written here by this user (a clone or a pull brought it, or an older
                # memstore wrote it): nothing it records about the other files is believed.
                if not quiet:
                    self._note("the index in .index/ was not written here by this user (no valid seal); "
                               "not trusted, rebuilt from the files")
                return None
            meta = json.loads(body)
        except (OSError, ValueError) as exc:
            if not quiet:
                self._note(damaged("index metadata", exc))
            return None
        if not isinstance(meta, dict) or meta.get("version") != META_VERSION:
            return None
        return meta

    def snapshot(self, state: IndexState, vectors: VectorIndex, keyword: KeywordIndex,
                 model_id: str | None) -> dict[str, Any]:
        """What meta.json holds, as a snapshot (the manifests copied)."""
        files = {f"keyword/{name}": sig for name, sig in keyword.files().items()}
        for name in ("vectors.faiss", "vectors.ann"):
            vec = stat(self.dir / name)
            if vec is not None:
                files[name] = [vec[0], vec[1]]
        return {
            "version": META_VERSION,
            "generation": state.generation,
            "model_id": model_id,
            "dim": vectors.dim,
            # Whole-number keys, written as JSON's strings: a copy of the table, no new strings.
            "labels": dict(vectors.id_of),
            "kw_manifest": dict(state.kw_manifest),
            "vec_manifest": dict(state.vec_manifest),
            # Size and mtime of each file as saved: a file that differs on the next load was
            # damaged (Whoosh can read a garbled segment without an error).
            "files": files,
        }

    def write_meta(self, meta: dict[str, Any]) -> None:
        atomic_write(clear_way(self.meta_path), sealing(meta_chunks(meta), self.key))
        # A few bytes a writer checks under the lock instead of parsing the whole manifest.
        atomic_write(clear_way(self.dir / "generation"), str(meta["generation"]))
        self.note_written()
        self.generation = meta["generation"]

    def disk_gen(self) -> int | None:
        """The generation of the index on disk, or None when there is none."""
        if not self.meta_path.is_file():
            return None
        try:
            return int(read_projection(self.dir / "generation", MAX_GENERATION_BYTES))
        except (OSError, ValueError):  # NotOurs among them: set aside
            meta = self.read_meta(quiet=True)  # an index saved before the generation file existed
            return int(meta.get("generation", 0)) if meta is not None else None

    def moved_ahead(self) -> bool:
        """Whether another process saved the index since this one loaded or saved it."""
        disk = self.disk_gen()
        return disk is not None and disk != self.generation

    def note_written(self) -> None:
        """Remember the metadata and vectors as this process last saw them on disk."""
        self._on_disk = {name: stat(self.dir / name) for name in WATCHED}

    def intact(self, keyword: KeywordIndex | None) -> bool:
        """Whether the saved projections are still as this process left them: a deleted,
        truncated or garbled file is written again by the next flush."""
        return (self.meta_path.is_file() and keyword is not None and not keyword.damaged()
                and all(stat(self.dir / name) == sig for name, sig in self._on_disk.items()))

    # -- loading ---------------------------------------------------------------------------------
    def open_keyword(self, params: BM25Params) -> tuple[KeywordIndex, dict[str, Any] | None, str]:
        """The keyword index the folder holds, the checked metadata (None: none to believe; a
        ValueError: a field of the wrong type) and the keyword files' ``keyword_state``; the
        index starts empty unless the metadata vouches for exactly its files."""
        meta = self.read_meta()
        if meta is not None:
            meta = valid_meta(meta)
        # Whoosh opens whatever the folder holds (pickles among it), so the folder must hold
        # exactly the files the sealed metadata records. Without metadata nothing says what the
        # keyword index holds: start it empty.
        kw_state = keyword_state(self.dir, meta)
        kw_bad = kw_state != "saved"
        # Starting afresh deletes the folder: not while another process commits to it.
        with self.lock() if kw_bad else contextlib.nullcontext():
            if kw_bad and meta is not None:
                # That process may have committed to the folder and not yet saved the metadata
                # (it does both under this lock): look again now that it has finished.
                meta = self.read_meta(quiet=True)
                meta = valid_meta(meta) if meta is not None else None
                kw_state = keyword_state(self.dir, meta)
                kw_bad = kw_state != "saved"
            keyword = KeywordIndex(self.dir / "keyword", params, fresh=kw_bad)
        return keyword, meta, kw_state

    def saved_vectors(self, meta: dict[str, Any], dim: int,
                      own: Callable[[str], str] | None = None) -> tuple[VectorIndex, dict[str, str]]:
        """The vectors and their manifest as ``meta`` records them, every id as ``own`` gives it
        (the catalog's string for it). ValueError, RuntimeError, OSError or KeyError: the file
        is not the one saved, or unreadable."""
        saved, now = meta.get("files", {}).get("vectors.faiss"), stat(self.dir / "vectors.faiss")
        if saved is None or now is None or [now[0], now[1]] != list(saved):
            raise ValueError("vectors.faiss is not the file that was saved")
        own = own if own is not None else _same
        labels = {int(k): own(v) for k, v in meta.get("labels", {}).items()}
        # The approximate index is read only when it is the file saved with these vectors; any
        # other is left to be built again from them.
        ann_saved, ann_now = meta.get("files", {}).get("vectors.ann"), stat(ann_path(self.dir / "vectors.faiss"))
        with_ann = ann_saved is not None and ann_now is not None and [ann_now[0], ann_now[1]] == list(ann_saved)
        return (VectorIndex.load(self.dir / "vectors.faiss", dim, labels, with_ann=with_ann),
                {own(k): v for k, v in dict(meta.get("vec_manifest", {})).items()})

    def save_vectors(self, vectors: VectorIndex) -> None:
        vectors.save(clear_way(self.dir / "vectors.faiss"))

    def vouch_keyword(self, files: dict[str, list[int]]) -> bool:
        """Whether the sealed metadata on disk records exactly ``files`` as the keyword folder."""
        try:
            meta = self.read_meta(quiet=True)
            return meta is not None and keyword_files_state(files, valid_meta(meta)) == "saved"
        except ValueError:
            return False

    # -- clearing --------------------------------------------------------------------------------
    def wipe(self) -> None:
        """Delete the projections' files (the caller has closed the keyword index), and set
        aside whatever else in the folder memstore would not have written (a pull may have
        brought it since this process first looked)."""
        recheck_dir(self.dir)
        shutil.rmtree(self.dir / "keyword", ignore_errors=True)
        for name in ("vectors.faiss", "vectors.ann", "meta.json", "generation"):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / name).unlink()

    def clean_builds(self, ours: str | None) -> None:
        """Remove keyword indexes a build left beside the live one (``keyword.next-<pid>-<n>``: a
        process that died mid-build; ``keyword.old-<pid>``: one that died mid-swap), except
        ``ours`` and those of a build still running. Nothing is lost with them: the files are
        the truth."""
        with contextlib.suppress(OSError), os.scandir(self.dir) as entries:
            leftovers = [e for e in entries if e.name.startswith(("keyword.next-", "keyword.old-"))]
        for entry in leftovers:
            pid = entry.name.split("-")[1]  # keyword.next-<pid>-<n>
            if entry.name == ours or (entry.name.startswith("keyword.next-") and pid.isdigit()
                                      and int(pid) != os.getpid() and alive(int(pid))):
                continue
            if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            else:
                shutil.rmtree(entry.path, ignore_errors=True)


def stat(path: Any) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def keyword_state(folder: Any, meta: dict[str, Any] | None) -> str:
    """Whether ``keyword/`` holds the files ``meta`` records, each with its recorded size and
    mtime, and no other ("saved"); files it does not record ("added": a newer table of contents,
    which Whoosh would open, may be anyone's); or a recorded file changed ("changed", also
    without metadata)."""
    if meta is None:
        return "changed"
    if not (folder / "keyword").is_dir():
        return "changed"
    return keyword_files_state(folder_listing(folder / "keyword"), meta)


def keyword_files_state(now: dict[str, list[int]], meta: dict[str, Any]) -> str:
    """``keyword_state`` for a listing ``now`` of the keyword folder."""
    saved = {name[len("keyword/"):]: list(sig) for name, sig in meta.get("files", {}).items()
             if name.startswith("keyword/")}
    if not saved or any(name in now and now[name] != sig for name, sig in saved.items()):
        return "changed"
    # A recorded file that is gone is judged when it is read (a later commit may have merged it
    # away, and then it added files too).
    return "added" if set(now) - set(saved) else "saved"


def valid_meta(meta: dict[str, Any]) -> dict[str, Any]:
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


def meta_chunks(meta: dict[str, Any]) -> Iterator[str]:
    """``meta`` as compact JSON, a few thousand entries of a manifest at a time: at 100k
    memories the whole text is 16 MB, and ``json.dumps`` held its pieces and the text together
    (a save's peak +49 MB over the process; streamed +3 MB, bench/rss.py library --phases).
    The text is what ``json.dumps(meta, separators=(",", ":"))`` makes."""
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    sep = "{"
    for key, value in meta.items():
        if isinstance(value, dict) and len(value) > META_SLICE:
            yield f"{sep}{dumps(key)}:{{"
            items, first = iter(value.items()), True
            while part := dict(itertools.islice(items, META_SLICE)):
                yield ("" if first else ",") + dumps(part)[1:-1]
                first = False
            yield "}"
        else:
            yield f"{sep}{dumps(key)}:{dumps(value)}"
        sep = ","
    yield "{}" if sep == "{" else "}"


def _same(mid: str) -> str:
    return mid
