"""Every command's help, as `diskferry ... --help` prints it: each option described, and no
placeholder left in the text (`<str>`, `{source}`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from diskferry.cli.main import app

_PLACEHOLDER = re.compile(r"<[a-z_]+>|\{[a-z_]+\}")


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command under `command` (a group has `commands`), with the words that name it."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


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
