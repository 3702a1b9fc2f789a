"""No circle of imports among the control plane's modules: importing a module also imports
the packages above it, so a package whose `__init__` imports a module that imports back into
it counts as a circle too."""

from __future__ import annotations

import ast
from pathlib import Path

import diskferry.control

ROOT = Path(diskferry.control.__path__[0])
PREFIX = "diskferry.control"


def _modules() -> dict[str, Path]:
    """Each module of the control plane by its dotted name, a package by its `__init__`."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join((PREFIX, *parts))] = path
    return found


def _imported(path: Path, modules: dict[str, Path]) -> set[str]:
    """The control plane's modules that importing `path` imports first: each one named, and
    the packages above it."""
    named = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                named.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
    with_packages = set()
    for name in named:
        parts = name.split(".")
        with_packages.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
    return {name for name in with_packages if name in modules}


def import_graph() -> dict[str, set[str]]:
    """Each control-plane module and those it imports, without the packages it sits in
    (Python has imported them before it)."""
    modules = _modules()
    return {
        name: {
            other
            for other in _imported(path, modules)
            if other != name and not name.startswith(other + ".")
        }
        for name, path in modules.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import one another, round a circle (Tarjan's strongly
    connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def test_circles_finds_a_circle_through_a_package() -> None:
    graph = {"a": {"a.b"}, "a.b": {"c"}, "c": {"a"}, "d": {"c"}}
    assert circles(graph) == [["a", "a.b", "c"]]


def test_no_control_plane_module_imports_itself_round_a_circle() -> None:
    graph = import_graph()
    assert len(graph) > 100
    assert circles(graph) == []
