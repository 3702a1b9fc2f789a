"""`diskferry serve`: the daemon with its Kubernetes-shaped API on HTTPS; `--stop` stops it and
its workers for good."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from diskferry.cli.common import note
from diskferry.serving import DEFAULT_ADDRESS, DEFAULT_PORT, PROXY_PORT, default_data_dir

# how long `--stop` gives the daemon, then its workers, to end after SIGTERM before SIGKILL
STOP_SECONDS = 90


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
    stop: Annotated[
        bool,
        typer.Option(
            "--stop",
            help="Stop for good the daemon serving --data-dir, if one runs, and every worker "
            f"it started (SIGTERM, then SIGKILL after {STOP_SECONDS} s), wait for them, and exit.",
        ),
    ] = False,
) -> None:
    """Run the daemon: the API kubectl drives and the controllers, until SIGTERM or SIGINT.

    \b
    diskferry serve --data-dir DIR &
    kubectl --kubeconfig DIR/kubeconfig apply -f examples/virtualdisk-http.yaml
    kubectl --kubeconfig DIR/kubeconfig get vd
    diskferry serve --stop --data-dir DIR

    The daemon keeps the objects in `DIR/state.db` and answers a Kubernetes-shaped API on
    HTTPS, on 127.0.0.1:7443 unless told otherwise; a data directory it cannot write is
    refused in one line, and the directory is made 0700. Its CA and server certificate
    (`DIR/pki/`) and its bearer token (`DIR/token`, mode 0600) are made once and kept, and
    once the API answers it writes `DIR/kubeconfig` (mode 0600; context `diskferry`), so a
    kubeconfig stays valid across restarts. Every request but `/healthz`, `/readyz`,
    `/livez` and `/version` needs the token; the token is never logged. kubectl, kr8s and
    the `kubernetes` Python client drive it as a cluster; docs/operations.md says what the
    API serves, where each object's worker runs and where its files and logs go.

    With the controllers (the default), one reconciler per kind runs beside the API and
    starts each object's work in a worker, a child process; `--no-controllers` serves the
    objects only. An export's external links go through the export proxy the daemon runs on
    `--proxy-port` while there is an export.

    A daemon stopped by SIGTERM or SIGINT ends open watches, stops serving and exits 0,
    leaving its workers (imports, exports, the export proxy, backups) running, and the next
    one started on the same data directory (or after `kill -9`) re-attaches to them: a
    restart or an upgrade cuts no transfer. To stop the daemon and all its workers, run
    `diskferry serve --stop --data-dir DIR`; a worker whose data directory is removed stops
    by itself within seconds.
    """
    if stop:
        _stop(data_dir or default_data_dir())
        return
    from diskferry.control.controllers import Controllers
    from diskferry.control.daemon import Daemon
    from diskferry.control.runtime.runner.stop import serving

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )

    def reconcile(daemon: Daemon) -> Controllers:
        return Controllers(daemon.data_dir, daemon.service, proxy_port=proxy_port)

    background = [reconcile] if controllers else []
    daemon = Daemon(
        data_dir or default_data_dir(), address=address, port=port, background=background
    )
    with serving(daemon.data_dir):
        daemon.run()


def _stop(data_dir: Path) -> None:
    """Stop the daemon of `data_dir` and its workers, and say what was stopped."""
    from diskferry.control.runtime.runner.stop import stop_data_dir

    stopped = stop_data_dir(data_dir, STOP_SECONDS)
    count = len(stopped.workers)
    workers = f"{count} worker{'' if count == 1 else 's'} of {data_dir}"
    if stopped.daemon is not None:
        workers = f"the daemon (pid {stopped.daemon}) and {workers}"
    named = f": {', '.join(stopped.workers)}" if stopped.workers else ""
    note(f"stopped {workers}{named}")


def register(app: typer.Typer) -> None:
    """Add `serve` to the CLI."""
    app.command("serve")(serve)
