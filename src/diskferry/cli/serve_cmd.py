"""`diskferry serve`: the daemon with its Kubernetes-shaped API on HTTPS."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from diskferry.control.daemon import DEFAULT_ADDRESS, DEFAULT_PORT, Daemon, default_data_dir


def serve(
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            help="State, certificates, token and kubeconfig "
            "(default /var/lib/diskferry as root, ./diskferry-data otherwise).",
        ),
    ] = None,
    port: Annotated[int, typer.Option("--port", help="HTTPS port of the API.")] = DEFAULT_PORT,
    address: Annotated[
        str, typer.Option("--address", help="Address to listen on.")
    ] = DEFAULT_ADDRESS,
) -> None:
    """Run the daemon: the API kubectl drives, until SIGTERM or SIGINT."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    Daemon(data_dir or default_data_dir(), address=address, port=port).run()


def register(app: typer.Typer) -> None:
    """Add `serve` to the CLI."""
    app.command("serve")(serve)
