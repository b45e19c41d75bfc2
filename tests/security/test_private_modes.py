"""Files memstore writes follow the user's umask, and the global store's index (all global
memory text: catalog, keyword index, vectors) is its owner's alone whatever the umask."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from conftest import make_git_repo

TEXT = "The release checklist lives in docs/release.md and the signing key is on the build host."
GLOBAL_TEXT = "Prefer small commits with a subject line that says what changed and why."


def _cli(args: list[str], cwd: Path, umask: int) -> str:
    proc = subprocess.run([sys.executable, "-m", "memstore", *args], cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, check=False, timeout=180, umask=umask)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _write_and_read(repo: Path, umask: int) -> None:
    """What a user does: init both stores, write a repo and a global memory, read them back."""
    _cli(["init"], repo, umask)
    _cli(["init", "--global"], repo, umask)
    _cli(["write", "--kind", "fact", "--text", TEXT, "--evidence", "user:x", "--allow-duplicate"], repo, umask)
    proposed = json.loads(_cli(["write", "--kind", "preference", "--scope", "global", "--text", GLOBAL_TEXT,
                                "--evidence", "user:x", "--allow-duplicate"], repo, umask))
    assert proposed["pending"] is True  # review mode: the user approves a global memory
    _cli(["approve", proposed["id"]], repo, umask)
    out = _cli(["read", "where is the release checklist and how should commits look"], repo, umask)
    assert "release" in out


def _open_to_others(root: Path) -> list[str]:
    """Everything under ``root`` (itself included) that group or other users can read or enter."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = os.lstat(path).st_mode
        if not stat.S_ISLNK(mode) and mode & 0o077:
            found.append(f"{path.relative_to(root.parent)} {stat.S_IMODE(mode):o}")
    return found


def test_a_private_umask_is_kept_for_every_file_written(tmp_path: Path) -> None:
    repo = make_git_repo(tmp_path / "repo")
    _write_and_read(repo, 0o077)
    home_index = Path(os.environ["MEMSTORE_HOME"]) / ".index"
    repo_index = repo / ".memory" / ".index"
    assert (home_index / "catalog.json").is_file() and (repo_index / "catalog.json").is_file()
    assert (repo_index / "meta.json").is_file() and any((repo_index / "keyword").iterdir())
    assert _open_to_others(repo_index) == []
    assert _open_to_others(home_index) == []
    # The memory files themselves too (they were forced to 0644).
    assert _open_to_others(repo / ".memory" / "facts") == []
    assert _open_to_others(Path(os.environ["MEMSTORE_HOME"])) == []


def test_the_global_index_is_private_whatever_the_umask(tmp_path: Path) -> None:
    repo = make_git_repo(tmp_path / "repo")
    _write_and_read(repo, 0o022)
    home = Path(os.environ["MEMSTORE_HOME"])
    assert stat.S_IMODE(os.lstat(home / ".index").st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(home).st_mode) == 0o700  # a new global store is created private
    # The repo's projections follow the umask like the code beside them.
    assert stat.S_IMODE(os.lstat(repo / ".memory" / ".index").st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(repo / ".memory" / ".index" / "catalog.json").st_mode) == 0o644

    # A global index left open by an older version is closed on the next call.
    os.chmod(home / ".index", 0o755)
    _cli(["list", "--scope", "global"], repo, 0o022)
    assert stat.S_IMODE(os.lstat(home / ".index").st_mode) == 0o700
