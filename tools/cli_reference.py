"""docs/cli.md: every command of `diskferry`, made from the typer app as `--help` shows it."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import typer.main
from markdown_text import escaped

from diskferry.cli.main import app

HELP = "-h, --help"
VERBATIM = "\b"
"""A help paragraph that starts with this line is kept as written (click's rule); here it is
a code block."""


class _Recorder:
    """Takes the place of click's HelpFormatter: keeps each section's rows instead of
    writing them, so that the reference shows exactly what `--help` does."""

    width = 10_000  # a group's command list is cut to the width: here it is not

    def __init__(self) -> None:
        self.sections: dict[str, list[tuple[str, str]]] = {}
        self._current = ""

    @contextlib.contextmanager
    def section(self, name: str) -> Iterator[None]:
        """Rows written from now on belong to the section `name`."""
        self._current = name
        yield

    def write_dl(self, rows: list[tuple[str, str]]) -> None:
        """Keep the rows of the current section."""
        self.sections.setdefault(self._current, []).extend(rows)


def _commands(command: Any, ctx: Any, path: tuple[str, ...]) -> Iterator[tuple[str, Any, Any]]:
    """Every command under `command`, itself first, with its full name and its context."""
    yield " ".join(path), command, ctx
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            sub_ctx = sub.make_context(name, [], parent=ctx, resilient_parsing=True)
            yield from _commands(sub, sub_ctx, (*path, name))


def _anchor(name: str) -> str:
    """The anchor GitHub's markdown gives the heading of the command `name`."""
    return name.replace(" ", "-")


def _help_markdown(text: str) -> str:
    """A command's help as markdown: its paragraphs as written, a verbatim one as a code
    block; what follows `\\f` (click's cut) is left out, as `--help` leaves it out."""
    out = []
    for paragraph in inspect.cleandoc(text).partition("\f")[0].split("\n\n"):
        if paragraph.startswith(VERBATIM + "\n"):
            out.append("```\n" + paragraph.removeprefix(VERBATIM + "\n") + "\n```")
        else:
            out.append(escaped(paragraph))
    return "\n\n".join(out)


def _rows(rows: list[tuple[str, str]]) -> list[str]:
    """A definition list's rows as a markdown list: the name in code, then its help (`--help`,
    which every command takes, left out)."""
    out = []
    for name, text in rows:
        if name != HELP:
            out.append(f"- `{name}`: {escaped(' '.join(text.split()))}".rstrip(": "))
    return out


def _command(name: str, command: Any, ctx: Any) -> list[str]:
    """The section of one command: usage, help, arguments and options, sub-commands."""
    recorder = _Recorder()
    command.format_options(ctx, recorder)
    usage = " ".join([name, *command.collect_usage_pieces(ctx)])
    lines = [f"## {name}", "", "```", usage, "```", ""]
    if command.help:
        lines += [_help_markdown(command.help), ""]
    for title in ("Arguments", "Options"):
        rows = _rows(recorder.sections.get(title, []))
        if rows:
            lines += [f"{title}:", "", *rows, ""]
    if hasattr(command, "list_commands"):
        lines += ["Commands:", ""]
        for sub in command.list_commands(ctx):
            short = command.get_command(ctx, sub).get_short_help_str(limit=10_000)
            lines.append(f"- [`{name} {sub}`](#{_anchor(f'{name} {sub}')}): {short}")
        lines.append("")
    return lines


def render() -> str:
    """docs/cli.md's text."""
    root = typer.main.get_command(app)
    ctx = root.make_context("diskferry", [], resilient_parsing=True)
    found = list(_commands(root, ctx, ("diskferry",)))
    lines = [
        "# Command reference",
        "",
        "<!-- Made by `make docs` (tools/gen_docs.py) from the commands' own help: edit the",
        "docstrings and help texts under src/diskferry/cli/, then run `make docs`. -->",
        "",
        "Every command of `diskferry`, as `diskferry COMMAND --help` prints it; `-h` or",
        "`--help` after any command prints its help.",
        "",
    ]
    for name, command, command_ctx in found:
        lines += _command(name, command, command_ctx)
    return "\n".join(lines).rstrip("\n") + "\n"
