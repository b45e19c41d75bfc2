"""The hermetic settings of conftest's ``hermetic`` fixture, for a module-scoped fixture: pytest
sets that one up before the per-test one, so it must keep git and memstore off the real home
directory by itself. For test files whose tests only read what the fixture built once."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memstore import gitops


@contextmanager
def hermetic_env(base: Path) -> Iterator[dict[str, str]]:
    """A private HOME (and global store) under ``base``, an empty git config and fixed git
    identities, as conftest's ``hermetic`` gives each test; yields the environment."""
    home = base / "home"
    home.mkdir()
    (base / "gitconfig").write_text("")
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith(("GIT_", "MEMSTORE_")) or name in ("VISUAL", "EDITOR"):
                mp.delenv(name, raising=False)
        for name, value in {"HOME": str(home), "MEMSTORE_HOME": str(home / ".memory"), "MEMSTORE_DAEMON": "0",
                            "XDG_CONFIG_HOME": str(home / ".config"), "GIT_CONFIG_GLOBAL": str(base / "gitconfig"),
                            "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "Test Author",
                            "GIT_AUTHOR_EMAIL": "author@example.com", "GIT_COMMITTER_NAME": "Test Committer",
                            "GIT_COMMITTER_EMAIL": "committer@example.com"}.items():
            mp.setenv(name, value)
        gitops.toplevel.cache_clear()
        try:
            yield dict(os.environ)
        finally:
            gitops.toplevel.cache_clear()
