"""The keyword projection (lane B): a Whoosh BM25F index over text, code and tags.

Catches exact identifiers, error strings and file names that embeddings blur. Identifiers are
indexed twice: whole and by pieces in ``code`` (``resp.raise_for_status``, ``raise_for_status``)
and by their words in ``text`` (``raise``, ``status``), so a query naming the function finds the
call, and a whole-name match scores in both fields, above a match of its words alone.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import os
import re
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

if TYPE_CHECKING:
    import numpy as np

from ..errors import DiskFull
from ..store.files import disk_full
from .postings import BadPostings, PostingsFile, PostingsWriter, is_sidecar, leftovers, sidecar_name
from .safepickle import harden
from .terms import (
    CODE_PATTERN,
    EXACT,
    code_analyzer,
    code_shaped,
    code_terms,
    keyword_analyzer,
    keyword_terms,
    keyword_weighting,
)

# 4: the code field and the identifier-splitting text analyser; 5: analysers in index.terms;
# 6: no positions in ``text`` and no ``kind`` (nothing read them), one writer process
SCHEMA_VERSION = "6"


class _SegmentFile(io.FileIO):
    """A keyword index file Whoosh reads: closed when no reader holds it any more, as the map
    Whoosh would otherwise make of it was, without the ResourceWarning of a file left to the
    collector (a workspace dropped without ``close``)."""

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def _dealloc_warn(self, source: object) -> None:  # the buffer over it asks, when collected
        return


@functools.cache
def _file_reads() -> type:
    """Whoosh's FileStorage with its files opened as ``_SegmentFile``s (and no maps)."""
    from whoosh.filedb.filestore import FileStorage
    from whoosh.filedb.structfile import StructFile

    class FileReads(FileStorage):  # type: ignore[misc]
        def open_file(self, name: str, **kwargs: Any) -> Any:
            return StructFile(io.BufferedReader(_SegmentFile(self._fpath(name), "rb")), name=name, **kwargs)

    return FileReads


class BM25Params(Protocol):
    """What the keyword lane reads of the ranking parameters (``ranking.RankingParams`` has it)."""

    @property
    def bm25_b(self) -> float: ...
    @property
    def bm25_k1(self) -> float: ...


class KeywordHit(NamedTuple):
    """One memory the keyword lane found, with what the gates weigh besides its score."""

    id: str
    score: float
    coverage: float  # share of the query's text idf its words carry (1.0: every query word)
    # Memories of this index that hold the rarest query identifier this one holds verbatim
    # (0: it holds none), and how many memories the index has: rarity is a share of the store.
    code_df: int
    docs: int
    named: bool = False  # the query is nothing but identifiers of this store (a name look-up)
    word_df: int = 0  # memories holding the rarest query word (``text`` term) this one holds

_T = TypeVar("_T")


def folder_files(folder: Path) -> dict[str, tuple[int, int, int]]:
    """name -> (size, mtime_ns, inode) of a keyword folder's files, Whoosh's lock file and the
    postings projection aside."""
    out: dict[str, tuple[int, int, int]] = {}
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            # The postings projection is checked by its own seal and rebuilt, never vouched for
            # by the metadata: writing it must not look like a new generation (``postings``).
            if entry.name.endswith("WRITELOCK") or entry.name.startswith(".") or is_sidecar(entry.name):
                continue
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                out[entry.name] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def folder_listing(folder: Path) -> dict[str, list[int]]:
    """name -> [size, mtime_ns] of a keyword folder's files (what the owner's metadata records)."""
    return {name: [size, mtime] for name, (size, mtime, _ino) in folder_files(folder).items()}


class ForeignGeneration(RuntimeError):
    """The folder holds a generation that neither this object nor the sealed metadata vouches for."""


def _healing(method: Callable[..., _T]) -> Callable[..., _T]:
    """Run ``method``; if reading the files fails, let ``on_fault`` rebuild them and run it again."""

    @functools.wraps(method)
    def run(self: KeywordIndex, *args: Any, **kwargs: Any) -> _T:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:  # any damage surfaces as some exception: struct.error, EmptyIndexError, ...
            full = disk_full(exc, "the keyword index")
            if full is not None:  # not damage: rebuilding would not fit either
                raise full from exc
            if self.on_fault is None or self._healing:
                raise
            self._healing = True
            try:
                self.on_fault(exc)
            finally:
                self._healing = False
            return method(self, *args, **kwargs)

    return run


def _schema() -> Any:
    """What a read uses and no more: each term's documents and frequencies, the field lengths
    and the stored ``id`` (``ArrayScorer``). The term positions of ``text`` (for phrase
    queries, which no read makes) and a stored ``kind`` (never read) took 23% of its bytes:
    9.07 MB against 7.01 MB at 10k memories (bench/index_size.py)."""
    from whoosh.fields import ID, KEYWORD, TEXT, Schema

    return Schema(
        id=ID(stored=True, unique=True),
        tags=KEYWORD(lowercase=True, commas=True, scorable=True),
        text=TEXT(analyzer=keyword_analyzer(), phrase=False),
        code=TEXT(analyzer=code_analyzer(), phrase=False),
    )


def query_identifiers(query: str, pairs: list[tuple[str, str]], doc_frequency: Callable[[str, str], int],
                      analyse: Callable[[list[str]], list[str]]) -> frozenset[str]:
    """The query's ``code`` terms that name an identifier in this store: identifier-shaped
    (``raise_for_status``, ``E11000``); or, in a query that is nothing but names, a word most
    memories that mention it hold inside one (``asyncpg`` of ``asyncpg.exceptions``) in the
    case the query writes it (a capital first letter aside). Prose slips such as ``advice.I``
    make a word a piece of some "identifier" once; it is still mostly written as a word. A word
    is not the name it spells in another case ("the API" is not the ``api`` folder of
    ``app/api/routes.py``), nor, in a sentence, the name it spells in any case."""
    written: dict[str, set[str]] = {}
    for token in re.findall(CODE_PATTERN, query):
        written.setdefault(token.lower(), set()).add(token)
    out = []
    plain = []  # words that name an identifier here, though not shaped like one
    asked = [t for f, t in pairs if f == "code" and not t.startswith(EXACT)]
    for term in asked:
        if code_shaped(term):
            out.append(term)
            continue
        forms = {f for w in written.get(term, {term}) for f in (w, w[:1].lower() + w[1:])}
        in_code = max(doc_frequency("code", EXACT + f) for f in forms)
        words = analyse([term])
        if in_code and words and 2 * in_code >= max(doc_frequency("text", w) for w in words):
            # ``useEffect`` lower-cased is a plain word; as the query writes it, a name.
            (out if any(code_shaped(w) for w in written.get(term, ())) else plain).append(term)
    # In a sentence a plain word is a word: "the iOS app crashes" does not name the ``app``
    # folder, nor "the state lock" ``pnpm-lock.yaml``; identifier-shaped names still count.
    if len(out) + len(plain) == len(asked):
        out += plain  # a look-up by name: ``asyncpg``
    return frozenset(out)


class KeywordIndex:
    def __init__(self, folder: Path, params: BM25Params, *, fresh: bool = False) -> None:
        self.folder = folder
        self.params = params
        self._analyzer = keyword_analyzer()
        # Called with the exception when reading the files fails (a deleted, truncated or garbled
        # segment): the owner rebuilds the projection from the canonical files, then the call
        # is tried once more. None: the exception propagates.
        self.on_fault: Callable[[Exception], None] | None = None
        # Asked about a generation of the folder this object did not commit (another process's,
        # or files a pull dropped in): True if the owner's sealed metadata records exactly these
        # files (name -> [size, mtime_ns]). None: no such generation is trusted.
        self.vouch: Callable[[dict[str, list[int]]], bool] | None = None
        self._healing = False
        # Held in memory only (``to_memory``): the device had no room for the files.
        self.in_memory = False
        self._print: dict[str, tuple[int, int, int]] = {}
        self._print_gen = -1
        self._searcher: Any = None
        # The key the postings projection is sealed with (the owner's projection key; None:
        # this user's, read when first needed).
        self.seal: bytes | None = None
        self._projecting: dict[str, ProjectionBuild] = {}  # segment id -> its projection being written
        self._scorer: ArrayScorer | None = None  # ``close`` reads it: a full disk closes inside _open
        self._open(fresh)
        self._scorer = self._new_scorer()

    def _open(self, fresh: bool) -> None:
        harden()  # before Whoosh reads a byte of the folder

        folder = self.folder
        marker = folder / "VERSION"
        # Read through the file, not a map of it: Whoosh copies every part of a mapped segment
        # it opens into a buffer of its own (BytesIO over the map), and the map's pages count
        # as resident too: 118 MB of RSS for 100k memories against 2 MB, reads no slower.
        if not fresh and folder.is_dir() and marker.is_file() and marker.read_text().strip() == SCHEMA_VERSION:
            try:
                # Our schema, not the pickled one the folder holds (see safepickle).
                self.ix = _file_reads()(str(folder), supports_mmap=False).open_index(schema=_schema())
            except Exception:  # a corrupt projection is rebuilt, never trusted
                fresh = True
        else:
            fresh = True
        if fresh:
            if folder.is_symlink():  # never follow a link out of the store (memstore.store.files.real_dir)
                folder.unlink()
            shutil.rmtree(folder, ignore_errors=True)
            try:
                folder.mkdir(parents=True, exist_ok=True)
                self.ix = _file_reads()(str(folder), supports_mmap=False).create_index(_schema())
                marker.write_text(SCHEMA_VERSION)
            except OSError as exc:
                if not isinstance(exc, DiskFull) and disk_full(exc, "the keyword index") is None:
                    raise
                shutil.rmtree(folder, ignore_errors=True)
                self.to_memory()
                return
        self.in_memory = False
        self.created = fresh
        self._take_print()

    def to_memory(self) -> None:
        """Hold an empty index in memory from now on (the owner refills it): the device has no
        room for its files. Reads go on answering; nothing of it is saved."""
        from whoosh.filedb.filestore import RamStorage

        self.close()
        self.ix = RamStorage().create_index(_schema())
        self.in_memory = True
        self.created = True
        self._take_print()

    def set_bm25(self, params: BM25Params) -> None:
        """Score with ``params``' BM25 constants from now on (the files do not depend on them)."""
        if (params.bm25_b, params.bm25_k1) != (self.params.bm25_b, self.params.bm25_k1):
            self.params = params
            if self._scorer is not None:
                self._scorer.close()
            self._scorer = self._new_scorer()

    def reset(self) -> None:
        """Throw the files away and start an empty index (the owner refills it)."""
        self.close()
        self._open(True)
        self._scorer = self._new_scorer()

    def _new_scorer(self) -> ArrayScorer:
        return ArrayScorer(self.params.bm25_b, self.params.bm25_k1,
                           None if self.in_memory else self.folder, self._seal_key)

    def _seal_key(self) -> bytes:
        if self.seal is None:
            from ..store.userkey import projection_key

            self.seal = projection_key()
        return self.seal

    # -- damage ------------------------------------------------------------------------------------
    def _take_print(self) -> None:
        """Note the files as they are now: Whoosh never changes a file once written, so a later
        difference in size, mtime or inode is damage, not another writer's commit."""
        self._print = {} if self.in_memory else folder_files(self.folder)
        try:
            self._print_gen = self.ix.latest_generation()
        except Exception:
            self._print_gen = -1

    def damaged(self) -> bool:
        """Whether the files were deleted, truncated or rewritten behind this index's back (a few
        stats). Checked before a read: a garbled file answers garbage without an error (and were
        the files mapped, as Whoosh maps them by default, a truncated one would kill the process)."""
        if self.in_memory:
            return False
        if not self.folder.is_dir():
            return True
        missing = False
        for name, sig in self._print.items():
            try:
                st = os.stat(self.folder / name)
            except FileNotFoundError:
                missing = True
                continue
            if (st.st_size, st.st_mtime_ns, st.st_ino) != sig:
                return True
        if missing:
            # Another process may have merged segments away; then it committed a newer generation.
            try:
                newer = self.ix.latest_generation() > self._print_gen
            except Exception:
                return True
            if not newer or not self._vouched():
                return True
            self._take_print()
        return False

    def files(self) -> dict[str, list[int]]:
        """name -> [size, mtime_ns] of the index's files, for the owner's metadata."""
        return {name: [size, mtime] for name, (size, mtime, _ino) in self._print.items()}

    def _weighting(self) -> Any:
        return keyword_weighting(b=self.params.bm25_b, k1=self.params.bm25_k1)

    def _vouched(self) -> bool:
        return self.vouch is not None and self.vouch(folder_listing(self.folder))

    @property
    def searcher(self) -> Any:
        latest = self.ix.latest_generation() if self._searcher is not None else None
        if latest is not None and latest != self._searcher.reader().generation():
            if latest != self._print_gen:
                # Not committed here: read it only if the sealed metadata records it; otherwise
                # it is rebuilt (``on_fault``), for it may be a pull's, steering every search.
                if not self._vouched():
                    raise ForeignGeneration("a generation of the keyword index that nothing here wrote")
                self._take_print()
            try:
                self._searcher = self._reopen(self._searcher)
            except Exception:  # Whoosh's internals moved: open everything afresh
                self.close()
        if self._searcher is None:
            self._searcher = self.ix.searcher(weighting=self._weighting())
        return self._searcher

    def _reopen(self, old: Any) -> Any:
        """A searcher at the index's latest generation that keeps the readers of the segments
        unchanged since ``old`` (same segment, same deleted documents). Opening the largest
        segment's files again was most of a read after a write at 100k memories (~12 ms).
        Whoosh's own reuse (``Searcher.refresh()``) matches segments by id alone, so it kept
        stale deletion lists: a replaced or deleted document stayed visible."""
        from whoosh.reading import MultiReader, SegmentReader
        from whoosh.searching import Searcher

        toc = self.ix._read_toc()
        reusable = {(r.segment().segment_id(), frozenset(r.segment().deleted_docs())): r
                    for r, _ in old.reader().leaf_readers() if r.segment() is not None}
        readers = [reusable.pop((seg.segment_id(), frozenset(seg.deleted_docs())), None)
                   or SegmentReader(self.ix.storage, toc.schema, seg, generation=toc.generation)
                   for seg in toc.segments]
        for r in reusable.values():
            with contextlib.suppress(Exception):
                r.close()
        return Searcher(MultiReader(readers, generation=toc.generation), weighting=self._weighting(),
                        fromindex=self.ix)

    @_healing
    def apply(self, upserts: Iterable[tuple[str, str, list[str], str]], removes: Iterable[str]) -> None:
        """Add or replace (id, kind, tags, text) documents and delete ids, in one commit.

        Always in this process. Whoosh's multi-process writer forks helpers that inherit the
        store's index lock (an flock belongs to the open file, which a fork shares) and wait on
        a queue only their parent feeds: a parent killed mid-build (kill -9, the OOM killer)
        left them under PID 1 holding the lock, and every later read, reindex and daemon
        waited for ever. They bought little: 10k memories in 17 s against 19 s for one process
        on two cores (bench/index_size.py), and one process is what the daemon's background
        build always used (a thread beside others must not fork either)."""
        from whoosh.writing import AsyncWriter

        upserts = list(upserts)
        removes = list(removes)
        if not upserts and not removes:
            return
        big = len(upserts) > 2000
        # Which ids the index holds already, from the open searcher (callers hold the store's
        # index lock, so no other process commits meanwhile). A new id is added; only a
        # present one goes through update_document, whose delete-by-term opened fresh readers
        # of every segment: ~14 ms and 100 MB held for the length of a one-memory commit at 100k.
        if big and self.created:
            present: set[str] = set()
        else:
            reader = self.searcher.reader()
            present = {mid for mid, *_ in upserts if ("id", mid) in reader}
        writer = self.ix.writer(limitmb=128) if big else AsyncWriter(self.ix)
        try:
            for mid in removes:
                writer.delete_by_term("id", mid)
            for mid, _kind, tags, text in upserts:
                doc = {"id": mid, "tags": ",".join(tags), "text": text, "code": text}
                if mid in present:
                    writer.update_document(**doc)
                else:
                    writer.add_document(**doc)
        except BaseException:
            writer.cancel()
            raise
        writer.commit()
        self.created = False
        self._take_print()

    def analyse(self, words: Iterable[str]) -> list[str]:
        out: list[str] = []
        for word in words:
            out += [t.text for t in self._analyzer(word)]
        return list(dict.fromkeys(out))

    def pairs(self, query: str) -> list[tuple[str, str]]:
        """The (field, term) pairs a query is scored on: its tokens whole in ``code``, their
        words in ``text`` and ``tags``."""
        terms = self.analyse(keyword_terms(query))
        return ([("code", t) for t in code_terms(query)]
                + [("text", t) for t in terms] + [("tags", t) for t in terms])

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        """The ``limit`` best (id, BM25F score) for the query's terms over text, code and tags."""
        return [(h.id, h.score) for h in self.hits(query, limit)]

    @_healing
    def hits(self, query: str, limit: int) -> list[KeywordHit]:
        pairs = self.pairs(query)
        if not pairs:
            return []
        searcher = self.searcher
        if self._scorer is not None:
            try:
                identifiers = query_identifiers(query, pairs, searcher.doc_frequency, self.analyse)
                found = self._scorer.search(searcher, pairs, limit, identifiers)
                folded = {t for f, t in pairs if f == "code" and not t.startswith(EXACT)}
                if folded and folded <= identifiers:
                    found = [h._replace(named=True) for h in found]
                return found
            except Exception:  # a Whoosh release whose internals moved: its own search still works
                self._scorer = None
        # Whoosh's search gives no per-term matches: every hit counts as covering the query
        # and none as a verbatim identifier (the gates then behave as before the code lane).
        docs = int(searcher.doc_count_all())
        return [KeywordHit(mid, score, 1.0, 0, docs) for mid, score in whoosh_search(searcher, pairs, limit)]

    @_healing
    def doc_freq(self, word: str) -> int:
        """Memories that hold ``word``: as an identifier in ``code`` when it is one (its
        words alone say little: ``UniqueViolationError`` is not in a store that only says
        "error"), else in ``text``."""
        s = self.searcher
        if code_shaped(word):
            return int(s.doc_frequency("code", word.lower()))
        terms = self.analyse([word])
        if not terms:
            return 0
        return max(s.doc_frequency("text", t) for t in terms)

    @_healing
    def doc_count(self) -> int:
        return int(self.searcher.doc_count())

    # -- the postings projection (memstore.index.postings) -------------------------------------------
    def projection_builds(self) -> list[ProjectionBuild]:
        """The projections this index's large segments lack, each to be written a step at a time
        (``ProjectionBuild.step``, on any thread: each reads the segment through files of its
        own) and put in place by ``projected``; those begun before and not finished come first.
        Call with the owner's lock held (it reads the live searcher)."""
        if self.in_memory or self._scorer is None:
            return []
        leaves = [r for r, _ in self.searcher.reader().leaf_readers() if r.segment() is not None]
        live = {r.segment().segment_id() for r in leaves}
        for name in list(leftovers(self.folder, live)):
            with contextlib.suppress(OSError):
                os.unlink(self.folder / name)
        for segid in [k for k in self._projecting if k not in live]:
            self._projecting.pop(segid).close()
        for reader in leaves:
            segid = reader.segment().segment_id()
            if (segid in self._projecting or reader.doc_count_all() < PROJECT_DOCS
                    or self._scorer.projection(reader) is not None):
                continue
            self._projecting[segid] = ProjectionBuild(self, reader.segment())
        return list(self._projecting.values())

    def projected(self, build: ProjectionBuild) -> int | None:
        """Put a finished projection in place, if its segment is still searched (the owner's
        lock held); returns its size (None: dropped)."""
        self._projecting.pop(build.segment_id, None)
        live = {r.segment().segment_id() for r, _ in self.searcher.reader().leaf_readers() if r.segment() is not None}
        if build.segment_id not in live or self._scorer is None:
            build.close()
            return None
        size = build.finish()
        if size is not None:
            self._scorer.forget_projection(build.segment_id)
        return size

    def close(self) -> None:
        for build in self._projecting.values():
            build.close()
        self._projecting.clear()
        if self._scorer is not None:
            self._scorer.close()
        if self._searcher is not None:
            with contextlib.suppress(Exception):
                self._searcher.close()
            self._searcher = None


def whoosh_search(searcher: Any, pairs: list[tuple[str, str]], limit: int) -> list[tuple[str, float]]:
    from whoosh.query import Or, Term

    hits = searcher.search(Or([Term(f, t) for f, t in pairs]), limit=limit)
    return [(h["id"], float(h.score)) for h in hits]


# Segments of fewer documents get no postings projection: none of their terms spans more than a
# few blocks, and their files come and go with every write (Whoosh merges small segments).
PROJECT_DOCS = 1024
# Terms of more postings than one of Whoosh's blocks holds are projected; one block decodes in
# ~20 us, about what a look-up in the projection costs. At 100k memories: 1,444 of 296,814
# terms, which a query's first read spent 15.3 of its 15.7 ms of decoding on.
PROJECT_POSTINGS = 128


class ProjectionBuild:
    """One segment's postings projection being written (``postings.PostingsWriter``), a step of
    ``STEP`` seconds at a time, from a reader of the segment's files of its own: a step may run
    on a thread beside reads. ``finish`` (through ``KeywordIndex.projected``) puts it in place."""

    STEP = 0.01  # seconds of CPU, then the caller looks for requests

    def __init__(self, index: KeywordIndex, segment: Any) -> None:
        from whoosh.reading import SegmentReader

        self.segment_id: str = segment.segment_id()
        self._reader = SegmentReader(index.ix.storage, _schema(), segment)
        schema = self._reader.schema
        self._fields = {name for name in schema.names() if schema[name].scorable}
        # Every term's key and TermInfo bytes, in key order: only the document frequency of
        # each is read (a TermInfo made of each cost ~8 us, 2.3 s at 100k memories).
        self._items = self._reader._terms._tindex.items()
        try:
            self._writer = PostingsWriter(index.folder, self.segment_id, self._reader.doc_count_all(),
                                          index._seal_key())
        except BaseException:
            self._reader.close()
            raise
        self.terms_seen = 0
        self.cpu = 0.0  # seconds of this build's CPU, all steps
        self.done = False
        self.closed = False
        # Held by a step: ``close`` (its index closed, on a request's thread) waits for the step
        # to end rather than close descriptors the step writes through (numbers another open reuses).
        self._lock = threading.Lock()

    def step(self, seconds: float = STEP) -> bool:
        """Write the next terms' postings for about ``seconds`` of CPU; True once all are
        written (or the build was given up)."""
        with self._lock:
            if self.closed:
                self.done = True
                return True
            return self._step(seconds)

    def _step(self, seconds: float) -> bool:
        import struct
        import time

        from whoosh.codec.whoosh3 import W3TermInfo

        head = struct.Struct("!BfI")  # a TermInfo's flags (1: postings inline), weight, frequency
        terms = self._reader._terms
        c0 = time.thread_time()
        n = 0
        try:
            for kbytes, vbytes in self._items:
                n += 1
                inline, _weight, df = head.unpack_from(vbytes)
                if df > PROJECT_POSTINGS and not inline:
                    field_name, tbytes = terms._keydecoder(kbytes)
                    if field_name in self._fields:
                        info = W3TermInfo.from_bytes(vbytes)
                        got = _info_postings(self._reader, field_name, tbytes, info)
                        if got is not None:
                            self._writer.add(int(info.extent()[0]), *got)
                if n % 256 == 0 and time.thread_time() - c0 >= seconds:
                    return False
            self.done = True
            return True
        finally:
            self.terms_seen += n
            self.cpu += time.thread_time() - c0

    @property
    def postings(self) -> int:
        return self._writer.postings

    def finish(self) -> int | None:
        """Put the file in place; returns its size (None: the build was given up)."""
        with self._lock:
            if self.closed or not self.done:
                return None
            self.closed = True
            try:
                return self._writer.finish()
            finally:
                with contextlib.suppress(Exception):
                    self._reader.close()

    def close(self) -> None:
        """Give up: the temp file is removed."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._writer.close()
            with contextlib.suppress(Exception):
                self._reader.close()


class ArrayScorer:
    """BM25F for an OR of terms, computed with numpy over Whoosh's own postings.

    Whoosh scores every matching posting in Python: ~30 ms per query at 100k memories, the
    largest part of a read. This reads each term's postings block by block as arrays and scores
    them all at once, with Whoosh's formula, statistics and quantised field lengths (and the
    weighting's idf), so the scores are Whoosh's own. The ranking is exact: Whoosh's top-N
    collector prunes sub-queries by an estimated bound and can miss better documents in large
    indexes; this scores every match. Segments never change once written, so their field
    lengths and recently used postings are cached by segment id (postings within a budget).
    """

    POSTINGS_BUDGET = 64 * 1024 * 1024  # bytes of cached postings arrays per index
    POSTINGS_ENTRIES = 100_000  # and entries: absent terms are cached too, at no byte cost

    def __init__(self, b: float, k1: float, folder: Path | None = None,
                 key: Callable[[], bytes] | None = None) -> None:
        self.b = b
        self.k1 = k1
        # The folder whose postings projections a first read takes a term's postings from
        # (None: none; decoded from Whoosh's blocks), and the key they are sealed with.
        self.folder = folder
        self._key = key
        self._projections: dict[str, PostingsFile | None] = {}
        self._lengths: dict[tuple[str, str], np.ndarray] = {}
        self._postings: OrderedDict[tuple[str, str, str], tuple[np.ndarray, np.ndarray] | None] = OrderedDict()
        self._postings_bytes = 0
        self._segments: frozenset[str] = frozenset()
        # (segment id, document number in it) -> memory id, filled as documents are hit: a
        # segment never changes once written, so the id read from its stored fields once
        # (a decompression and an unpickling each, 50 a read) holds for the segment's life.
        self._ids: dict[tuple[str, int], str] = {}

    def search(self, searcher: Any, pairs: list[tuple[str, str]], limit: int,
               identifiers: frozenset[str] = frozenset()) -> list[KeywordHit]:
        """Every match scored; the ``limit`` best, each with the share of the query's ``text``
        idf it covers and the document frequency of the rarest of ``identifiers`` (``code``
        terms) it holds."""
        import numpy as np

        if searcher.doc_count_all() == 0:
            return []
        leaves = list(searcher.reader().leaf_readers())
        self._forget_gone({r.segment().segment_id() for r, _ in leaves})
        stats = {}
        for field_name, text in pairs:
            # The top-level searcher's statistics, as Whoosh's BM25FScorer takes them.
            if field_name in searcher.schema and searcher.schema[field_name].scorable:
                stats[field_name, text] = (searcher.idf(field_name, text), searcher.avg_field_length(field_name) or 1)
        # Each query word's and identifier's document frequency (deleted documents included, as
        # Whoosh's), summed from the postings the scoring reads anyway: no term lookup.
        dfs: dict[tuple[str, str], int] = {}
        held_parts: list[tuple[np.ndarray, int, dict[str, list[tuple[tuple[str, str], np.ndarray]]]]] = []
        b, k1 = self.b, self.k1
        text_idf = sum(stats[p][0] for p in stats if p[0] == "text") or 1.0
        scores_parts: list[np.ndarray] = []
        docs_parts: list[np.ndarray] = []
        cover_parts: list[np.ndarray] = []
        code_parts: list[np.ndarray] = []
        word_parts: list[np.ndarray] = []
        for reader, offset in leaves:
            n = reader.doc_count_all()
            if n == 0:
                continue
            scores = np.zeros(n)
            cover = np.zeros(n)
            held: dict[str, list[tuple[tuple[str, str], np.ndarray]]] = {"text": [], "code": []}
            matched = np.zeros(n, dtype=bool)
            for field_name, text in pairs:
                if (field_name, text) not in stats:
                    continue
                got = self._term_postings(reader, field_name, text)
                if got is None:
                    continue
                ids, weights = got
                idf, avgfl = stats[field_name, text]
                lengths = self._field_lengths(reader, field_name)[ids]
                # Whoosh's bm25(), term by term, in double precision like its Python floats.
                scores[ids] += idf * ((weights * (k1 + 1)) / (weights + k1 * ((1 - b) + b * lengths / avgfl)))
                matched[ids] = True
                if field_name == "text":
                    cover[ids] += idf
                if field_name == "text" or (field_name == "code" and text in identifiers):
                    held[field_name].append(((field_name, text), ids))
                    dfs[field_name, text] = dfs.get((field_name, text), 0) + len(ids)
            deleted = reader.deleted_docs_set
            if deleted:
                matched[np.fromiter(deleted, dtype=np.int64, count=len(deleted))] = False
            docs = np.flatnonzero(matched)
            scores_parts.append(scores[docs])
            docs_parts.append(docs + offset)
            cover_parts.append(cover[docs])
            held_parts.append((docs, n, held))
        if not docs_parts:
            return []
        for docs, n, held in held_parts:  # the frequencies are whole only now
            word_parts.append(_rarest([(dfs[t], ids) for t, ids in held["text"]], n)[docs])
            code_parts.append(_rarest([(dfs[t], ids) for t, ids in held["code"]], n)[docs])
        scores = np.concatenate(scores_parts)
        docs = np.concatenate(docs_parts)
        covers = np.concatenate(cover_parts) / text_idf
        codes = np.concatenate(code_parts)
        words = np.concatenate(word_parts)
        if limit < len(docs):
            keep = np.argpartition(-scores, limit - 1)[:limit]
            # ties at the cut keep the lower document numbers, as Whoosh's collector does
            cut = scores[keep].min()
            keep = np.flatnonzero(scores >= cut)
            scores, docs, covers, codes, words = scores[keep], docs[keep], covers[keep], codes[keep], words[keep]
        order = np.lexsort((docs, -scores))[:limit]
        total = int(searcher.doc_count_all())
        starts = [offset for _, offset in leaves]
        return [KeywordHit(self._id_of(searcher, leaves, starts, int(docs[i])), float(scores[i]),
                           min(float(covers[i]), 1.0), int(codes[i]), total, word_df=int(words[i]))
                for i in order]

    def _id_of(self, searcher: Any, leaves: list[tuple[Any, int]], starts: list[int], docnum: int) -> str:
        """The memory id of the searcher's document ``docnum``, read once per segment."""
        import bisect

        reader, offset = leaves[bisect.bisect_right(starts, docnum) - 1]
        key = (reader.segment().segment_id(), docnum - offset)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = searcher.stored_fields(docnum)["id"]
        return found

    def _forget_gone(self, segments: set[str]) -> None:
        if segments == self._segments:
            return
        self._segments = frozenset(segments)
        for key in [k for k in self._lengths if k[0] not in segments]:
            del self._lengths[key]
        for pkey in [k for k in self._postings if k[0] not in segments]:
            self._drop(pkey)
        self._ids = {k: v for k, v in self._ids.items() if k[0] in segments}
        for segid in [k for k in self._projections if k not in segments]:
            self.forget_projection(segid)

    def projection(self, reader: Any) -> PostingsFile | None:
        """The segment's postings projection, opened and checked once (None: it has none, or
        one that failed its checks, which is removed so that the daemon writes it again)."""
        if self.folder is None or self._key is None:
            return None
        segid = reader.segment().segment_id()
        if segid in self._projections:
            return self._projections[segid]
        got = None
        if reader.doc_count_all() >= PROJECT_DOCS:
            try:
                got = PostingsFile(self.folder, segid, reader.doc_count_all(), self._key())
            except FileNotFoundError:
                pass
            except (BadPostings, OSError, ValueError):
                with contextlib.suppress(OSError):
                    os.unlink(self.folder / sidecar_name(segid))
        self._projections[segid] = got
        return got

    def forget_projection(self, segid: str) -> None:
        """Look for the segment's projection again at the next read (one was written, or its
        segment is gone)."""
        got = self._projections.pop(segid, None)
        if got is not None:
            got.close()

    def close(self) -> None:
        for segid in list(self._projections):
            self.forget_projection(segid)

    def _projected(self, reader: Any, field_name: str, text: str) -> tuple[np.ndarray, np.ndarray] | bool | None:
        """The term's postings (None: the segment lacks it) from the segment's projection, or
        decoded from Whoosh's blocks where the projection does not hold it (a term of one
        block) or fails its checks (then the projection is dropped); False: the segment has
        no projection."""
        from whoosh.reading import TermNotFound

        proj = self.projection(reader)
        if proj is None:
            return False
        tbytes = reader._text_to_bytes(field_name, text)
        try:
            info = reader._terms.term_info(field_name, tbytes)
        except TermNotFound:
            return None
        df = int(info.doc_frequency())
        if df > PROJECT_POSTINGS and not info.is_inlined():
            try:
                got = proj.get(int(info.extent()[0]), df)
            except Exception:  # BadPostings, or any read error: never the read's failure
                got = None
                self._projections[proj.segment_id] = None
                proj.discard()
            if got is not None:
                return got
        return _info_postings(reader, field_name, tbytes, info)

    def _drop(self, key: tuple[str, str, str]) -> None:
        got = self._postings.pop(key)
        if got is not None:
            self._postings_bytes -= got[0].nbytes + got[1].nbytes

    def _field_lengths(self, reader: Any, field_name: str) -> np.ndarray:
        """Every document's quantised length of ``field_name`` in this segment (what
        ``doc_field_length`` returns), from the segment's length column in one read."""
        import numpy as np
        from whoosh.codec.whoosh3 import LENGTHS_COLUMN, _lenfield

        key = (reader.segment().segment_id(), field_name)
        got = self._lengths.get(key)
        if got is None:
            n = reader.doc_count_all()
            raw = np.zeros(n, dtype=np.uint8)
            col = reader._perdoc._cached_reader(_lenfield(field_name), LENGTHS_COLUMN)
            if col is not None:
                count = min(col._count, n)
                raw[:count] = np.frombuffer(col._dbfile.get(col._basepos, count), dtype=np.uint8)
            got = _byte_lengths()[raw]
            self._lengths[key] = got
        return got

    def _term_postings(self, reader: Any, field_name: str, text: str) -> tuple[np.ndarray, np.ndarray] | None:
        key = (reader.segment().segment_id(), field_name, text)
        if key in self._postings:
            self._postings.move_to_end(key)
            return self._postings[key]
        got = self._projected(reader, field_name, text)
        if got is False:
            got = _read_postings(reader, field_name, text)
        self._postings[key] = got
        if got is not None:
            self._postings_bytes += got[0].nbytes + got[1].nbytes
        while len(self._postings) > 1 and (self._postings_bytes > self.POSTINGS_BUDGET
                                           or len(self._postings) > self.POSTINGS_ENTRIES):
            self._drop(next(iter(self._postings)))
        return got


def _rarest(terms: list[tuple[int, np.ndarray]], n: int) -> np.ndarray:
    """Per document of a segment of ``n``, the smallest document frequency among the ``terms``
    ((df, document numbers) each) it holds; 0 where it holds none. The rarest term is written
    last, so each document keeps the smallest: one scatter per term."""
    import numpy as np

    out = np.zeros(n, dtype=np.int64)
    for df, ids in sorted(terms, key=lambda t: -t[0]):
        out[ids] = df
    return out


def _read_postings(reader: Any, field_name: str, text: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(document numbers, weights) of one term in one segment, deleted documents included."""
    from whoosh.reading import TermNotFound

    try:
        matcher = reader._terms.matcher(field_name, reader._text_to_bytes(field_name, text),
                                        reader.schema[field_name].format)
    except TermNotFound:
        return None
    return _decode(matcher)


def _info_postings(reader: Any, field_name: str, tbytes: bytes, info: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``_read_postings`` of a term whose TermInfo is already read (no second term look-up)."""
    terms = reader._terms
    return _decode(terms._codec.postings_reader(terms._postfile, info, reader.schema[field_name].format,
                                                term=(field_name, tbytes)))


def _decode(matcher: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(document numbers, weights) of the postings a term's matcher reads, block by block."""
    import numpy as np

    ids: list[Any] = []
    weights: list[Any] = []
    if hasattr(matcher, "_read_data") and not getattr(matcher, "_byteids", True):
        # Whoosh decodes a block's ids with a Python generator (its delta_decode) and its
        # weights with another: ~0.7 us a posting, 14 ms of CPU a query at 100k memories the
        # first time its words are read (a word like "error" has 56k postings), against 8 ms
        # for the whole read once they are cached. The same block data, decoded by numpy once
        # for the whole term (arrays made block by block cost ~14 us a block of 128, more
        # than unpickling it).
        counts: list[int] = []
        while matcher.is_active():
            if matcher._data is None:
                matcher._read_data()
            deltas, raw = matcher._data[0], matcher._data[1]
            count = matcher._blocklength
            counts.append(count)
            ids.append(deltas)
            # A block stores None (every weight 1.0), one float (all the same) or a tuple.
            weights.append(itertools.repeat(1.0, count) if raw is None
                           else itertools.repeat(raw, count) if isinstance(raw, float) else raw)
            matcher._next_block()
        if not ids:
            return None
        total = sum(counts)
        # Each block's ids are deltas from 0: one running sum over every block, less what the
        # blocks before it summed to (their last ids, added up).
        sums = np.cumsum(np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=total))
        before = sums[np.cumsum(counts) - 1]
        sums -= np.repeat(np.concatenate(([0], before[:-1])), counts)
        return sums, np.fromiter(itertools.chain.from_iterable(weights), dtype=np.float64, count=total)
    while matcher.is_active():
        if matcher._ids is None:
            matcher._read_ids()
        if matcher._weights is None:
            matcher._read_weights()
        ids.append(np.asarray(matcher._ids, dtype=np.int64))
        weights.append(np.asarray(matcher._weights, dtype=np.float64))
        matcher._next_block()
    if not ids:
        return None
    return np.concatenate(ids), np.concatenate(weights)


@functools.cache
def _byte_lengths() -> np.ndarray:
    """Whoosh stores a field length as one byte; this maps each byte back to the length."""
    import numpy as np
    from whoosh.util.numeric import byte_to_length

    return np.array([0.0] + [float(byte_to_length(v)) for v in range(1, 256)])
