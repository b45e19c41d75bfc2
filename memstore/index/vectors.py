"""The vector projection: a faiss inner-product index over unit vectors, id-mapped so single
memories can be added and removed without a rebuild.

Above ``APPROX_ROWS`` rows, ``search`` asks an approximate index (an inverted file over the same
labels, docs/decisions/approximate-index.md) for candidates and scores them exactly against the
flat rows, which stay: the read pipeline ranks over them as a matrix. The approximate index is a
second projection of the flat one, saved beside it (``vectors.ann``) and built again from it
whenever it is missing, unvouched for, or trained on a store a quarter of today's size."""

from __future__ import annotations

import ctypes
import logging
import math
import mmap
import os
import sys
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np

from ..store.config import env_count
from ..store.files import atomic_file, full_device
from .terms import top_k

NORM_TOLERANCE = 1e-3
# Rows from which ``search`` turns to the approximate index; below it the flat product is both
# exact and fast enough (the measurements in docs/decisions/approximate-index.md).
APPROX_ROWS = 100_000
APPROX_ENV = "MEMSTORE_APPROX_ROWS"  # another threshold (tests set a low one to take this path)
NPROBE = 48  # inverted lists searched per query
CANDIDATES = 2  # candidates asked of the approximate index per result wanted, scored exactly
RETRAIN_GROWTH = 4  # a store this many times the size it was trained on is trained again
LISTS_PER_ROOT = 2  # inverted lists per sqrt(rows)
TRAIN_PER_LIST = 40  # k-means runs on at most this many rows per list (faiss's usual floor is 39)
TRAIN_ITERATIONS = 10


log = logging.getLogger("memstore.index")


def approx_rows_setting(env: dict[str, str] | None = None) -> int:
    """``MEMSTORE_APPROX_ROWS``, or ``APPROX_ROWS``."""
    return env_count(APPROX_ENV, APPROX_ROWS, env)


def unit_rows(vecs: np.ndarray) -> np.ndarray:
    """Which rows are unit vectors, as every embedding is: anything else is damage."""
    with np.errstate(all="ignore"):
        norms = np.einsum("ij,ij->i", vecs, vecs, dtype=np.float64)
    return np.isfinite(norms) & (np.abs(norms - 1.0) < NORM_TOLERANCE)


def ann_lists(n: int) -> int:
    """Inverted lists for ``n`` rows: ``LISTS_PER_ROOT`` sqrt(n), fewer than faiss's usual 4-16
    sqrt(n): k-means costs lists squared, and a query still scans only 2-8 % of the codes from
    100k to 1M rows. At least ``TRAIN_PER_LIST`` rows per list."""
    return max(1, min(int(LISTS_PER_ROOT * math.sqrt(n)), n // TRAIN_PER_LIST))


def train_ann(vecs: np.ndarray, labels: np.ndarray) -> faiss.Index:
    """An inverted file with 8-bit scalar codes over ``vecs`` (unit rows), under ``labels``."""
    n, dim = vecs.shape
    nlist = ann_lists(n)
    ann = faiss.index_factory(dim, f"IVF{nlist},SQ8", faiss.METRIC_INNER_PRODUCT)
    ann.cp.max_points_per_centroid = TRAIN_PER_LIST  # k-means on a sample of the rows, not all of them
    ann.cp.niter = TRAIN_ITERATIONS
    # ann_lists chose the lists; a store just over a low threshold has fewer rows than faiss
    # asks for, and its warning would go to the stderr of whatever process trains.
    ann.cp.min_points_per_centroid = 1
    ann.cp.seed = 1234
    ann.train(vecs)
    ann.add_with_ids(vecs, labels)
    return ann


class VectorIndex:
    def __init__(self, dim: int, approx_rows: int | None = None) -> None:
        self.dim = dim
        self.index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self.label_of: dict[str, int] = {}
        self.id_of: dict[int, str] = {}
        self.next_label = 1
        self._rows: list[str] | None = None
        self._labels: np.ndarray | None = None
        self._capacity = 0  # bytes of storage faiss holds for rows (see _room_for)
        self.approx_rows = approx_rows_setting() if approx_rows is None else approx_rows
        self.ann: faiss.Index | None = None  # the approximate index, once a search over approx_rows built it
        self.ann_trained = 0  # rows the approximate index was trained on

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def add(self, ids: list[str], vecs: np.ndarray) -> None:
        if not ids:
            return
        self.remove([i for i in ids if i in self.label_of])
        self._room_for(len(ids))
        labels = np.arange(self.next_label, self.next_label + len(ids), dtype=np.int64)
        self.next_label += len(ids)
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        self.index.add_with_ids(vecs, labels)
        if self.ann is not None:
            self.ann.add_with_ids(vecs, labels)
        self._labels = None
        for mid, lab in zip(ids, labels.tolist(), strict=True):
            self.label_of[mid] = lab
            self.id_of[lab] = mid
        # faiss appends the rows in order; a new list, so a caller's copy still shows the old rows.
        self._rows = None if self._rows is None else [*self._rows, *ids]

    def _room_for(self, n: int) -> None:
        """Make room for ``n`` more rows, plus an eighth, in one step. faiss grows its storage
        by doubling, copying every vector: the first write after a load of 100k memories
        held 150 MB twice. Here the copy happens only every eighth of growth, and a load makes
        its room at once (while the process is still small). The room is address space only:
        faiss's vector type has no ``reserve``, so its pages are zero-filled and then handed
        back to the kernel (``_unmap_room``), which gives them again when rows are added."""
        codes = faiss.downcast_index(self.index.index).codes
        size = len(self) * self.dim * 4
        if size + n * self.dim * 4 <= self._capacity:
            return
        self._capacity = _room(len(self) + n, self.dim)
        codes.resize(self._capacity)  # std::vector keeps its capacity when it shrinks again
        _unmap_room(codes, size, self._capacity)
        codes.resize(size)

    def remove(self, ids: list[str]) -> None:
        labels = [self.label_of.pop(i) for i in ids if i in self.label_of]
        if not labels:
            return
        gone = {self.id_of.pop(lab) for lab in labels}
        self.index.remove_ids(np.array(labels, dtype=np.int64))
        if self.ann is not None:
            self.ann.remove_ids(np.array(labels, dtype=np.int64))
        self._labels = None
        # faiss closes the gaps keeping the order of the rows that stay.
        self._rows = None if self._rows is None else [mid for mid in self._rows if mid not in gone]

    def matrix(self) -> np.ndarray:
        """All vectors as an (n, dim) array, a zero-copy view of faiss's storage."""
        n = len(self)
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        flat = faiss.downcast_index(self.index.index)
        return faiss.rev_swig_ptr(flat.get_xb(), n * self.dim).reshape(n, self.dim)

    def row_ids(self) -> list[str]:
        """Memory id of each matrix row (faiss keeps rows compact in insertion order)."""
        if self._rows is None:
            labels = faiss.vector_to_array(self.index.id_map) if len(self) else np.zeros(0, dtype=np.int64)
            self._rows = [self.id_of[int(lab)] for lab in labels]
        return self._rows

    def row_labels(self) -> np.ndarray:
        """The faiss label of each matrix row: a label names one vector for good (a memory
        whose text changes gets a new one), so rows can be followed across changes."""
        if self._labels is None:
            self._labels = faiss.vector_to_array(self.index.id_map) if len(self) else np.zeros(0, dtype=np.int64)
        return self._labels

    def search(self, q: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ``k`` rows of highest inner product with ``q``, best first."""
        n = len(self)
        if n == 0 or k <= 0:
            return []
        if self.approximate():
            return self._approx_search(np.asarray(q, dtype=np.float32).reshape(-1), k)
        # One matrix-vector product over faiss's own storage: faiss's search of a single query
        # on an id-mapped flat index costs ~25 ms at 100k rows, this ~3 ms.
        sims = self.matrix() @ np.asarray(q, dtype=np.float32).reshape(-1)
        rows = self.row_ids()
        return [(rows[i], s) for i, s in top_k(sims, k, floor=float("-inf"))]

    def _approx_search(self, q: np.ndarray, k: int) -> list[tuple[str, float]]:
        """Candidates from the approximate index, scored exactly on the flat rows: the scores
        and their order are the flat search's; only a row the inverted lists miss is lost."""
        rows = self.candidates(q, k * CANDIDATES)
        sims = self.matrix()[rows] @ q
        ids = self.row_ids()
        return [(ids[int(rows[i])], s) for i, s in top_k(sims, k, floor=float("-inf"))]

    def candidates(self, q: np.ndarray, k: int) -> np.ndarray:
        """The rows (positions in ``matrix()``, ascending) of the ``k`` nearest to the unit
        vector ``q`` by the approximate index's codes; the caller scores them on the flat rows."""
        ann = self.approx()
        ann.nprobe = min(NPROBE, ann.nlist)
        _, found = ann.search(np.asarray(q, dtype=np.float32).reshape(1, -1), k)
        labels = self.row_labels()
        wanted = found[0][found[0] >= 0]
        if not len(wanted):
            return np.zeros(0, dtype=np.int64)
        rows = np.minimum(np.searchsorted(labels, wanted), len(labels) - 1)  # labels only grow along the rows
        return np.unique(rows[labels[rows] == wanted])

    def approximate(self) -> bool:
        """Whether searches here take the approximate index (the store is at its threshold)."""
        return len(self) >= self.approx_rows

    def approx(self) -> faiss.Index:
        """The approximate index, trained now when there is none or the store has outgrown it."""
        if self.ann is None or len(self) > RETRAIN_GROWTH * self.ann_trained or self.ann.ntotal != len(self):
            self.ann = train_ann(self.matrix(), self.row_labels())
            self.ann_trained = len(self)
        return self.ann

    # -- persistence ---------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        """The flat index to ``path``; over ``approx_rows``, the approximate one to ``ann_path``
        (trained now if no search has yet), so the next process loads it instead of training it;
        below, an old one is removed, so no file outlives the rows it was built on."""
        _write(self.index, path)
        ann = ann_path(path)
        if len(self) >= self.approx_rows:
            _write(self.approx(), ann)
        elif ann.exists() or ann.is_symlink():
            os.unlink(ann)

    @classmethod
    def load(cls, path: Path, dim: int, ids_by_label: dict[int, str], *, with_ann: bool = False,
             approx_rows: int | None = None) -> VectorIndex:
        """The flat index at ``path``: ValueError when it is damaged. ``with_ann``: the caller
        vouches for ``ann_path(path)`` too; it is used when it reads as an inverted file over
        exactly these rows, and is otherwise built again by the first search that needs it."""
        out = cls(dim, approx_rows)
        try:
            out.index, out._capacity = _read_rows(path, dim)
        except RuntimeError as exc:  # faiss reports a damaged file as a C++ exception
            raise ValueError(f"cannot read vector index: {exc}") from exc
        out.id_of = dict(ids_by_label)
        out.label_of = {v: k for k, v in ids_by_label.items()}
        out.next_label = max(ids_by_label, default=0) + 1
        if len(out.row_ids()) != len(out.label_of):
            raise ValueError("vector index and its id map disagree")
        if not unit_rows(out.matrix()).all():  # garbled bytes read as numbers without an error
            raise ValueError("vector index holds rows that are not unit vectors")
        if with_ann:
            out.ann = _read_ann(ann_path(path), out)
            out.ann_trained = len(out) if out.ann is not None else 0
        return out


def _room(rows: int, dim: int) -> int:
    """Bytes of storage for ``rows`` rows and room to grow: an eighth more, and 1,024."""
    return (rows + rows // 8 + 1024) * dim * 4


# Rows copied from the mapped file at a time on a load: the file's pages each slice read are
# dropped from this process before the next, so the rows are resident once (4 MiB: ~2,700 rows).
LOAD_SLICE = 1 << 22


def _read_rows(path: Path, dim: int) -> tuple[faiss.IndexIDMap2, int]:
    """The id-mapped flat index saved at ``path`` in storage of its final size (``_room`` for the
    rows and room for an eighth more and 1,024, as ``_room_for`` gave a load before), and that
    size in bytes. RuntimeError (faiss's) or
    ValueError: the file is not such an index of ``dim``.

    faiss's own read holds the file's rows in storage of their exact size, and making the room
    to grow afterwards allocates the larger storage and fills it with zeros before the rows are
    copied: 335 MB above the process at 100k rows, for 146 MB of rows kept. Here faiss parses
    the file mapped (``IO_FLAG_MMAP_IFC``: the rows stay in the file, checked for size like any
    read), the storage is made first and given back to the kernel (``_unmap_room``), and the rows
    are added into it a slice at a time, each slice's pages of the file dropped once copied: the
    load peaks at the storage's zero fill (189 MB at 100k), under what it keeps at its end."""
    # faiss maps files on Linux and FreeBSD only (impl/mapped_io.cpp) and raises elsewhere;
    # there (no madvise either) the file is read whole, and the load peaks as faiss's own did.
    mapped = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC if _MADVISE is not None else 0)
    if mapped.d != dim:
        raise ValueError(f"vector index has dim {mapped.d}, expected {dim}")
    if not isinstance(mapped, faiss.IndexIDMap2):
        raise ValueError("vector index is not an id-mapped flat index")
    flat = faiss.downcast_index(mapped.index)
    n = int(mapped.ntotal)
    if not isinstance(flat, faiss.IndexFlatIP) or flat.ntotal != n or mapped.id_map.size() != n:
        raise ValueError("vector index is not an id-mapped flat index")
    index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
    capacity = _room(n + n // 8 + 1024, dim)
    codes = faiss.downcast_index(index.index).codes
    codes.resize(capacity)  # the zero fill touches every page once, before any row is held
    _unmap_room(codes, 0, capacity)
    codes.resize(0)  # std::vector keeps its capacity: the adds below never reallocate
    if n:
        rows = faiss.rev_swig_ptr(flat.get_xb(), n * dim).reshape(n, dim)
        labels = faiss.vector_to_array(mapped.id_map)
        step = max(1, LOAD_SLICE // (dim * 4))
        for start in range(0, n, step):
            part = rows[start:start + step]
            index.add_with_ids(part, labels[start:start + step])
            _drop_pages(part.ctypes.data, part.nbytes)
    return index, capacity


def _unmap_room(codes: faiss.MaybeOwnedVectorUInt8, used: int, capacity: int) -> None:
    """Give the whole pages of ``codes``' bytes [used, capacity) back to the kernel: they hold
    only the zeros of the room to grow (43 MB at 100k rows), and an anonymous page given back
    with MADV_DONTNEED reads as zeros again when it is next touched. Where madvise is not there
    (not Linux), the room stays resident as it was."""
    if capacity - used < _PAGE:
        return
    _drop_pages(faiss.rev_swig_ptr(codes.data(), capacity).ctypes.data + used, capacity - used, room=True)


def _drop_pages(address: int, size: int, *, room: bool = False) -> None:
    """MADV_DONTNEED over the whole pages inside [address, address + size): an anonymous page
    reads as zeros when next touched, a page of a mapped file is read from the file again.
    ``room``: the range is also kept from huge pages (MADV_NOHUGEPAGE). The heap may hand the
    storage addresses numpy once advised for huge pages (it does so for its large arrays), and
    the kernel's khugepaged then fills a 2 MiB range around the last row, room included."""
    if _MADVISE is None:
        return
    start = -(-address // _PAGE) * _PAGE
    end = (address + size) // _PAGE * _PAGE
    if end > start:
        _MADVISE(start, end - start, _MADV_DONTNEED)
        if room:
            _MADVISE(start, end - start, _MADV_NOHUGEPAGE)


def _madvise() -> Callable[[int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_MADV_DONTNEED = 4  # Linux's values (asm-generic/mman-common.h)
_MADV_NOHUGEPAGE = 15
_PAGE = mmap.PAGESIZE
_MADVISE = _madvise()


def ann_path(path: Path) -> Path:
    return path.with_name("vectors.ann")


def _write(index: faiss.Index, path: Path) -> None:
    with atomic_file(path) as tmp:
        try:
            faiss.write_index(index, str(tmp))
        except RuntimeError as exc:  # faiss reports a failed write as a C++ exception: its text says why
            full = full_device(str(exc), path.name)
            if full is not None:
                raise full from exc
            raise


def _read_ann(path: Path, flat: VectorIndex) -> faiss.Index | None:
    """The saved approximate index if it is one over ``flat``'s rows; None: build it again. A
    wrong label or code in it can only cost a candidate, as every score comes from the flat rows."""
    try:
        ann = faiss.read_index(str(path))
    except RuntimeError:
        return None
    if not isinstance(ann, faiss.IndexIVFScalarQuantizer) or ann.d != flat.dim or ann.ntotal != len(flat):
        return None
    return ann
