"""``.index/`` is memstore's own directory: never a link into somewhere else.

A clone can carry ``.memory/.index`` as a committed symlink (``.index -> ../../somedir``) or
links inside it; following them would let memstore delete and overwrite files it does not
own. A link (or a plain file) where the directory belongs is removed, never followed: the
projections are disposable and are created fresh in a real directory. The link's target is
not touched.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("memstore.index")

# (path, inode) of the .index directories whose entries were checked for links in this process:
# a directory is checked once, and again when it is re-created (a new inode).
_checked: set[tuple[str, int]] = set()


def real_dir(path: Path) -> Path:
    """``path``, with anything there that is not a real directory removed (one lstat per call;
    the directory's own entries are looked at once per directory and process)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if not stat.S_ISDIR(st.st_mode):
        _remove(path, "is not a directory")
        return path
    key = (str(path), st.st_ino)
    if key not in _checked:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_symlink():
                    _remove(Path(entry.path), "is a symlink")
        _checked.add(key)
    return path


def _remove(path: Path, why: str) -> None:
    # os.unlink removes a symlink itself, whatever it points to (it never follows it).
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    log.info("%s %s: removed it; the index is rebuilt in a real directory", path, why)
