"""The package's import graph: no cycles, and each room imports only the rooms below it
(docs/architecture.md). The graph is built from every ``import`` statement in a module,
at its top or inside a function; imports under ``if TYPE_CHECKING:`` are annotations
only, never executed, and are left out."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.timeout(60)

PACKAGE = REPO / "sandbox"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, skipping the bodies of ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (i for n in node.orelse for i in _imports_in(n))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _imports(node)


def _imports_in(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    yield from _imports(node)


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Edges between the package's modules, and the outside modules each imports."""
    modules = _modules()
    inside: dict[str, set[str]] = {name: set() for name in modules}
    outside: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]  # fmt: skip
            for target in targets:
                if target.split(".")[0] != "sandbox":
                    outside[name].add(target.split(".")[0])
                    continue
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    inside[name].add(target)
    return inside, outside


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle() -> None:
    inside, _ = _graph()
    assert _cycles(inside) == []


def test_the_graph_sees_imports_inside_functions() -> None:
    # The checker itself: a function-level import is an edge, a TYPE_CHECKING one is not.
    tree = ast.parse("def f():\n    import a\nif TYPE_CHECKING:\n    import b\n")
    assert [alias.name for node in _imports(tree) for alias in node.names] == ["a"]


def _in(module: str, *rooms: str) -> bool:
    return any(module == room or module.startswith(room + ".") for room in rooms)


@pytest.mark.parametrize(("room", "forbidden"), [
    # Reading bash knows nothing of deciding, confining, running or humans.
    ("sandbox.bash.syntax", ("sandbox.bash.policy", "sandbox.bash.linux", "sandbox.bash.run",
                             "sandbox.bash.tool", "sandbox.approval", "sandbox.integrations")),
    # Deciding knows nothing of processes or humans.
    ("sandbox.bash.policy", ("sandbox.bash.linux", "sandbox.bash.run", "sandbox.bash.tool",
                             "sandbox.approval", "sandbox.integrations")),
    # Confining is handed its policy as data.
    ("sandbox.bash.linux", ("sandbox.bash.policy", "sandbox.bash.syntax", "sandbox.bash.run",
                            "sandbox.bash.tool", "sandbox.bash.network", "sandbox.approval",
                            "sandbox.integrations")),
    # Running knows nothing of policies or humans.
    ("sandbox.bash.run", ("sandbox.bash.policy", "sandbox.bash.syntax", "sandbox.bash.tool",
                          "sandbox.approval", "sandbox.integrations")),
    # The shared data is a leaf.
    ("sandbox.bash.config", ("sandbox.bash.policy", "sandbox.bash.syntax", "sandbox.bash.linux",
                             "sandbox.bash.run", "sandbox.bash.tool", "sandbox.approval")),
    # The gate knows nothing of bash.
    ("sandbox.approval", ("sandbox.bash", "sandbox.integrations", "sandbox.cli")),
    ("sandbox.tools", ("sandbox.bash", "sandbox.approval", "sandbox.integrations", "sandbox.cli")),
])  # fmt: skip
def test_a_room_imports_only_the_rooms_below_it(room: str, forbidden: tuple[str, ...]) -> None:
    inside, _ = _graph()
    wrong = sorted(f"{module} imports {target}" for module, targets in inside.items()
                   if _in(module, room) for target in targets if _in(target, *forbidden))  # fmt: skip
    assert wrong == []


def test_the_linux_layer_uses_the_standard_library_only() -> None:
    # It runs in the spawner (python -I -S): no pydantic, anyio or tree-sitter there.
    _, outside = _graph()
    wrong = sorted(f"{module} imports {target}" for module, targets in outside.items()
                   if _in(module, "sandbox.bash.linux", "sandbox.bash.config")
                   for target in targets if target not in sys.stdlib_module_names)  # fmt: skip
    assert wrong == []


def test_no_module_is_longer_than_the_bound() -> None:
    # A module does one thing and can be read top to bottom (STYLE: ~800 lines). Data
    # is not code: the web page's script and stylesheet are files of their own.
    long = sorted(f"{name}: {n} lines" for name, path in _modules().items()
                  if (n := len(path.read_text().splitlines())) > 850)  # fmt: skip
    assert long == []
