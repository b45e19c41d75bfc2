"""memstore: long-term memory for AI coding agents that lives in git beside the code.

The library API mirrors the CLI: open a workspace, then ``write``, ``update``, ``read``.

    >>> ws = memstore.open_workspace()
    >>> memstore.read(ws, {"query": "migration fails: column already exists"})
"""

from __future__ import annotations

__version__ = "0.1.0"

# `import memstore` runs on every CLI call, before the daemon is asked: nothing here may import
# more than the interpreter already has (not even typing); error classes load on first use.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .errors import (
        AmbiguousId,
        Conflict,
        DuplicateError,
        GitError,
        IntegrityError,
        InvalidFile,
        InvalidRequest,
        MemstoreError,
        NoStore,
        NotFound,
        SchemaError,
        SecretError,
        SemanticError,
        StoreError,
    )
    from .read.answers import ReadAnswer
    from .store.workspace import Workspace
    from .verbs.answers import ListAnswer, ShowAnswer, UpdateAnswer, WriteAnswer

_ERRORS = frozenset({
    "AmbiguousId", "Conflict", "DuplicateError", "GitError", "IntegrityError", "InvalidFile", "InvalidRequest",
    "MemstoreError", "NoStore", "NotFound", "SchemaError", "SecretError", "SemanticError", "StoreError",
})


def __getattr__(name: str) -> object:
    if name in _ERRORS:
        from . import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'memstore' has no attribute {name!r}")


__all__ = [
    "AmbiguousId",
    "Conflict",
    "DuplicateError",
    "GitError",
    "IntegrityError",
    "InvalidFile",
    "InvalidRequest",
    "MemstoreError",
    "NoStore",
    "NotFound",
    "SchemaError",
    "SecretError",
    "SemanticError",
    "StoreError",
    "__version__",
    "list_memories",
    "open_workspace",
    "read",
    "show",
    "update",
    "write",
]


# The package's subpackage ``memstore.read`` shares its name with the function ``read``: Python
# binds a submodule to its parent's attribute on first import, which replaced the function after
# the first call (``'module' object is not callable``). The package keeps the public names for
# the functions below; the submodules stay reachable as ``import memstore.read.retrieve`` does
# (from sys.modules), never as attributes that shadow a public function.
_sys = __import__("sys")


class _Package(type(_sys)):  # type: ignore[misc]
    def __setattr__(self, name: str, value: object) -> None:
        if name in _FUNCTIONS and isinstance(value, type(_sys)):
            return
        super().__setattr__(name, value)


_FUNCTIONS = frozenset({"list_memories", "open_workspace", "read", "show", "update", "write"})


# Thin wrappers keep `import memstore` cheap: the store, index and model load on first use.
def open_workspace(*args: Any, **kwargs: Any) -> Workspace:
    from .store.workspace import open_workspace as _open

    return _open(*args, **kwargs)


def write(ws: Workspace, request: dict[str, Any], **kwargs: Any) -> WriteAnswer:
    from .verbs.api import write as _write

    return _write(ws, request, **kwargs)


def update(ws: Workspace, request: dict[str, Any], **kwargs: Any) -> UpdateAnswer:
    from .verbs.api import update as _update

    return _update(ws, request, **kwargs)


def read(ws: Workspace, request: dict[str, Any]) -> ReadAnswer:
    from .read.retrieve import read as _read

    return _read(ws, request)


def show(ws: Workspace, memory_id: str) -> ShowAnswer:
    from .verbs.api import show as _show

    return _show(ws, memory_id)


def list_memories(ws: Workspace, **kwargs: Any) -> ListAnswer:
    from .verbs.api import list_memories as _list

    return _list(ws, **kwargs)


_sys.modules[__name__].__class__ = _Package
