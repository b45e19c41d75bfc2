"""The flat vector index's room to grow is address space, not resident memory: at 100k rows it
is ~43 MB that a load used to zero-fill and keep."""

from __future__ import annotations

import ctypes
import mmap
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest

from memstore.index.vectors import VectorIndex

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore(2) and MADV_DONTNEED are Linux's")


def _resident_pages(v: VectorIndex, start: int, end: int) -> int:
    """How many whole pages of the flat index's storage bytes [start, end) are resident."""
    codes = faiss.downcast_index(v.index.index).codes
    base = faiss.rev_swig_ptr(codes.data(), end).ctypes.data
    page = mmap.PAGESIZE
    lo, hi = -(-(base + start) // page) * page, (base + end) // page * page
    if hi <= lo:
        return 0
    vec = (ctypes.c_ubyte * ((hi - lo) // page))()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    assert libc.mincore(lo, hi - lo, vec) == 0, ctypes.get_errno()
    return sum(b & 1 for b in vec)


def _unit(rng: np.random.Generator, n: int, dim: int = 384) -> np.ndarray:
    x = rng.normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_a_loaded_index_keeps_its_room_to_grow_out_of_memory_and_grows_into_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    rows = _unit(rng, 8000)
    built = VectorIndex(384, approx_rows=10**9)
    built.add([f"m{i}" for i in range(len(rows))], rows)
    built.save(tmp_path / "vectors.faiss")
    v = VectorIndex.load(tmp_path / "vectors.faiss", 384, dict(built.id_of), approx_rows=10**9)
    used = len(v) * 384 * 4
    assert v._capacity - used > 2 * 1024 * 1024  # room for an eighth more rows, and 1024
    assert _resident_pages(v, used, v._capacity) == 0
    assert np.array_equal(v.matrix(), rows)
    # Rows added go into the room, read back as added, and the rows before them are unchanged.
    more = _unit(rng, 500)
    capacity = v._capacity
    v.add([f"n{i}" for i in range(len(more))], more)
    assert v._capacity == capacity and np.array_equal(v.matrix(), np.vstack([rows, more]))
    assert v.search(more[3], 1)[0][0] == "n3"
