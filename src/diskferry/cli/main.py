"""The `diskferry` command: its sub-commands, and one-line errors with exit codes."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from diskferry import __version__
from diskferry.base import BAD_USAGE, DiskferryError, freeze_at_exit, limit_arenas
from diskferry.cli.cancel import Interrupted, stop_on_signals
from diskferry.cli.common import fail_line
from diskferry.cli.early_key import begin_key_derivation
from diskferry.cli.help_text import HELP_OPTIONS
from diskferry.cli.lazy_group import LazyGroup
from diskferry.cli.network_options import say_retries

USAGE = """Move virtual-machine disks: import, export, back up and restore.

Every command prints errors as one line, `diskferry: error: ...`, on stderr, and exits 0
when done, 1 when the job failed and 2 on bad usage. The engine commands (`import`,
`export serve`, `backup`, ...) need no daemon. The resource commands (`apply`, `get`,
`describe`, `delete`, `logs`, `wait`) talk to `diskferry serve`, found through `--data-dir
DIR` (its `DIR/kubeconfig`), `--kubeconfig`, `KUBECONFIG`, or the default data directory's
kubeconfig, and name kinds as kubectl does (kind, plural, singular or short name); a daemon
that is not running, a token it refuses and an object refused by validation are each one
line and exit 1.

SIGINT (Ctrl-C) and SIGTERM cancel a command: it stops, removes what it made, leaves the
target and the repository as they were, says so (`diskferry: removed what it wrote: TARGET
is as it was`), prints `diskferry: cancelled` and exits 130 (SIGINT) or 143 (SIGTERM).
The servers (`export serve`, `proxy serve`) stop on them and exit 0.

A command that writes a volume (`import`, `image pull`, `export download`, `restore`)
replaces an existing target, a block device included, only with `--force`; the source is
checked first, so a bad source is reported as such whether or not the target exists. A
file target is written as a prime copy renamed over it on success; a block device is
written in place: the command says so before it starts, and reports it as partly written
on failure. Wherever a command takes a volume path it also takes an NBD URL (`diskferry
volume --help`), and wherever it takes a disk path, the raw volume and its CBT overlay
both work.

Every command that talks HTTP (`import` and `info` from a URL, `export download`, `upload
send`, `image push|pull|inspect|list|delete`) takes `--retries N` (default 5) and
`--timeout DURATION` (default 30s: how long to wait for a connection or an answer). A
server that cannot be reached (connection refused, unknown host), or answers 429, 502, 503
or 504, is tried again after 0.5 s, 1 s, 2 s... and each retry is said on stderr
(`diskferry: retrying in 1 s: cannot connect: connection refused`), as is a resume
(`diskferry: resumed URL at byte N`). An error answer shows what the server said: the
`reason: message` of a JSON body, or its first line. An HTTP(S) URL's `user:password@`
goes to the server as Basic auth (as curl sends it; an `Authorization` given with
`--header` wins); messages name URLs without it. An unsupported source scheme is named
(`unsupported source scheme ftp`).

Sizes are bytes or a number with K, M, G, T (or Ki, Mi, Gi, Ti), all binary: 512M and
512Mi are both 536870912 bytes. Human output gives sizes as people read them (1.5 GiB)
and fits 80 columns, the progress bar (on a terminal; `--no-progress` hides it) included;
`--json` prints exact numbers under camelCase keys.

`diskferry --install-completion` installs shell completion (`--show-completion` prints
it)."""

app = typer.Typer(
    name="diskferry",
    cls=LazyGroup,
    help=USAGE,
    no_args_is_help=True,
    context_settings={"help_option_names": HELP_OPTIONS},
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
