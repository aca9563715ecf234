"""The package's modules import each other without a cycle (issue #34, item 2).

The graph is read from the source with ``ast``: every ``import`` and ``from ... import``
that can run, at module level or inside a function, class or ``try``; only the bodies
of ``if TYPE_CHECKING:`` are left out (they never run). An import inside a function is
how an optional feature stays out of ``import aioproducer`` (see test_import_cost.py),
and it is welcome for that; it may not close a loop, which would only hide a cycle
until the function first runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "aioproducer"

#: Edges that close a loop today and are being removed elsewhere: the version is read
#: from the package root (``from . import __version__``) until ``_version.py`` exists;
#: once it does, these edges are cycles like any other.
_VERSION_FROM_ROOT = {"__version__"}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of ``body`` that can run (nested ones included)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _imports(node.orelse)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    yield from _imports([child])
                elif isinstance(child, (ast.excepthandler, ast.match_case)):
                    yield from _imports(child.body)


Edge = tuple[str, str]


def import_graph(root: Path) -> tuple[dict[str, set[str]], dict[Edge, list[str]]]:
    """``module -> modules it imports`` within the package at ``root``, and for each
    edge the ``file:line: names`` of the imports that make it."""
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    known = set(files) | {_module_name(p, root) for p in root.rglob("*.pyx")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    where: dict[Edge, list[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _imports(tree.body):
            targets: list[tuple[str, str]] = []
            if isinstance(node, ast.Import):
                targets = [(alias.name, alias.name) for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    targets.append((sub if sub in known else module, alias.name))
            for target, what in targets:
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if not target or target == name or target not in files:
                    continue
                graph[name].add(target)
                where.setdefault((name, target), []).append(
                    f"{path.relative_to(root.parent)}:{node.lineno}: {what}")
    return graph, where


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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


def _describe(component: list[str], graph: dict[str, set[str]],
              where: dict[Edge, list[str]]) -> str:
    lines = [f"a cycle of {len(component)} modules: {', '.join(component)}"]
    members = set(component)
    for a in component:
        for b in sorted(graph[a] & members):
            lines.append(f"  {a} -> {b}   ({'; '.join(where[(a, b)])})")
    return "\n".join(lines)


def _pending_edges(root: Path, where: dict[Edge, list[str]]) -> set[Edge]:
    """Edges to the package root that take only ``__version__``, while the package has
    no ``_version.py`` for them to take it from."""
    if (root / "_version.py").exists():
        return set()
    top = root.name
    return {edge for edge, sites in where.items()
            if edge[1] == top
            and all(site.rsplit(": ", 1)[1] in _VERSION_FROM_ROOT for site in sites)}


def test_the_package_has_no_import_cycle() -> None:
    graph, where = import_graph(PACKAGE)
    for a, b in _pending_edges(PACKAGE, where):
        graph[a].discard(b)
    found = cycles(graph)
    assert not found, "\n\n".join(_describe(c, graph, where) for c in found)


def test_the_bench_and_the_soaks_have_no_import_cycle() -> None:
    """bench/ and soak/ too: their harnesses, runners and studies import downward."""
    for tree in ("bench", "soak"):
        graph, where = import_graph(PACKAGE.parent / tree)
        found = cycles(graph)
        assert not found, "\n\n".join(_describe(c, graph, where) for c in found)


def test_the_check_sees_a_cycle_closed_inside_a_function(tmp_path: Path) -> None:
    """The same check on a small package: a loop closed by an import inside a function
    is found, one through ``if TYPE_CHECKING:`` is not."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("from .sub.b import B\nA = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..a import A\n"
        "B = 2\n"
        "def late():\n    from .. import c\n    return c\n")
    (pkg / "c.py").write_text("try:\n    from . import a\nexcept ImportError:\n    a = None\n")
    graph, where = import_graph(pkg)
    assert graph["pkg.sub.b"] == {"pkg.c"}
    [component] = cycles(graph)
    assert component == ["pkg.a", "pkg.c", "pkg.sub.b"]
    text = _describe(component, graph, where)
    assert "pkg/sub/b.py:6: c" in text and "pkg/c.py:2: a" in text
