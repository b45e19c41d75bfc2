"""The package's imports form no circle: every `import` in `memstore/` counts, at module level,
inside a function (a lazy import) or under TYPE_CHECKING, because each is a dependency the
next reader has to follow."""

from __future__ import annotations

import ast
from pathlib import Path

import memstore

PACKAGE = Path(memstore.__file__).parent


def _module_names() -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["memstore", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        candidates = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            package = ".".join([*base, *([node.module] if node.module else [])])
        else:
            package = node.module or ""
        # `from . import cli` names a module; `from .cli import main` names its package's module
        candidates = [f"{package}.{alias.name}" for alias in node.names] + [package]
    found = set()
    for name in candidates:
        if name in known:
            found.add(name)
            if isinstance(node, ast.ImportFrom):
                break
    return found


def import_graph() -> dict[str, set[str]]:
    known = _module_names()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name] |= _targets(node, name, path.name == "__init__.py", known) - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path that ends where it starts, or None."""
    done: set[str] = set()
    for start in sorted(graph):
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        on_path = [start]
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                on_path.pop()
                done.add(node)
                continue
            nxt = todo.pop()
            if nxt in on_path:
                return [*on_path[on_path.index(nxt):], nxt]
            if nxt not in done:
                stack.append((nxt, sorted(graph[nxt])))
                on_path.append(nxt)
    return None


def test_the_checker_sees_a_circle_and_a_lazy_import() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    graph = import_graph()
    assert "memstore.cli" in graph["memstore.entry"]  # entry's fallback is a function-level import
    assert "memstore.errors" in graph["memstore.cli"]  # `from .errors import ...`
    assert "memstore.index.embedder" in graph["memstore.daemon"]  # `from .index.embedder import ...`


def test_no_import_circle_in_the_package() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])
