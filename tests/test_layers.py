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
    assert "memstore.surfaces.cli" in graph["memstore.surfaces.entry"]  # entry's fallback is a function-level import
    assert "memstore.errors" in graph["memstore.surfaces.cli"]  # `from .errors import ...`
    assert "memstore.index.embedder" in graph["memstore.surfaces.daemon"]  # `from .index.embedder import ...`


def test_no_import_circle_in_the_package() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


# The floors, bottom to top (ARCHITECTURE.md). A module may import from its own floor and the
# floors below it, never from above. The two leaves every floor may use: the error tree and
# the one module that runs git.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("memstore.errors", "memstore.gitops"),
    ("memstore.store",),
    ("memstore.index",),
    ("memstore.git",),
    ("memstore.read",),
    ("memstore.verbs",),
    ("memstore.surfaces", "memstore", "memstore.__main__"),
)


def floor_of(module: str) -> int:
    """The floor of the longest layer prefix naming ``module``."""
    best, length = -1, -1
    for floor, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = floor, len(prefix)
    return best


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps if floor_of(b) > floor_of(a))


def test_the_floor_check_sees_an_upward_import() -> None:
    assert floor_of("memstore.store.files") < floor_of("memstore.index.keyword") < floor_of("memstore.read.retrieve")
    assert floor_of("memstore") == floor_of("memstore.surfaces.cli")  # the package face sits with the surfaces
    assert upward_imports({"memstore.store.model": {"memstore.read.ranking"}}) == [
        "memstore.store.model -> memstore.read.ranking"]
    assert upward_imports({"memstore.read.ranking": {"memstore.store.model"}}) == []


def test_every_module_lives_on_a_floor() -> None:
    """A new module goes into the folder of its layer; only the two leaves sit at the top."""
    stray = sorted(m for m in import_graph() if floor_of(m) < 0)
    assert not stray, f"modules outside every layer folder: {stray}"


def test_imports_only_point_down() -> None:
    up = upward_imports(import_graph())
    assert not up, "imports that point up a floor:\n" + "\n".join(up)
