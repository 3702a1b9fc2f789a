"""The `diskferry` command: its sub-commands, and one-line errors with exit codes."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from diskferry import __version__
from diskferry.cli.cancel import Interrupted, stop_on_signals
from diskferry.cli.common import fail_line
from diskferry.cli.early_key import begin_key_derivation
from diskferry.cli.lazy_group import LazyGroup
from diskferry.cli.network_options import say_retries
from diskferry.disk import BAD_USAGE, DiskferryError, freeze_at_exit, limit_arenas

app = typer.Typer(
    name="diskferry",
    cls=LazyGroup,
    help="Move virtual-machine disks: import, export, back up and restore.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        print(f"diskferry {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Move virtual-machine disks: import, export, back up and restore."""


def main(argv: list[str] | None = None) -> None:
    """Run the CLI: 0 done, 1 the job failed, 2 bad usage; errors as one line on stderr.

    A command stopped by SIGINT or SIGTERM prints `diskferry: cancelled` and exits 130 or 143.
    """
    freeze_at_exit()
    begin_key_derivation(sys.argv[1:] if argv is None else argv)
    limit_arenas()
    stop_on_signals()
    say_retries()
    try:
        # not standalone: typer returns the exit code and raises what the CLI prints itself
        code = app(args=argv, standalone_mode=False)
    except Interrupted as e:
        print("diskferry: cancelled", file=sys.stderr)
        sys.exit(e.exit_code)
    except typer.TyperException as e:
        message = e.format_message()
        if "\n" in message.strip():  # the help of a command given no arguments
            print(message, file=sys.stderr)
        else:
            fail_line(message)
        sys.exit(e.exit_code)
    except DiskferryError as e:
        fail_line(e.command_line)
        sys.exit(2 if e.reason == BAD_USAGE else 1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
