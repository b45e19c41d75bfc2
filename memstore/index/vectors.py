"""The vector projection: a faiss inner-product index over unit vectors, id-mapped so single
memories can be added and removed without a rebuild."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

from ..store.files import atomic_file, full_device
from .terms import top_k

NORM_TOLERANCE = 1e-3


def unit_rows(vecs: np.ndarray) -> np.ndarray:
    """Which rows are unit vectors, as every embedding is: anything else is damage."""
    with np.errstate(all="ignore"):
        norms = np.einsum("ij,ij->i", vecs, vecs, dtype=np.float64)
    return np.isfinite(norms) & (np.abs(norms - 1.0) < NORM_TOLERANCE)


class VectorIndex:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self.label_of: dict[str, int] = {}
        self.id_of: dict[int, str] = {}
        self.next_label = 1
        self._rows: list[str] | None = None
        self._capacity = 0  # bytes of storage faiss holds for rows (see _room_for)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def add(self, ids: list[str], vecs: np.ndarray) -> None:
        if not ids:
            return
        self.remove([i for i in ids if i in self.label_of])
        self._room_for(len(ids))
        labels = np.arange(self.next_label, self.next_label + len(ids), dtype=np.int64)
        self.next_label += len(ids)
        self.index.add_with_ids(np.ascontiguousarray(vecs, dtype=np.float32), labels)
        for mid, lab in zip(ids, labels.tolist(), strict=True):
            self.label_of[mid] = lab
            self.id_of[lab] = mid
        # faiss appends the rows in order; a new list, so a caller's copy still shows the old rows.
        self._rows = None if self._rows is None else [*self._rows, *ids]

    def _room_for(self, n: int) -> None:
        """Make room for ``n`` more rows, plus an eighth, in one step. faiss grows its storage
        by doubling, copying every vector: the first write after a load of 100k memories
        held 150 MB twice. Here the copy happens only every eighth of growth, and a load makes
        its room at once (while the process is still small)."""
        codes = faiss.downcast_index(self.index.index).codes
        size = len(self) * self.dim * 4
        if size + n * self.dim * 4 <= self._capacity:
            return
        rows = len(self) + n
        self._capacity = (rows + rows // 8 + 1024) * self.dim * 4
        codes.resize(self._capacity)  # std::vector keeps its capacity when it shrinks again
        codes.resize(size)

    def remove(self, ids: list[str]) -> None:
        labels = [self.label_of.pop(i) for i in ids if i in self.label_of]
        if not labels:
            return
        gone = {self.id_of.pop(lab) for lab in labels}
        self.index.remove_ids(np.array(labels, dtype=np.int64))
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
        if not len(self):
            return np.zeros(0, dtype=np.int64)
        return faiss.vector_to_array(self.index.id_map)

    def search(self, q: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ``k`` rows of highest inner product with ``q``, best first."""
        n = len(self)
        if n == 0 or k <= 0:
            return []
        # One matrix-vector product over faiss's own storage: faiss's search of a single query
        # on an id-mapped flat index costs ~25 ms at 100k rows, this ~3 ms.
        sims = self.matrix() @ np.asarray(q, dtype=np.float32).reshape(-1)
        rows = self.row_ids()
        return [(rows[i], s) for i, s in top_k(sims, k, floor=float("-inf"))]

    # -- persistence ---------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        with atomic_file(path) as tmp:
            try:
                faiss.write_index(self.index, str(tmp))
            except RuntimeError as exc:  # faiss reports a failed write as a C++ exception: its text says why
                full = full_device(str(exc), path.name)
                if full is not None:
                    raise full from exc
                raise

    @classmethod
    def load(cls, path: Path, dim: int, ids_by_label: dict[int, str]) -> VectorIndex:
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as exc:  # faiss reports a damaged file as a C++ exception
            raise ValueError(f"cannot read vector index: {exc}") from exc
        if index.d != dim:
            raise ValueError(f"vector index has dim {index.d}, expected {dim}")
        out = cls(dim)
        out.index = index
        out.id_of = dict(ids_by_label)
        out.label_of = {v: k for k, v in ids_by_label.items()}
        out.next_label = max(ids_by_label, default=0) + 1
        if len(out.row_ids()) != len(out.label_of):
            raise ValueError("vector index and its id map disagree")
        if not unit_rows(out.matrix()).all():  # garbled bytes read as numbers without an error
            raise ValueError("vector index holds rows that are not unit vectors")
        out._room_for(len(out) // 8 + 1024)
        return out
