"""No import cycle among the source modules of any package.

A cycle makes the import order matter, hides which module owns a concept, and
breaks as soon as one side imports the other at module level. Every import
counts: one inside a function or under `if TYPE_CHECKING:` defers the import,
it does not remove the two modules' dependence on each other (a type-only cycle
is broken with a protocol in the lower module, as `tamto_sdk._calls.DirectRoute`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def source_modules() -> dict[str, Path]:
    """Every module under libs/*/src and services/*/src, by dotted name."""
    found: dict[str, Path] = {}
    for src in sorted([*ROOT.glob("libs/*/src"), *ROOT.glob("services/*/src")]):
        for path in src.rglob("*.py"):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import in a module: at module level, in a function, or type-only."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The source modules `name` imports when it is imported."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import mod` imports the submodule; `from mod import name`
            # the module. (A package's __init__ runs first either way; that
            # implicit edge is not counted, or every re-exporting package would
            # be a cycle with its submodules.)
            submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            candidates = submodules if len(submodules) == len(node.names) else [base, *submodules]
        targets.update(c for c in candidates if c in modules and c != name)
    return targets


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
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
            component: list[str] = []
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


def test_the_detector_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_type_only_and_deferred_imports_are_edges(tmp_path: Path) -> None:
    source = tmp_path / "pkg"
    source.mkdir()
    for name in ("b", "c", "d"):
        (source / f"{name}.py").write_text("")
    (source / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.b import Thing\n"
        "def later() -> None:\n"
        "    from . import c\n"
        "import pkg.d\n"
    )
    modules = {f"pkg.{n}": source / f"{n}.py" for n in "abcd"}
    assert imported("pkg.a", modules["pkg.a"], modules) == {"pkg.b", "pkg.c", "pkg.d"}
    (source / "b.py").write_text("import pkg.a\n")
    graph = {name: imported(name, path, modules) for name, path in modules.items()}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_no_import_cycle_in_the_source() -> None:
    modules = source_modules()
    assert len(modules) > 50, "the scan found too few modules: is ROOT right?"
    graph = {name: imported(name, path, modules) for name, path in modules.items()}
    assert cycles(graph) == []
