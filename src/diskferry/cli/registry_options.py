"""The options every command that reaches a registry takes: --insecure, --creds, --authfile."""

from __future__ import annotations

from typing import Annotated

import typer

Insecure = Annotated[
    bool, typer.Option("--insecure", help="Plain HTTP, for a registry on loopback.")
]
Creds = Annotated[str | None, typer.Option("--creds", help="USER:PASS for the registry.")]
Authfile = Annotated[
    str | None, typer.Option("--authfile", help="A Docker config file with `auths`.")
]


def check_creds(creds: str | None) -> None:
    """A --creds value that is not USER:PASS is a usage error (the value is not echoed)."""
    if creds is not None and (":" not in creds or creds.startswith(":")):
        raise typer.BadParameter("expected USER:PASS", param_hint="--creds")
