"""The postings projection: a Whoosh segment's postings already decoded, for numpy to read.

Whoosh keeps a term's postings in blocks of 128, each a pickle compressed with zlib; a read
that meets a word for the first time decodes every block of it (~21 us a block: ~8 ms of CPU a
query at 100k memories). A segment never changes once written, so its postings are decoded
once, in the daemon's idle time, into a file beside it: ``<segment id>.postings``, whose name
Whoosh's own clean-up of a merged segment's files removes with the segment. A first read then
costs one ``os.pread`` and ``np.frombuffer`` per term. The file is read, not mapped: mapped
pages count in the daemon's RSS.

Layout (little-endian)::

    header   HEADER bytes: magic, version, segment id, document count, term count, where the
             table and the fences start, the file's size, a MAC over all of it
    body     per term, 8-byte aligned: document numbers (int32), then its weights (none when
             every weight is 1.0; float32 when every weight round-trips exactly; else float64)
    table    one RECORD per term, sorted by its key (the offset of its postings in Whoosh's
             postings file, from its TermInfo): key, start, count, weights' kind, a MAC
    fences   the key of every FENCE-th record: all a reader holds in memory (184 bytes at 100k)

Every MAC is HMAC-SHA256 (cut to 16 bytes) under the user's projection key
(``store.userkey``), over the segment id and the term's key, count and kind with its bytes: a
file this user did not write, or a slice damaged or moved, is not believed. Whatever fails a
check (a short, truncated, foreign or garbled file, a record out of bounds or whose count is
not the term's document frequency) is not used: the read decodes Whoosh's blocks as before,
and the file is removed so that the daemon writes it again.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..store.files import UNTRUSTED_OPEN, alive

if TYPE_CHECKING:
    import numpy as np

MAGIC = b"MSPOSTS\x00"
VERSION = 1
SUFFIX = ".postings"
# magic, version, segment id (ascii, zero-padded), documents, terms, table at, fences at, size
_HEAD = struct.Struct("<8sI36sQQQQQ")
MAC_BYTES = 16
HEADER = _HEAD.size + MAC_BYTES
FENCE = 64  # records per fence: a look-up reads one run of 64 records (2.5 KB)
ONES, FLOAT32, FLOAT64 = 0, 1, 2
_WEIGHT_BYTES = {ONES: 0, FLOAT32: 4, FLOAT64: 8}


def record_dtype() -> np.dtype:
    import numpy as np

    return np.dtype([("key", "<i8"), ("start", "<i8"), ("count", "<u4"), ("kind", "<u4"), ("mac", "V16")])


def sidecar_name(segment_id: str) -> str:
    """``MAIN_<id>.postings``: Whoosh's segment pattern, so its clean-up removes it with the segment."""
    return segment_id + SUFFIX


def is_sidecar(name: str) -> bool:
    return name.endswith(SUFFIX)


def _mac(key: bytes, segment_id: str, term: int, count: int, kind: int, body: bytes | memoryview) -> bytes:
    mac = hmac.new(key, segment_id.encode("ascii") + struct.pack("<qII", term, count, kind), "sha256")
    mac.update(body)
    return mac.digest()[:MAC_BYTES]


def _header_mac(key: bytes, head: bytes) -> bytes:
    return hmac.new(key, b"header" + head, "sha256").digest()[:MAC_BYTES]


class PostingsWriter:
    """Writes one segment's projection: ``add`` each term, then ``finish``. The file is made
    under a dot-name no reader or Whoosh looks at, opened in the folder's own descriptor (so
    neither a linked folder nor a planted link is followed), and renamed into place whole."""

    def __init__(self, folder: Path, segment_id: str, docs: int, key: bytes) -> None:
        self.segment_id = segment_id
        self.docs = docs
        self.key = key
        self.name = sidecar_name(segment_id)
        self.temp = f".{self.name}.{os.getpid()}.tmp"
        self._dir = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temp, dir_fd=self._dir)
            self._fd = os.open(self.temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                               0o600, dir_fd=self._dir)
        except BaseException:
            os.close(self._dir)
            raise
        self._pos = HEADER
        self._records = bytearray()  # 40 bytes a term: ~8 MB at 100k memories, freed at the end
        self.terms = 0
        self.postings = 0
        os.pwrite(self._fd, b"\0" * HEADER, 0)

    def add(self, term: int, ids: np.ndarray, weights: np.ndarray) -> None:
        import numpy as np

        count = len(ids)
        if count == 0:
            return
        if ids.min() < 0 or ids.max() >= self.docs:
            raise ValueError("a document number out of the segment")
        body = [np.ascontiguousarray(ids, dtype="<i4").tobytes()]
        if np.all(weights == 1.0):
            kind = ONES
        elif np.array_equal(weights.astype(np.float32).astype(np.float64), weights):
            kind = FLOAT32
            body.append(np.ascontiguousarray(weights, dtype="<f4").tobytes())
        else:
            kind = FLOAT64
            body.append(np.ascontiguousarray(weights, dtype="<f8").tobytes())
        data = b"".join(body)
        data += b"\0" * (-len(data) % 8)
        os.pwrite(self._fd, data, self._pos)
        mac = _mac(self.key, self.segment_id, term, count, kind, data[:count * (4 + _WEIGHT_BYTES[kind])])
        self._records += struct.pack("<qqII", term, self._pos, count, kind) + mac
        self._pos += len(data)
        self.terms += 1
        self.postings += count

    def finish(self) -> int:
        """Write the table, the fences and the header, and rename the file into place.
        Returns its size."""
        import numpy as np

        try:
            table_at = self._pos
            records = np.frombuffer(self._records, dtype=record_dtype())
            records = records[np.argsort(records["key"], kind="stable")]
            if len(records) > 1 and not (np.diff(records["key"]) > 0).all():
                raise ValueError("two terms with one key")
            self._records = bytearray()
            os.pwrite(self._fd, records.tobytes(), table_at)
            fences_at = table_at + records.nbytes
            fences = np.ascontiguousarray(records["key"][::FENCE], dtype="<i8").tobytes()
            os.pwrite(self._fd, fences, fences_at)
            size = fences_at + len(fences)
            head = _HEAD.pack(MAGIC, VERSION, self.segment_id.encode("ascii"), self.docs, self.terms,
                              table_at, fences_at, size)
            os.pwrite(self._fd, head + _header_mac(self.key, head), 0)
            os.close(self._fd)
            self._fd = -1
            os.replace(self.temp, self.name, src_dir_fd=self._dir, dst_dir_fd=self._dir)
            return size
        finally:
            self.close()

    def close(self) -> None:
        """Give up (or end): the temp file is removed, the descriptors closed."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            with contextlib.suppress(OSError):
                os.unlink(self.temp, dir_fd=self._dir)
        if self._dir >= 0:
            os.close(self._dir)
            self._dir = -1


class BadPostings(ValueError):
    """A projection file, or one of its records, that fails a check: not used."""


class PostingsFile:
    """One segment's projection, opened and checked (``BadPostings`` otherwise). ``get`` reads
    one term's postings; a record that fails its check raises ``BadPostings``."""

    def __init__(self, folder: Path, segment_id: str, docs: int, key: bytes) -> None:
        import numpy as np

        self.path = folder / sidecar_name(segment_id)
        self.segment_id = segment_id
        self.key = key
        try:
            fd = os.open(self.path, UNTRUSTED_OPEN)
        except FileNotFoundError:
            raise
        except OSError as exc:  # a link (ELOOP), or unreadable
            raise BadPostings(f"cannot open {self.path.name}: {exc}") from exc
        self._fd = fd
        try:
            import stat

            st = os.fstat(fd)
            self.inode = st.st_ino
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                raise BadPostings("not a regular file of this user")
            head = os.pread(fd, HEADER, 0)
            if len(head) != HEADER:
                raise BadPostings("short")
            magic, version, segid, ndocs, terms, table_at, fences_at, size = _HEAD.unpack(head[:_HEAD.size])
            if magic != MAGIC or version != VERSION:
                raise BadPostings("not a postings projection of this version")
            if not hmac.compare_digest(head[_HEAD.size:], _header_mac(key, head[:_HEAD.size])):
                raise BadPostings("not sealed by this user")
            if segid.rstrip(b"\0") != segment_id.encode("ascii") or ndocs != docs:
                raise BadPostings("of another segment")
            nfences = -(-terms // FENCE)
            if not (table_at >= HEADER and table_at + terms * record_dtype().itemsize == fences_at
                    and fences_at + nfences * 8 == size == st.st_size):
                raise BadPostings("its sizes do not add up")
            self.terms = terms
            self.docs = docs
            self.table_at = table_at
            raw = os.pread(fd, nfences * 8, fences_at)
            if len(raw) != nfences * 8:
                raise BadPostings("short")
            self.fences = np.frombuffer(raw, dtype="<i8")
        except BaseException:
            os.close(fd)
            raise

    def get(self, term: int, df: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(document numbers, weights as float64) of the term whose Whoosh postings start at
        ``term``, which Whoosh's TermInfo says ``df`` documents hold; None: not in the file."""
        import numpy as np

        dtype = record_dtype()
        run = int(np.searchsorted(self.fences, term, side="right")) - 1
        if run < 0:
            return None
        first = run * FENCE
        n = min(FENCE, self.terms - first)
        raw = os.pread(self._fd, n * dtype.itemsize, self.table_at + first * dtype.itemsize)
        if len(raw) != n * dtype.itemsize:
            raise BadPostings("short")
        records = np.frombuffer(raw, dtype=dtype)
        at = int(np.searchsorted(records["key"], term))
        if at >= n or int(records["key"][at]) != term:
            return None
        rec = records[at]
        start, count, kind = int(rec["start"]), int(rec["count"]), int(rec["kind"])
        if kind not in _WEIGHT_BYTES or count != df:
            raise BadPostings("a record that is not the term's")
        length = count * (4 + _WEIGHT_BYTES[kind])
        if start < HEADER or start + length > self.table_at:
            raise BadPostings("a record out of bounds")
        body = os.pread(self._fd, length, start)
        if len(body) != length:
            raise BadPostings("short")
        if not hmac.compare_digest(bytes(rec["mac"]), _mac(self.key, self.segment_id, term, count, kind, body)):
            raise BadPostings("a damaged record")
        ids = np.frombuffer(body, dtype="<i4", count=count)
        if kind == ONES:
            weights = np.ones(count)
        else:
            weights = np.frombuffer(body, dtype="<f4" if kind == FLOAT32 else "<f8", count=count,
                                    offset=4 * count).astype(np.float64)
        return ids, weights

    def discard(self) -> None:
        """Close it and remove the file, if it is still the one opened: the daemon writes it again."""
        with contextlib.suppress(OSError):
            if os.stat(self.path, follow_symlinks=False).st_ino == self.inode:
                os.unlink(self.path)
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def leftovers(folder: Path, live: set[str]) -> Iterator[str]:
    """Names of projection files in ``folder`` whose segment is not in ``live`` (merged away
    while the file was written), and temp files of processes no longer running."""
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            name = entry.name
            if is_sidecar(name) and name[: -len(SUFFIX)] not in live:
                yield name
            elif name.startswith(".") and name.endswith(".tmp") and SUFFIX in name:
                pid = name.rsplit(".", 2)[-2]
                if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
                    yield name
