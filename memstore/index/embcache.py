"""Embedding cache keyed by (model id, text hash): a rebuild re-embeds only text never seen.

Append-only pair of files per model: ``<model>.keys`` (one hash a line) and ``<model>.f32`` (raw
float32 rows). Appends happen under the index lock; a torn append (crash between the two files)
is healed on load by trusting only the rows both files agree on.

A row is filed under the text's hash hashed again with this user's key
(``memstore.store.userkey``): a cache that arrives in a clone or a pull, made elsewhere with
vectors chosen to steer reads, files its rows under hashes nothing here ever looks up.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import numpy as np

from ..store.files import disk_full, read_projection
from .vectors import unit_rows

_KEY = re.compile(r"[0-9a-f]{32}")
_KEY_LINE = 33  # a key and its newline


def text_key(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


class EmbeddingCache:
    def __init__(self, folder: Path, model_id: str, dim: int, secret: bytes = b"") -> None:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_id)
        self._secret = secret
        self.keys_path = folder / f"{safe}.keys"
        self.vecs_path = folder / f"{safe}.f32"
        self.dim = dim
        self._row: dict[str, int] = {}
        self._vecs: np.ndarray = np.zeros((0, dim), dtype=np.float32)
        self._ino = 0
        self._load()

    def _load(self) -> None:
        try:
            size = os.lstat(self.vecs_path).st_size
            # One 33-byte line per row, appended after the row (a torn append leaves rows without
            # a key, never keys without a row): a longer key file was not written here, or grew
            # since the rows were measured (then it is left for the writer; this load finds none).
            cap = (size // (4 * self.dim) + 1) * _KEY_LINE
            keys = read_projection(self.keys_path, cap, aside=False).decode("ascii", errors="replace").split("\n")
        except (OSError, ValueError):  # NotOurs among them: set aside
            return
        keys = [k for k in keys if k]
        # A garbled line (a lost or extra newline) would shift every later key onto another
        # text's row: trust the rows up to the first line that is not a key.
        good = next((i for i, k in enumerate(keys) if not _KEY.fullmatch(k)), len(keys))
        rows = min(good, size // (4 * self.dim))
        self._vecs = self._map(rows)
        self._row = {k: i for i, k in enumerate(keys[:rows])}

    def _map(self, rows: int) -> np.ndarray:
        """The rows as a read-only memory map: a long-lived process (the daemon) touches only
        the rows it looks up instead of holding the whole cache (150 MB at 100k) in memory."""
        if rows == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._ino = os.stat(self.vecs_path).st_ino
        return np.memmap(self.vecs_path, dtype=np.float32, mode="r", shape=(rows, self.dim))

    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._filed(key) in self._row

    def _filed(self, key: str) -> str:
        """The line a text's key is filed under."""
        if not self._secret:
            return key
        mac = hashlib.blake2b(key.encode("ascii"), key=self._secret, person=b"memstore-emb", digest_size=16)
        return mac.hexdigest()

    def get_many(self, keys: list[str]) -> tuple[np.ndarray, list[int]]:
        """Vectors for the keys found (in order) and the positions of the keys missing. A row
        that is not a unit vector (garbled on disk) counts as missing: it is embedded again."""
        self._check_file()
        if not self._row:  # a clone's first look-up: no keyed hashing of every text for nothing
            return np.zeros((len(keys), self.dim), dtype=np.float32), list(range(len(keys)))
        keys = [self._filed(k) for k in keys]
        found_rows: list[int] = []
        missing: list[int] = []
        out = np.zeros((len(keys), self.dim), dtype=np.float32)
        for pos, key in enumerate(keys):
            row = self._row.get(key)
            if row is None:
                missing.append(pos)
            else:
                found_rows.append(pos)
                out[pos] = self._vecs[row]
        if found_rows:
            bad = [pos for pos, ok in zip(found_rows, unit_rows(out[found_rows]), strict=True) if not ok]
            for pos in bad:
                # Forgotten here; the fresh row put_many appends wins the next time the keys load.
                self._row.pop(keys[pos], None)
            missing = sorted(missing + bad)
        return out, missing

    def _check_file(self) -> None:
        """The rows are memory-mapped: a file truncated or replaced since it was mapped would
        kill the process (SIGBUS) on the next look-up, so map it again first (one stat)."""
        rows = self._vecs.shape[0]
        if not rows:
            return
        try:
            st = os.stat(self.vecs_path)
        except OSError:
            st = None
        if st is None or st.st_size < rows * 4 * self.dim or st.st_ino != self._ino:
            self._row, self._vecs = {}, np.zeros((0, self.dim), dtype=np.float32)
            self._load()

    def put_many(self, keys: list[str], vecs: np.ndarray) -> None:
        keys = [self._filed(k) for k in keys]
        new = [(k, v) for k, v in zip(keys, vecs, strict=True) if k not in self._row]
        if not new:
            return
        self.keys_path.parent.mkdir(parents=True, exist_ok=True)
        block = np.ascontiguousarray(np.stack([v for _, v in new]).astype(np.float32))
        # Rows go first and keys second: a key is only ever trusted when its row is complete.
        try:
            self._truncate_to_consistent()
            with open(self.vecs_path, "ab") as fh:
                fh.write(block.tobytes())
                fh.flush()
                os.fsync(fh.fileno())
            with open(self.keys_path, "a", encoding="ascii") as fh:
                fh.write("".join(k + "\n" for k, _ in new))
        except OSError as exc:  # a torn append is healed at the next load (see the module doc)
            full = disk_full(exc, "the embedding cache")
            if full is not None:
                raise full from exc
            raise
        start = self._vecs.shape[0]
        self._vecs = self._map(start + len(new))
        for i, (k, _) in enumerate(new):
            self._row[k] = start + i

    def _truncate_to_consistent(self) -> None:
        """Another process may have appended since we loaded: reload so row numbers line up."""
        try:
            size = self.vecs_path.stat().st_size
        except OSError:
            size = 0
        if size != self._vecs.shape[0] * 4 * self.dim:
            self._row, self._vecs = {}, np.zeros((0, self.dim), dtype=np.float32)
            self._load()
            rows = self._vecs.shape[0]
            if self.vecs_path.exists() and self.vecs_path.stat().st_size != rows * 4 * self.dim:
                with open(self.vecs_path, "r+b") as fh:
                    fh.truncate(rows * 4 * self.dim)
                keys = self.keys_path.read_text(encoding="ascii", errors="replace").split("\n")[:rows]
                self.keys_path.write_text("".join(k + "\n" for k in keys if k), encoding="ascii")
