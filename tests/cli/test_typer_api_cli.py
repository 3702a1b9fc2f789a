"""What the CLI takes from its libraries: typer's public names, the command classes that typer's
`cls=` takes, and one call that has no public form (`typer.main.get_command`), whose result
the last test checks so that a typer that changes it fails here, not in a user's hands; and
no library it does not declare."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import typer
from typer.core import TyperGroup

import diskferry.cli
from diskferry.cli.help_text import PlainHelpCommand
from diskferry.cli.lazy_group import COMMAND_MODULES, module_commands

ROOT = Path(__file__).resolve().parents[2]
# typer's extension points beyond its top level: the classes `cls=` takes, and the one call
# that turns an app into click commands (typer documents none since it vendored click)
BEYOND_THE_TOP = {"typer.core.TyperGroup", "typer.core.TyperCommand", "typer.main.get_command"}


def _trees() -> list[tuple[str, ast.Module]]:
    """Each module of the CLI, parsed."""
    folder = Path(diskferry.cli.__file__).parent
    return [(path.name, ast.parse(path.read_text())) for path in sorted(folder.glob("*.py"))]


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for an attribute chain on a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _typer_names(tree: ast.Module) -> set[str]:
    """The names of typer's that a module takes: imported from typer, or reached as `typer.X`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "typer":
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.split(".")[0] == "typer"}
        elif isinstance(node, ast.Attribute) and (_dotted(node) or "").startswith("typer."):
            names.add(_dotted(node))
    return names


def test_the_cli_takes_only_typer_s_public_names() -> None:
    public = {"typer"} | {f"typer.{name}" for name in dir(typer) if not name.startswith("_")}
    modules = {name.rsplit(".", 1)[0] for name in BEYOND_THE_TOP}
    taken = set().union(*(_typer_names(tree) for _, tree in _trees()))
    assert taken - public - modules - BEYOND_THE_TOP == set()


def test_the_cli_reads_nothing_a_typer_app_keeps_of_what_it_registered() -> None:
    kept = {name for name in vars(typer.Typer()) if name.startswith("registered_")}
    kept.add("typer_instance")
    read = [
        f"{name}: {node.attr}"
        for name, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in kept
    ]
    assert read == []


def _declared() -> set[str]:
    """The distributions pyproject.toml makes the package depend on, normalized."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = (re.split(r"[<>=!~ \[;]", spec, maxsplit=1)[0] for spec in project["dependencies"])
    return {re.sub(r"[-_.]+", "-", name).lower() for name in names}


def test_the_cli_imports_only_libraries_it_declares() -> None:
    owners = importlib.metadata.packages_distributions()
    declared = _declared()
    undeclared = set()
    for name, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = {node.module.split(".")[0]}
            else:
                continue
            for top in tops - set(sys.stdlib_module_names) - {"diskferry", "__future__"}:
                dists = {re.sub(r"[-_.]+", "-", d).lower() for d in owners.get(top, [top])}
                if not dists & declared:
                    undeclared.add(f"{name}: {top}")
    assert undeclared == set()


def _leaves(command: object) -> list[object]:
    """The commands under a group, however deep; a command itself."""
    if isinstance(command, TyperGroup):
        return [leaf for sub in command.commands.values() for leaf in _leaves(sub)]
    return [command]


def test_typer_turns_each_command_module_into_plain_help_commands() -> None:
    for module in sorted(set(COMMAND_MODULES.values())):
        commands = module_commands(module)
        assert sorted(commands) == sorted(n for n, m in COMMAND_MODULES.items() if m == module)
        leaves = [leaf for command in commands.values() for leaf in _leaves(command)]
        assert leaves, module
        assert all(isinstance(leaf, PlainHelpCommand) for leaf in leaves), (module, leaves)
