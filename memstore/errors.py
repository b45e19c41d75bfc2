"""Typed errors. Every failure a user can cause is a MemstoreError with a stable ``code``.

The CLI maps ``exit_code`` to the process exit status (SPEC §3): 2 invalid request,
3 not found, 4 duplicate/conflict, 1 unexpected.
"""

from __future__ import annotations

from typing import Any


class MemstoreError(Exception):
    """Base of every error memstore raises on purpose."""

    code = "error"
    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        hint: str | None = None,
        code: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.hint = hint
        if code is not None:
            self.code = code
        self.details = details or {}

    def to_json(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            err["field"] = self.field
        if self.hint:
            err["hint"] = self.hint
        err.update(self.details)
        return {"ok": False, "error": err}


class InvalidRequest(MemstoreError):
    """The request is malformed or breaks a rule (schema, semantic or integrity gate)."""

    code = "invalid"
    exit_code = 2


class UsageError(InvalidRequest):
    """The command line itself is wrong: an unknown flag, a missing argument, a bad value."""

    code = "usage"


class SchemaError(InvalidRequest):
    code = "schema"


class SemanticError(InvalidRequest):
    code = "semantic"


class SecretError(InvalidRequest):
    code = "secret"


class IntegrityError(InvalidRequest):
    code = "integrity"


class NotFound(MemstoreError):
    code = "not_found"
    exit_code = 3


class AmbiguousId(InvalidRequest):
    code = "ambiguous_id"


class Conflict(MemstoreError):
    code = "conflict"
    exit_code = 4


class DuplicateError(Conflict):
    code = "duplicate"


class StoreError(MemstoreError):
    """The store on disk is missing, unreadable or not initialised."""

    code = "store"
    exit_code = 1


class ReadOnlyStore(InvalidRequest):
    """A write aimed at a store memstore only reads (an attached shared store)."""

    code = "read_only_store"


class ConfigError(StoreError):
    """config.yaml or a MEMSTORE_* variable holds something memstore cannot use: the person's
    input, so an invalid request (2), not an unexpected failure."""

    code = "bad_config"
    exit_code = 2


class NoStore(StoreError):
    code = "no_store"
    exit_code = 3


class UnsafeRepo(StoreError):
    """git refuses the repository as owned by another user ("dubious ownership"): memstore will
    neither read its store nor write anywhere in its place until the user trusts it, as git asks."""

    code = "unsafe_repo"
    exit_code = 2


class GitError(MemstoreError):
    code = "git"
    exit_code = 1


class InvalidFile(MemstoreError):
    """A file in the store does not parse or breaks the format. Reported, never fatal to reads."""

    code = "invalid_file"
    exit_code = 2


class DiskFull(StoreError, OSError):
    """The device holding the store has no room left (ENOSPC, a quota, a file size limit). The
    write is refused whole: the temp file is removed and nothing is acknowledged. Also an
    OSError, so code that treats a failed save of a projection as harmless still does."""

    code = "disk_full"
    exit_code = 1


UNEXPECTED_HINT = "set MEMSTORE_DEBUG=1 for a traceback; please report it"


def error_answer(exc: Exception, hint: str = UNEXPECTED_HINT) -> tuple[dict[str, Any], int]:
    """The answer and exit code a surface gives for a failure: a MemstoreError's own code,
    anything else ``unexpected`` with exit 1 (a bug: its type and message, never a traceback)."""
    if isinstance(exc, MemstoreError):
        return exc.to_json(), exc.exit_code
    return {"ok": False, "error": {"code": "unexpected", "message": f"{type(exc).__name__}: {exc}", "hint": hint}}, 1
