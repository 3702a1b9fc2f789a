"""Help in the plain style of restic and skopeo: `SOURCE` and `--format FORMAT`, not typer's
`{source}` and `<str>` placeholders."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand


def _name(param: Any) -> str:
    """The word a parameter's value is shown as: its metavar, else its name in capitals."""
    return param.metavar or (param.name or "value").upper()


class PlainHelpCommand(TyperCommand):
    """A command whose usage line and help name arguments and option values in capitals."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """`[OPTIONS] SOURCE TARGET`: required arguments bare, optional ones in brackets."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                shown = _name(param) + ("..." if param.nargs != 1 else "")
                pieces.append(shown if param.required else f"[{shown}]")
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """The arguments, then the options, each with its description."""
        arguments, options = [], []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                arguments.append((_name(param), param.help or ""))
            elif not param.hidden:
                if not param.is_flag and param.metavar is None:
                    param.metavar = _name(param)
                record = param.get_help_record(ctx)
                if record is not None:
                    options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def use_plain_help(app: typer.Typer) -> None:
    """Make every command of `app` and of its sub-apps a PlainHelpCommand."""
    for command in app.registered_commands:
        if command.cls in (None, TyperCommand):  # typer's default: no class of its own
            command.cls = PlainHelpCommand
    for group in app.registered_groups:
        if group.typer_instance is not None:
            use_plain_help(group.typer_instance)
