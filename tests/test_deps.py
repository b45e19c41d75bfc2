"""Honest dependencies: what memstore imports is declared, what it declares is imported, and
importing or loading the model leaves the process's environment as it was."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

import memstore

PACKAGE = Path(memstore.__file__).parent
ROOT = PACKAGE.parent


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {_norm(re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0]) for dep in meta["project"]["dependencies"]}


def _imported_distributions() -> dict[str, set[str]]:
    """distribution -> the memstore modules that import it (any import, lazy ones included)."""
    dists = packages_distributions()
    out: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "memstore":
                    continue
                for dist in dists.get(top, [f"<no installed distribution: {top}>"]):
                    out.setdefault(_norm(dist), set()).add(path.name)
    return out


def test_every_import_is_declared_and_every_declaration_imported() -> None:
    imported = _imported_distributions()
    declared = _declared()
    # torch comes with sentence-transformers (pyproject says why it is not declared itself)
    undeclared = {d: sorted(m) for d, m in imported.items() if d not in declared and d != "torch"}
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
    unused = declared - set(imported)
    assert not unused, f"declared in pyproject.toml but never imported: {sorted(unused)}"


@pytest.mark.model
def test_the_model_loads_offline_without_changing_the_environment() -> None:
    code = ("import json, os; from memstore.index.embedder import get_embedder; "
            "names = ('HF_HUB_OFFLINE', 'TRANSFORMERS_OFFLINE'); before = [os.environ.get(n) for n in names]; "
            "vec = get_embedder().encode(['hello']); "
            "print(json.dumps({'before': before, 'after': [os.environ.get(n) for n in names], 'dim': vec.shape[1]}))")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"before": [None, None], "after": [None, None], "dim": 384}, got
