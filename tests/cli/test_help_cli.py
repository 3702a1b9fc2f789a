"""Every command's help, as `diskferry ... --help` prints it: each option described, and no
placeholder left in the text (`<str>`, `{source}`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from diskferry.cli.lazy_group import COMMAND_MODULES, module_commands
from diskferry.cli.main import app

_PLACEHOLDER = re.compile(r"<[a-z_]+>|\{[a-z_]+\}")


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command under `command` (a group lists its own), with the words that name it."""
    yield path, command
    if hasattr(command, "list_commands"):
        ctx = command.make_context(command.name, [], resilient_parsing=True)
        for name in command.list_commands(ctx):
            yield from _commands(command.get_command(ctx, name), (*path, name))


def test_every_option_is_described_and_no_placeholder_is_left() -> None:
    runner = CliRunner()
    undescribed, placeholders = [], []
    walked = list(_commands(typer.main.get_command(app)))
    assert len(walked) > 40
    for path, command in walked:
        shown = runner.invoke(app, [*path, "--help"], prog_name="diskferry")
        assert shown.exit_code == 0, (path, shown.output)
        placeholders += [(path, m) for m in _PLACEHOLDER.findall(shown.output)]
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden and not param.help:
                undescribed.append((" ".join(path), param.opts[0]))
    assert not placeholders, placeholders
    assert not undescribed, undescribed


def test_each_module_registers_the_commands_the_root_lists_for_it() -> None:
    for module in set(COMMAND_MODULES.values()):
        listed = sorted(name for name, owner in COMMAND_MODULES.items() if owner == module)
        assert sorted(module_commands(module)) == listed, module


def test_every_command_takes_h_however_its_context_is_made() -> None:
    """A command reached without the root's context (its module's own group, as a test or an
    embedding program reaches it) still takes -h: the help option is each command's own."""
    without_h = []
    for module in sorted(set(COMMAND_MODULES.values())):
        for name, command in module_commands(module).items():
            for path, found in _commands(command, (name,)):
                ctx = found.make_context(path[-1], [], resilient_parsing=True)
                if "-h" not in found.get_help_option_names(ctx):
                    without_h.append(" ".join(path))
    assert not without_h
