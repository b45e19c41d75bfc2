"""Reading and writing canonical files: strict frontmatter, atomic writes, file locks."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import io
import logging
import math
import os
import re
import shutil
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from ..errors import DiskFull, InvalidFile, InvalidRequest
from . import plainyaml

try:  # libyaml ships in pyyaml's wheels; the pure-Python loader is 5x slower
    _Loader: type = yaml.CSafeLoader
    _Dumper: type = yaml.CSafeDumper
except AttributeError:  # pragma: no cover - only on a pyyaml built without libyaml
    _Loader = yaml.SafeLoader
    _Dumper = yaml.SafeDumper

MAX_FRONTMATTER_BYTES = 64 * 1024
# Nesting and numbers an untrusted file may hold (a memory needs depth 4, links.relations).
# Deeper YAML costs the constructor seconds before it hits Python's recursion limit; a
# 4,300-digit integer raises ValueError from int(); a huge one overflows float().
MAX_YAML_DEPTH = 32
MAX_INT = 2**63
# The default read cap of a memory or event file (config: limits.max_file_bytes).
MAX_FILE_BYTES = 256 * 1024


def _normalise(value: Any, what: str = "YAML") -> Any:
    """YAML gives dates and datetimes; JSON and our comparisons want ISO strings. Numbers
    beyond 64 bits or not finite are refused: every consumer would break on them later."""
    kind = type(value)
    if kind is str or value is None:  # most of a frontmatter: no isinstance chain for it
        return value
    if kind is dict:
        return {k if type(k) is str else str(_normalise(k, what)): _normalise(v, what) for k, v in value.items()}
    if kind is list:
        return [_normalise(v, what) for v in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -MAX_INT <= value < MAX_INT:
            raise InvalidFile(f"{what} holds an integer beyond 64 bits", code="too_large")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidFile(f"{what} holds a number that is not finite ({value})", code="schema")
        return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(_normalise(k, what)): _normalise(v, what) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v, what) for v in value]
    return value


def _nesting(text: str) -> int:
    """How deeply the YAML document nests collections (from the parser's events, no objects built)."""
    depth = deepest = 0
    for event in yaml.parse(io.StringIO(text), Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_YAML_DEPTH:
                break
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return deepest


def safe_yaml(text: str, what: str = "YAML", *, first_line: int = 1) -> Any:
    """Parse YAML with the safe loader, refusing anchors/aliases (alias bombs), size abuse,
    deep nesting and numbers no consumer can hold. ``first_line``: the file's line number of
    the text's first line (errors name the line)."""
    if len(text.encode("utf-8", "replace")) > MAX_FRONTMATTER_BYTES:
        raise InvalidFile(f"{what} is larger than {MAX_FRONTMATTER_BYTES} bytes", code="too_large")
    # What memstore writes itself reads 5-10x faster line by line; the same objects come back,
    # and anything else goes through the checks and the C loader below.
    fast = plainyaml.parse(text, normalise=True)
    if fast is not None:
        return fast
    try:
        # Only a document with many openers can nest deeply; the others skip the event scan.
        openers = text.count("[") + text.count("{") + text.count("- ") + text.count("\n ")
        if openers > MAX_YAML_DEPTH and _nesting(text) > MAX_YAML_DEPTH:
            raise InvalidFile(f"{what} nests deeper than {MAX_YAML_DEPTH} levels", code="too_deep")
        if "&" in text or "*" in text:
            # Only then pay for an event scan: a safe loader still expands aliases, which lets
            # a few lines of YAML grow into gigabytes once walked.
            for event in yaml.parse(io.StringIO(text), Loader=_Loader):
                if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                    raise InvalidFile(f"{what} uses YAML anchors/aliases, which memstore does not accept")
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):
            # libyaml's own nesting limit (newer PyYAML wheels) stops the event scan above before
            # it counts past ours: the same finding, whichever parser saw it first.
            raise InvalidFile(f"{what} nests deeper than {MAX_YAML_DEPTH} levels", code="too_deep") from None
        raise InvalidFile(f"{what} is not valid YAML{_where(exc, first_line)}: {str(exc).splitlines()[0]}") from exc
    except ValueError as exc:  # int() past Python's 4,300-digit limit, a date like 2026-13-45
        if "digits" in str(exc):
            raise InvalidFile(f"{what} holds a number too long to read", code="too_large") from None
        raise InvalidFile(f"{what} holds a value that cannot be read: {str(exc)[:200]}") from None
    except RecursionError:  # block nesting the opener count above did not catch
        raise InvalidFile(f"{what} nests too deeply", code="too_deep") from None
    return _normalise(data, what)


# How every file that may come from someone else is opened: never through a link (O_NOFOLLOW),
# never blocking on a FIFO (O_NONBLOCK); its type and size are then judged by fstat.
UNTRUSTED_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_untrusted(path: Path, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The text of a file from the store, which may come from anyone's clone or pull request.

    Never follows a symlink (O_NOFOLLOW: a link could reach any file of the user's, or loop),
    never reads anything but a regular file (O_NONBLOCK then fstat: a FIFO would block, a
    device never end), and never reads more than ``max_bytes`` + 1 bytes (a 50 MB file is
    refused, not loaded). Raises InvalidFile with a code ``check`` reports."""
    try:
        fd = os.open(path, UNTRUSTED_OPEN)
    except OSError as exc:
        if os.path.islink(path):
            raise InvalidFile("is a symbolic link; memstore never follows links in a store",
                              code="not_regular") from None
        raise InvalidFile(f"cannot read: {exc.strerror}", code="unreadable") from None
    try:
        data = _read_regular(fd, max_bytes)[1]
    finally:
        os.close(fd)
    return _text_within(data, max_bytes)


def _read_regular(fd: int, max_bytes: int) -> tuple[os.stat_result, bytes]:
    """The ``fstat`` of an open store file and its bytes, read only when that says a regular
    file within the cap (InvalidFile otherwise)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise InvalidFile("is not a regular file (a FIFO, device or directory); memstore reads only "
                          "regular files", code="not_regular")
    if st.st_size > max_bytes:
        raise InvalidFile(f"is {st.st_size} bytes, over the {max_bytes}-byte cap on a store file "
                          "(limits.max_file_bytes); not read", code="too_large")
    return st, _read_on(fd, st.st_size, max_bytes)


def _read_on(fd: int, size: int, max_bytes: int) -> bytes:
    """A regular file of ``size`` bytes when stat-ed, in one read: a regular file's read is short
    only at its end, and one that grew since the stat is read on, to the cap."""
    data = os.read(fd, size + 1)
    if len(data) > size:
        data += _read_capped(fd, max_bytes - len(data))
    return data


def _text_within(data: bytes, max_bytes: int) -> str:
    if len(data) > max_bytes:
        raise InvalidFile(f"is over the {max_bytes}-byte cap on a store file (limits.max_file_bytes); not read",
                          code="too_large")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidFile(f"is not UTF-8 text ({exc.reason} at byte {exc.start})", code="unreadable") from None


def read_walked_bytes(path: str, st: os.stat_result, max_bytes: int = MAX_FILE_BYTES) -> bytes | str:
    """A file a walk has just lstat-ed (``st``), its type and size cap judged from ``st`` before
    anything is opened: its bytes, or its text when it was not a regular file within the cap at
    the lstat (``read_untrusted`` read it, or raised). Replaced after the lstat: the open still
    refuses a link (O_NOFOLLOW), a FIFO answers nothing (O_NONBLOCK), a directory fails to
    read, and no more than ``max_bytes`` + 1 bytes are ever read."""
    if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
        return read_untrusted(Path(path), max_bytes)
    try:
        fd = os.open(path, UNTRUSTED_OPEN)
    except OSError:
        return read_untrusted(Path(path), max_bytes)
    try:
        return _read_on(fd, st.st_size, max_bytes)
    finally:
        os.close(fd)


# What a store's walk found of a file: the folder's entry (its type from the directory, no
# syscall) or, for a path that is not in a real folder, its lstat.
Found = os.DirEntry[str] | os.stat_result


def found_stat(found: Found) -> os.stat_result | None:
    """The lstat of what a walk found (None: gone since)."""
    if isinstance(found, os.stat_result):
        return found
    try:
        return found.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None


def read_found(path: str, found: Found, max_bytes: int = MAX_FILE_BYTES) -> tuple[os.stat_result, bytes | str]:
    """A walked file's ``fstat`` and bytes, for a file the catalog has no record of (a clone's
    first load reads every file): the folder's entry says whether it is a regular file before
    anything is opened (the directory's own record of its type, as an ``lstat`` would say it,
    without one), and the ``fstat`` of the descriptor opened ``O_NOFOLLOW | O_NONBLOCK`` judges
    its type and size before a byte is read; at 100k files the walk's ``lstat`` of every file
    cost as much as reading them all. Anything else goes through ``read_walked_bytes`` with its
    lstat, which says what it is (InvalidFile); FileNotFoundError: gone since the walk."""
    if isinstance(found, os.DirEntry) and found.is_file(follow_symlinks=False):
        try:
            fd = os.open(path, UNTRUSTED_OPEN)
        except FileNotFoundError:
            raise
        except OSError:  # replaced by a link since the walk (ELOOP): said as read_untrusted says it
            fd = -1
        if fd >= 0:
            try:
                return _read_regular(fd, max_bytes)
            finally:
                os.close(fd)
    st = found_stat(found)
    if st is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    return st, read_walked_bytes(path, st, max_bytes)


def walked_text(data: bytes, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The text of bytes ``read_walked_bytes`` read: over the cap, or not UTF-8, is InvalidFile."""
    return _text_within(data, max_bytes)


# What ``scan_memory`` accepts: a memory file as memstore writes it, in one match. The first line
# after the opening dashes is the id, and the line after it a key (not a continuation of the id);
# every other line of the frontmatter is empty, indented, or at column 0 a plain lower-case key
# other than ``id`` and ``tags`` (so no other line can be a key YAML reads as ``id`` or ``tags``:
# a quoted or explicit key, a flow mapping, an anchor or merge key, a tab, a comment all fail); at
# most one ``tags:`` line, one flow list of plain words; the closing line exactly ``---``.
_SCAN_LINES = rb"(?:(?!id:|tags:)[a-z_][a-z0-9_]*:(?: [^\n]*)?\n| [^\n]*\n|\n)*"
_SCAN = re.compile(rb"---\nid: ([0-9a-hjkmnp-tv-z]{26})\n(?=[a-z_-])" + _SCAN_LINES
                   + rb"(?:tags: \[([A-Za-z][A-Za-z0-9_-]*(?:, [A-Za-z][A-Za-z0-9_-]*)*)?\]\n" + _SCAN_LINES
                   + rb")?---\n")
# Plain words YAML 1.1 reads as something else than the word (a bool or null): a tag list
# holding one is parsed, never guessed.
_SCAN_NOT_WORDS = frozenset({"yes", "no", "true", "false", "on", "off", "null"})


def scan_memory(data: bytes) -> tuple[str, list[str], int] | None:
    """(id, tags lower-cased, where the body starts) of a memory file's raw bytes, by a strict
    scan that parses nothing; None for anything it does not know for certain (the file is then
    parsed): not ASCII (so no BOM, no other encoding, no character lower-casing could change), a
    carriage return, the id not the first line, any other line of the frontmatter at column 0
    that is not a plain ``key:`` (a second ``id``, a quoted key, a flow mapping, ``? id``, an
    anchor, a comment), the closing line not exactly ``---``, a ``tags:`` that is not one flow
    list of plain words on its line. What it accepts, ``parse_markdown`` reads with the same id
    and tags and the body from the same byte on (``tests/test_partial_load.py`` holds the two to
    each other); a file it accepts may still be invalid, which only the parse says."""
    got = _SCAN.match(data)
    if got is None or not data.isascii() or b"\r" in data:
        return None
    listed = got.group(2)
    if listed is None:
        return got.group(1).decode("ascii"), [], got.end()
    tags = listed.decode("ascii").lower().split(", ")
    if not _SCAN_NOT_WORDS.isdisjoint(tags):
        return None
    return got.group(1).decode("ascii"), tags, got.end()


# The cap on a file a person names for ``import`` (a few MB per 10,000 memories); a request
# file's cap is the wire's (``surfaces.wire.MAX_REQUEST_BYTES``).
MAX_IMPORT_BYTES = 64 * 1024 * 1024
# Pseudo-filesystems whose "regular" files are not data: /proc/self/mem fails on read,
# /proc/kcore claims terabytes, /sys files change on every read.
_PSEUDO_ROOTS = ("/proc", "/sys", "/dev")


def read_given(path: Path, *, max_bytes: int, what: str, truncate: bool = False) -> bytes:
    """The bytes of a file the user named (``what``: how the error names it, e.g. ``--json
    FILE``). Only a regular file outside /proc, /sys and /dev is read, never through a symlink
    (what it reads may end up in a memory or an episode, which git carries: a link planted in a
    clone could point at ~/.ssh), opened without blocking (a FIFO would wait for a writer
    forever), and at most ``max_bytes`` of it: /dev/zero, a FIFO, a link or a 100 MB file is a
    typed ``bad_input`` / ``too_large``, never a hang or a MemoryError. ``truncate``: the first
    ``max_bytes`` of a longer file instead of ``too_large`` (a log keeps what fits)."""
    real = os.path.realpath(path)
    if any(real == root or real.startswith(root + "/") for root in _PSEUDO_ROOTS):
        raise InvalidRequest(f"{what}: {path} is a system pseudo-file ({real}); memstore reads only regular "
                             "files", code="bad_input")
    try:
        fd = os.open(path, UNTRUSTED_OPEN)
    except OSError as exc:
        if os.path.islink(path):
            raise InvalidRequest(f"{what}: {path} is a symbolic link (to {real}); memstore reads no link a "
                                 "person names: give the file itself", code="bad_input") from None
        raise InvalidRequest(f"{what}: cannot read {path}: {exc.strerror}", code="bad_input") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
                "a device or socket"
            raise InvalidRequest(f"{what}: {path} is {kind}, not a regular file; memstore reads only regular files",
                                 code="bad_input")
        if st.st_size > max_bytes and not truncate:
            raise InvalidRequest(f"{what}: {path} is {st.st_size} bytes, over the {max_bytes}-byte cap; not read",
                                 code="too_large")
        data = _read_capped(fd, max_bytes)
        if truncate:
            return data[:max_bytes]
    except OSError as exc:
        raise InvalidRequest(f"{what}: cannot read {path}: {exc.strerror}", code="bad_input") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise InvalidRequest(f"{what}: {path} is over the {max_bytes}-byte cap; not read", code="too_large")
    return data


def read_stream(fd: int, *, max_bytes: int, what: str) -> bytes:
    """At most ``max_bytes`` from an open descriptor (stdin): more is ``too_large``, so
    ``< /dev/zero`` ends at the cap instead of in a MemoryError."""
    try:
        data = _read_capped(fd, max_bytes)
    except OSError as exc:
        raise InvalidRequest(f"{what}: cannot read: {exc.strerror}", code="bad_input") from None
    if len(data) > max_bytes:
        raise InvalidRequest(f"{what} is over the {max_bytes}-byte cap; not read", code="too_large")
    return data


def _read_capped(fd: int, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    left = max_bytes + 1  # one byte past the cap tells "exactly the cap" from "more"
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def given_text(data: bytes, what: str, *, bom: bool = False) -> str:
    """``data`` as UTF-8 text, or ``bad_input`` naming the first byte that is not."""
    try:
        return data.decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                             code="bad_input") from None


# C0 controls but tab, newline and carriage return; DEL; C1 controls; lone surrogates (bytes that
# were not UTF-8). What a write refuses (``bad_chars``) and ``check`` reports in a file written by
# hand: a memory is a Markdown file people read in diffs and terminals, where an escape sequence
# or a NUL hides text or breaks tools, and nothing a memory says needs one.
BAD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def bad_char(values: dict[str, str]) -> tuple[str, str] | None:
    """(field, what is wrong) for the first field holding a control character, or None."""
    for field_name, text in values.items():
        m = BAD_CHARS.search(text or "")
        if m:
            char = m.group(0)
            what = "an undecodable byte (not UTF-8)" if "\ud800" <= char <= "\udfff" else \
                f"control character U+{ord(char):04X}"
            return field_name, f"{field_name} holds {what} at position {m.start()}"
    return None


def _where(exc: yaml.YAMLError, first_line: int) -> str:
    """' at line N' of the file, where the parser found the problem (a person fixes it there)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return f" at line {mark.line + first_line}" if mark is not None else ""


# A line of three or more dashes opens and closes the frontmatter (python-frontmatter's rule).
_FM_BOUNDARY = re.compile(r"^-{3,}\s*$", re.MULTILINE)


def parse_markdown(text: str) -> tuple[dict[str, Any], str]:
    """Split a memory file into (frontmatter dict, body). Non-dict frontmatter is an error."""
    text = text.lstrip("\ufeff").strip()
    if not text.startswith("---"):
        raise InvalidFile("no YAML frontmatter (the file must start with a '---' line)")
    parts = _FM_BOUNDARY.split(text, 2)
    if len(parts) != 3:
        raise InvalidFile("the frontmatter has no closing '---' line")
    _, fm, content = parts
    meta = safe_yaml(fm, "frontmatter", first_line=1)  # fm starts on the opening line, after its dashes
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise InvalidFile(f"frontmatter must be a YAML mapping, not a {type(meta).__name__}")
    return dict(meta), content.strip()


def dump_yaml(data: dict[str, Any]) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=None, width=100)


def dump_markdown(meta: dict[str, Any], body: str) -> str:
    return f"---\n{dump_yaml(meta)}---\n{body.strip()}\n"


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _temp_beside(path: Path) -> tuple[int, str]:
    """A new temp file next to ``path``, created 0666 less the umask (mkstemp makes 0600, and a
    chmod to a fixed mode afterwards would override a private umask such as 077)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temp name beside {path}")


def private_dir(path: Path) -> None:
    """``path`` as a directory only its owner can enter: created 0700, or one of ours that is
    open to others closed to 0700 (a symlink or someone else's directory is left alone)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.chmod(path, 0o700)


def atomic_write(path: Path, data: str | bytes | Iterable[str], *, exclusive: bool = False,
                 durable: bool = True) -> None:
    """Write via a temp file in the same folder and rename, so readers never see a partial file.
    The file gets the mode any new file gets (0666 less the umask).

    ``data`` may be an iterable of text chunks: a large projection is then streamed, never
    held in memory whole. With ``exclusive`` the final name must not exist yet (a hard link
    refuses to clobber). ``durable=False`` skips the fsync, for a scratch file whose loss in a
    power cut costs nothing (readers still never see it half written).
    """
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, str | bytes):
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            else:
                for chunk in data:
                    fh.write(chunk.encode("utf-8"))
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        if exclusive:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        _raise_full(exc, path)
        raise


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """A temp path beside ``path`` for a writer that wants a file name (faiss streams its index
    to one; serialising it in memory first cost two copies of the vectors, 300 MB at 100k):
    synced and renamed over ``path`` when the block succeeds, removed when it fails."""
    fd, tmp = _temp_beside(path)
    os.close(fd)
    try:
        yield Path(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        _raise_full(exc, path)
        raise


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _raise_full(exc: BaseException, path: Path) -> None:
    full = disk_full(exc, path.name)
    if full is not None:
        raise full from exc


def disk_full(exc: BaseException, what: str) -> DiskFull | None:
    """A full device is the user's to fix, not a bug: the error that says so, or None when
    ``exc`` is something else."""
    if isinstance(exc, OSError) and not isinstance(exc, DiskFull) and exc.errno in _FULL:
        return DiskFull(f"no space left on the device for {what} ({os.strerror(exc.errno)}); it was not written",
                        hint="free some space and run the command again")
    return None


def full_device(said: str, what: str) -> DiskFull | None:
    """``disk_full`` for a failure known only by its text (a C++ library's, a tool's): the
    C library's words for a full device or quota in it."""
    if any(os.strerror(code).lower() in said.lower() for code in _FULL):
        return DiskFull(f"no space left on the device for {what}; it was not written",
                        hint="free some space and run the command again")
    return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (one of another user counts): a leftover temp file or
    folder named by its pid is removed only once its writer is gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def file_lock(path: Path, shared: bool = False) -> Iterator[None]:
    """An advisory flock, released when the process dies, so a crash never leaves it held."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

# -- the index directory ----------------------------------------------------------------------
# ``.index/`` is memstore's own directory: never a link into somewhere else, and nothing in it is
# anything memstore did not write there.
#
# A clone can carry ``.memory/.index`` as a committed symlink (``.index -> ../../somedir``) or
# links inside it; following them would let memstore delete and overwrite files it does not
# own. A link (or a plain file) where the directory belongs is removed, never followed: the
# projections are disposable and are created fresh in a real directory. The link's target is
# not touched. In the same way a clone can carry (``git add -f``) a directory, a FIFO or a huge
# file where memstore keeps one of its files: each is set aside (removed, never followed) and
# the projection it stood for is rebuilt from the store's files.

_index_log = logging.getLogger("memstore.index")

# The folders memstore keeps in ``.index/`` (the keyword index, a build beside it, the embedding
# cache); everything else it writes there is a regular file.
INDEX_FOLDERS = ("keyword", "embeddings")
INDEX_FOLDER_PREFIXES = ("keyword.next-", "keyword.old-")
WHOOSH_TEMP = "MAIN.tmp"  # in a keyword folder: the temporary storage of the index MAIN's writer

# (path, inode) of the .index directories whose entries were checked in this process: a
# directory is checked once, and again when it is re-created (a new inode).
_checked: set[tuple[str, int]] = set()


class NotOurs(ValueError):
    """A file in ``.index/`` that memstore did not write: the wrong type, over its cap, or not
    sealed by this user. It has been set aside; what it stood for is rebuilt from the files."""


def real_dir(path: Path) -> Path:
    """``path``, with anything there that is not a real directory removed, and in it anything
    of a type memstore never writes there set aside (one lstat per call; the directory's own
    entries are looked at once per directory and process)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if not stat.S_ISDIR(st.st_mode):
        _remove_link(path, "is not a directory")
        return path
    key = (str(path), st.st_ino)
    if key not in _checked:
        _sort_out(path, top=True)
        _checked.add(key)
    return path


def clear_way(path: Path) -> Path:
    """``path`` with anything but a regular file there set aside: for a file memstore is about
    to write or lock in ``.index/``, where a pull may have put a directory or a FIFO since this
    process looked (``os.replace`` onto a directory fails; ``open`` of a FIFO waits)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if not stat.S_ISREG(st.st_mode):
        set_aside(path, "is not a regular file")
    return path


def recheck_dir(path: Path) -> Path:
    """``real_dir`` looking at the directory's entries again: for a process that lives across a
    pull (the daemon), when a projection is found damaged or rebuilt on request."""
    with contextlib.suppress(OSError):
        _checked.discard((str(path), os.lstat(path).st_ino))
    return real_dir(path)


def _sort_out(folder: Path, *, top: bool, temp: bool = False) -> None:
    """Set aside each entry of ``folder`` that memstore would not have written: a symlink, a
    FIFO, socket or device, a directory where a file belongs or a file where a folder belongs
    (in ``.index/`` itself; inside its folders every entry is a regular file, but for the one
    folder Whoosh's writer keeps its sorting runs in while it builds: ``temp``)."""
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        found = list(entries)
    for entry in found:
        path = Path(entry.path)
        if entry.is_symlink():
            _remove_link(path, "is a symlink")
            continue
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except FileNotFoundError:
            continue
        folder_name = top and (entry.name in INDEX_FOLDERS or entry.name.startswith(INDEX_FOLDER_PREFIXES))
        if stat.S_ISDIR(mode) and folder_name:
            _sort_out(path, top=False)
        elif stat.S_ISDIR(mode) and not top and not temp and entry.name == WHOOSH_TEMP:
            # A build running in this or another process writes there: removing it failed the
            # build at its commit (and the daemon then rebuilt in a read, under the lock). Its
            # entries are sorted as any folder's; Whoosh's writer removes it when it ends.
            _sort_out(path, top=False, temp=True)
        elif stat.S_ISDIR(mode):
            set_aside(path, "is a directory where memstore keeps a file or nothing")
        elif not stat.S_ISREG(mode):
            set_aside(path, "is not a regular file (a FIFO, socket or device)")
        elif folder_name:
            set_aside(path, "is a file where memstore keeps a folder")


def set_aside(path: Path, why: str) -> None:
    """Take ``path`` out of ``.index/`` without following it: the projection it stood for is
    rebuilt. A folder goes with what it holds (``rmtree`` never follows a link inside it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    try:
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        return
    _index_log.info("%s %s: set it aside; it is rebuilt from the store's files", path, why)


def read_projection(path: Path, max_bytes: int, *, tail: Any = None, aside: bool = True) -> bytes:
    """The bytes of a file memstore wrote in ``.index/``, read as untrusted: never through a
    link, only a regular file, at most ``max_bytes`` (``fstat`` on the open descriptor, before
    reading), and, when ``tail`` is given, only if ``tail(last 128 bytes)`` says the file ends as
    memstore ends it (a sealed file's seal), so a large file of junk is never read whole.
    Anything else is set aside (unless not ``aside``: a file another process may be growing)
    and raised as ``NotOurs``; a missing file is FileNotFoundError."""
    try:
        fd = os.open(path, UNTRUSTED_OPEN)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EOPNOTSUPP):
            raise
        set_aside(path, "is a symlink, socket or device")
        raise NotOurs(f"{path.name} is a symlink, socket or device") from None
    try:
        st = os.fstat(fd)
        why = None
        if not stat.S_ISREG(st.st_mode):
            why = "is not a regular file"
        elif st.st_size > max_bytes:
            why = f"is {st.st_size} bytes, over the {max_bytes} memstore would write"
        elif tail is not None and not tail(os.pread(fd, 128, max(0, st.st_size - 128))):
            why = "does not end as memstore ends it (no seal)"
        if why is not None:
            if aside or not stat.S_ISREG(st.st_mode):
                set_aside(path, why)
            raise NotOurs(f"{path.name} {why}")
        data = _read_capped(fd, max_bytes)
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew between fstat and read
        raise NotOurs(f"{path.name} is over the {max_bytes} bytes memstore would write")
    return data


def _remove_link(path: Path, why: str) -> None:
    # os.unlink removes a symlink itself, whatever it points to (it never follows it).
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    _index_log.info("%s %s: removed it; the index is rebuilt in a real directory", path, why)
