"""Help in the plain style of restic and skopeo: `SOURCE` and `--format FORMAT`, not typer's
`{source}` and `<str>` placeholders (which its rich_markup_mode prints too).

The commands are PlainHelpCommands, given as the `cls` that typer's `command` takes; they
override click's formatting methods, which typer keeps in its copy of click."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import typer
from typer.core import TyperCommand

F = TypeVar("F", bound=Callable[..., Any])


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


HELP_OPTIONS = ["-h", "--help"]
"""What prints a command's help: every command and group takes both, however it is reached (a
group's commands are imported lazily, so a command's context is not always made under the
root's)."""


def _with_help_options(settings: dict[str, Any] | None) -> dict[str, Any]:
    """Context settings with HELP_OPTIONS, unless `settings` names others."""
    return {"help_option_names": HELP_OPTIONS, **(settings or {})}


class PlainTyper(typer.Typer):
    """A typer app whose commands are PlainHelpCommands, through the `cls` that typer's
    `command` takes, and whose groups and commands all take HELP_OPTIONS."""

    def __init__(self, *args: Any, context_settings: dict[str, Any] | None = None, **kw: Any):
        super().__init__(*args, context_settings=_with_help_options(context_settings), **kw)

    def command(
        self,
        name: str | None = None,
        *,
        cls: type[TyperCommand] | None = None,
        context_settings: dict[str, Any] | None = None,
        **settings: Any,
    ) -> Callable[[F], F]:
        """typer's `command`, its class PlainHelpCommand unless `cls` names another."""
        return super().command(
            name,
            cls=cls or PlainHelpCommand,
            context_settings=_with_help_options(context_settings),
            **settings,
        )
