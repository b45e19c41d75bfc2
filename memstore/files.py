"""Reading and writing canonical files: strict frontmatter, atomic writes, file locks."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import io
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import frontmatter
import yaml

from .errors import DiskFull, InvalidFile

try:  # libyaml ships in pyyaml's wheels; the pure-Python loader is 5x slower
    _Loader: type = yaml.CSafeLoader
    _Dumper: type = yaml.CSafeDumper
except AttributeError:  # pragma: no cover - only on a pyyaml built without libyaml
    _Loader = yaml.SafeLoader
    _Dumper = yaml.SafeDumper

MAX_FRONTMATTER_BYTES = 64 * 1024


def _normalise(value: Any) -> Any:
    """YAML gives dates and datetimes; JSON and our comparisons want ISO strings."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def safe_yaml(text: str, what: str = "YAML", *, first_line: int = 1) -> Any:
    """Parse YAML with the safe loader, refusing anchors/aliases (alias bombs) and size abuse.
    ``first_line``: the file's line number of the text's first line (errors name the line)."""
    if len(text.encode("utf-8", "replace")) > MAX_FRONTMATTER_BYTES:
        raise InvalidFile(f"{what} is larger than {MAX_FRONTMATTER_BYTES} bytes")
    try:
        if "&" in text or "*" in text:
            # Only then pay for an event scan: a safe loader still expands aliases, which lets
            # a few lines of YAML grow into gigabytes once walked.
            for event in yaml.parse(io.StringIO(text), Loader=_Loader):
                if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                    raise InvalidFile(f"{what} uses YAML anchors/aliases, which memstore does not accept")
        return _normalise(yaml.load(text, Loader=_Loader))  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise InvalidFile(f"{what} is not valid YAML{_where(exc, first_line)}: {str(exc).splitlines()[0]}") from exc


def _where(exc: yaml.YAMLError, first_line: int) -> str:
    """' at line N' of the file, where the parser found the problem (a person fixes it there)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return f" at line {mark.line + first_line}" if mark is not None else ""


class _StrictYAMLHandler(frontmatter.YAMLHandler):
    def load(self, fm: str, **kwargs: Any) -> Any:
        return safe_yaml(fm, "frontmatter")


_HANDLER = _StrictYAMLHandler()


def parse_markdown(text: str) -> tuple[dict[str, Any], str]:
    """Split a memory file into (frontmatter dict, body). Non-dict frontmatter is an error."""
    text = text.lstrip("\ufeff").strip()
    if not text.startswith("---"):
        raise InvalidFile("no YAML frontmatter (the file must start with a '---' line)")
    try:
        # Split here rather than via frontmatter.loads: that silently turns a list or scalar
        # frontmatter into {} and a missing closing line into "no metadata".
        fm, content = _HANDLER.split(text)
    except ValueError:
        raise InvalidFile("the frontmatter has no closing '---' line") from None
    meta = safe_yaml(fm, "frontmatter", first_line=1)  # fm starts on the opening '---' line, after the dashes
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


def atomic_write(path: Path, data: str | bytes | Iterable[str], *, exclusive: bool = False) -> None:
    """Write via a temp file in the same folder and rename, so readers never see a partial file.

    ``data`` may be an iterable of text chunks: a large projection is then streamed, never
    held in memory whole. With ``exclusive`` the final name must not exist yet (a hard link
    refuses to clobber).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, str | bytes):
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            else:
                for chunk in data:
                    fh.write(chunk.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o644)
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
