"""`diskferry serve`: the daemon with its Kubernetes-shaped API on HTTPS."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from diskferry.serving.defaults import DEFAULT_ADDRESS, DEFAULT_PORT, PROXY_PORT, default_data_dir


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
    proxy_port: Annotated[
        int, typer.Option("--proxy-port", help="HTTPS port of the export proxy.")
    ] = PROXY_PORT,
    controllers: Annotated[
        bool,
        typer.Option(
            "--controllers/--no-controllers",
            help="Reconcile the resources (run imports, exports, snapshots), or only serve them.",
        ),
    ] = True,
) -> None:
    """Run the daemon: the API kubectl drives and the controllers, until SIGTERM or SIGINT.

    Workers keep running when the daemon stops; the next one re-attaches to them."""
    from diskferry.control.controllers import Controllers
    from diskferry.control.daemon import Daemon

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )

    def reconcile(daemon: Daemon) -> Controllers:
        return Controllers(daemon.data_dir, daemon.service, proxy_port=proxy_port)

    background = [reconcile] if controllers else []
    Daemon(data_dir or default_data_dir(), address=address, port=port, background=background).run()


def register(app: typer.Typer) -> None:
    """Add `serve` to the CLI."""
    app.command("serve")(serve)
