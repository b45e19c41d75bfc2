"""Files shipped with memstore (``templates/``, ``hooks/``): package data in a wheel, the
repository's top-level folders in an editable install."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ..errors import StoreError


def data_text(folder: str, name: str) -> str:
    packaged = resources.files("memstore") / "_data" / folder / name
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    source = Path(__file__).resolve().parents[2] / folder / name
    if source.is_file():
        return source.read_text(encoding="utf-8")
    raise StoreError(f"no {folder} file {name!r} (looked in memstore/_data/{folder} and {source.parent})",
                     hint="reinstall memstore")
