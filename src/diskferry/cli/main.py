"""The `diskferry` command: its sub-commands, and one-line errors with exit codes."""

from __future__ import annotations

import sys

import typer
from typer._click.exceptions import NoArgsIsHelpError, UsageError

from diskferry.cli.backup_cmd import register as register_backup
from diskferry.cli.cbt_cmd import register as register_cbt
from diskferry.cli.common import fail_line
from diskferry.cli.demo_cmd import register as register_demo
from diskferry.cli.export_cmd import register as register_export
from diskferry.cli.import_cmd import register as register_import
from diskferry.cli.repo_cmd import register as register_repo
from diskferry.disk.errors import DiskferryError

app = typer.Typer(
    name="diskferry",
    help="Move virtual-machine disks: import, export, back up and restore.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
register_import(app)
register_demo(app)
register_export(app)
register_cbt(app)
register_repo(app)
register_backup(app)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI: 0 done, 1 the job failed, 2 bad usage; errors as one line on stderr."""
    try:
        app(args=argv, standalone_mode=False)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        fail_line("cancelled")
        sys.exit(130)
    except NoArgsIsHelpError:
        sys.exit(2)
    except UsageError as e:
        fail_line(e.format_message())
        sys.exit(2)
    except DiskferryError as e:
        fail_line(e.message)
        sys.exit(1)
    except KeyboardInterrupt:
        fail_line("cancelled")
        sys.exit(130)
    sys.exit(0)


if __name__ == "__main__":
    main()
