"""The root command group: each sub-command's module is imported only when that command runs."""

from __future__ import annotations

import functools
import importlib
from typing import Any

import typer.main
from typer.core import TyperGroup

from diskferry.cli.help_text import PlainTyper

# command name -> the module under diskferry.cli that registers it, in the order help lists them
COMMAND_MODULES: dict[str, str] = {
    "import": "import_cmd",
    "info": "import_cmd",
    "demo": "demo_cmd",
    "snapshots": "repo_cmd",
    "forget": "repo_cmd",
    "prune": "repo_cmd",
    "backup": "backup_cmd",
    "restore": "backup_cmd",
    "serve": "serve_cmd",
    "operator": "operator_cmd",
    "crds": "crd_cmd",
    "apply": "resource_cmd",
    "get": "resource_cmd",
    "describe": "resource_cmd",
    "delete": "resource_cmd",
    "logs": "resource_cmd",
    "wait": "resource_cmd",
    "image": "image_cmd",
    "export": "export_cmd",
    "proxy": "export_cmd",
    "cbt": "cbt_cmd",
    "repo": "repo_cmd",
    "chain": "backup_cmd",
    "upload": "upload_cmd",
    "volume": "volume_cmd",
}


@functools.cache
def module_commands(module: str) -> dict[str, Any]:
    """The click commands that `diskferry.cli.<module>` registers, by name, with plain help."""
    app = PlainTyper(rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False)
    importlib.import_module(f"diskferry.cli.{module}").register(app)
    # typer has no public way to turn an app into click commands since it vendored click (0.26):
    # get_command is the one its own CliRunner uses; tests/cli/test_typer_api_cli.py checks it,
    # and pyproject.toml holds typer to the minor version checked
    built = typer.main.get_command(app)
    # an app of one command and no callback comes back as that command, not a group
    return dict(built.commands) if isinstance(built, TyperGroup) else {built.name: built}


class LazyGroup(TyperGroup):
    """A group that lists its commands from COMMAND_MODULES and imports one only when asked,
    given to typer as the root app's `cls`."""

    def list_commands(self, ctx: Any) -> list[str]:
        """The command names, in help order, without importing their modules."""
        return list(COMMAND_MODULES)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command `cmd_name`, its module imported now; None for an unknown name."""
        module = COMMAND_MODULES.get(cmd_name)
        if module is None:
            return None
        return module_commands(module)[cmd_name]
