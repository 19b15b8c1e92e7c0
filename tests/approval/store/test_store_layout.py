"""The store package's shape (issue 19): its import graph — every ``import`` statement
anywhere in a module, function-level ones included — has no cycle; the store imports
nothing of the layers above it (the gate, the providers, the runner, the channels); and
no module is over 800 lines."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.paths import REPO

STORE = REPO / "sandbox" / "approval" / "store"
PACKAGE = "sandbox.approval.store"
#: What the store may import from the rest of the package: the models, the errors, text
#: helpers, the lazy exports, and the tool context (ADK's ToolConfirmation, which an
#: answer may be).
BELOW = ("sandbox.approval.models", "sandbox.errors", "sandbox.text", "sandbox._lazy",
         "sandbox.tools.context")


def _module(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (``from x import y`` counts as x.y
    when x.y is a module of the store, else as x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if (STORE / f"{alias.name}.py").exists()
                          and node.module == PACKAGE else node.module)
    return found


def _graph() -> dict[str, set[str]]:
    return {_module(p): _imports(p) for p in sorted(STORE.glob("*.py"))}


def test_the_store_has_no_import_cycle() -> None:
    graph = _graph()
    inside = {m: {d for d in deps if d in graph} for m, deps in graph.items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycle = [*path[path.index(module):], module]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        for dep in sorted(inside[module]):
            visit(dep, [*path, module])
        done.add(module)

    for module in sorted(inside):
        visit(module, [])
    # The graph is real: the backends are reached from the opener, the rules from each.
    assert {f"{PACKAGE}.memory", f"{PACKAGE}.sqlite", f"{PACKAGE}.postgres"} <= inside[
        f"{PACKAGE}.opening"]
    for backend in ("memory", "sql", "postgres"):
        assert f"{PACKAGE}.decisions" in inside[f"{PACKAGE}.{backend}"]


def test_the_store_imports_nothing_above_it() -> None:
    upward = {
        (module, dep)
        for module, deps in _graph().items() for dep in deps
        if dep.startswith("sandbox") and not dep.startswith(PACKAGE)
        and not dep.startswith(BELOW)
    }
    assert upward == set()


def test_no_store_module_is_over_800_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in STORE.glob("*.py")}
    assert sizes and max(sizes.values()) <= 800, sizes
