"""No module of diskferry uses a private name of aiohttp: one starting with `_`, imported, read
from an aiohttp object, or inherited by subclassing an aiohttp class."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

import diskferry

SOURCE = Path(diskferry.__file__).parent
LIBRARY = "aiohttp"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain starts from (`web` in `web.Server.x`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _library_names(tree: ast.Module) -> set[str]:
    """The names this module binds to aiohttp or anything imported from it."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == LIBRARY:
                    names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == LIBRARY:
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _private_imports(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            paths = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            paths = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for path in paths:
            parts = path.split(".")
            if parts[0] == LIBRARY and any(_private(part) for part in parts):
                found.append(f"line {node.lineno}: import {path}")
    return found


def _private_attributes(tree: ast.Module, library: set[str]) -> list[str]:
    """`_x` read from an aiohttp name, or from anything but `self` in a module using aiohttp."""
    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and _private(node.attr)
        and (_root(node) in library or not _on_self(node))
    ]


def _on_self(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def _inherited_privates(tree: ast.Module, library: set[str]) -> list[str]:
    """`self._x` in a subclass of an aiohttp class where the subclass never sets `_x`."""
    found = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef) or not any(_root(b) in library for b in cls.bases):
            continue
        own = {
            node.attr
            for node in ast.walk(cls)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
        }
        own |= {node.name for node in cls.body if isinstance(node, ast.FunctionDef)}
        found += [
            f"line {node.lineno}: {cls.name} uses inherited {ast.unparse(node)}"
            for node in ast.walk(cls)
            if isinstance(node, ast.Attribute)
            and _on_self(node)
            and _private(node.attr)
            and node.attr not in own
        ]
    return found


def private_uses(text: str) -> list[str]:
    """Every use of a private aiohttp name in one module's source."""
    tree = ast.parse(text)
    library = _library_names(tree)
    if not library:
        return []
    found = _private_imports(tree) + _private_attributes(tree, library)
    return found + _inherited_privates(tree, library)


@pytest.mark.parametrize(
    "source",
    [
        "from aiohttp.web_protocol import _RequestHandler",
        "import aiohttp._http_parser",
        "from aiohttp import web\nweb._make_something()",
        "from aiohttp import web\ndef f(r: web.Request):\n    return r._match_info",
        "from aiohttp import web\nclass H(web.RequestHandler):\n"
        "    def f(self):\n        return self._request_count",
    ],
)
def test_each_kind_of_private_use_is_found(source: str) -> None:
    assert private_uses(source)


def test_own_private_names_are_not_flagged() -> None:
    source = textwrap.dedent(
        """
        from aiohttp import web
        class Server:
            def __init__(self):
                self._app = web.Application()
            def app(self):
                return self._app
        class Page(web.View):
            def __init__(self):
                self._title = "page"
            def _render(self):
                return self._title
            def get(self):
                return self._render()
        """
    )
    assert private_uses(source) == []


def test_no_module_uses_private_aiohttp_names() -> None:
    found = {
        str(path.relative_to(SOURCE)): uses
        for path in sorted(SOURCE.rglob("*.py"))
        if (uses := private_uses(path.read_text()))
    }
    assert found == {}
