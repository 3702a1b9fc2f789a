"""`diskferry operator`: the reconcilers of `diskferry serve` against a Kubernetes cluster's API,
with leader election on a Lease and probes on a port of their own."""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer

from diskferry.base import DiskferryError
from diskferry.cli.server_options import positive_duration
from diskferry.kube.routetimeout import DEFAULT_ROUTE_TIMEOUT, RouteTimeoutError, route_timeout
from diskferry.serving import OPERATOR_HEALTH_PORT, PROXY_PORT, default_data_dir

NAMESPACE = "diskferry-system"


class LeaseLostError(DiskferryError):
    """The operator lost its Lease and stopped reconciling: run it again to stand again."""


def operator(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig",
            help="The cluster to reconcile, by its current context (default: in a Pod, the "
            "service account's; else KUBECONFIG or ~/.kube/config).",
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            help="Where the operator's Lease is (default: POD_NAMESPACE, else the service "
            f"account's namespace, else {NAMESPACE}). Resources are reconciled in every namespace.",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            help="Where the operator keeps its state, and with --runner local its workers' jobs "
            "and volumes (default /var/lib/diskferry as root, ./diskferry-data otherwise).",
        ),
    ] = None,
    identity: Annotated[
        str | None,
        typer.Option(
            "--identity",
            help="This instance's name in the Lease (default: POD_NAME, else the host's name, "
            "and a unique suffix).",
        ),
    ] = None,
    health_address: Annotated[
        str, typer.Option("--health-address", help="Address the probes are answered on.")
    ] = "0.0.0.0",
    health_port: Annotated[
        int, typer.Option("--health-port", help="Port of GET /healthz and /readyz.")
    ] = OPERATOR_HEALTH_PORT,
    proxy_port: Annotated[
        int, typer.Option("--proxy-port", help="HTTPS port of the export proxy.")
    ] = PROXY_PORT,
    lease_duration: Annotated[
        float,
        typer.Option("--lease-duration", help="Seconds a Lease not renewed is held."),
    ] = 15.0,
    renew_deadline: Annotated[
        float,
        typer.Option(
            "--renew-deadline", help="Seconds the leader tries to renew before it gives up."
        ),
    ] = 10.0,
    retry_period: Annotated[
        float, typer.Option("--retry-period", help="Seconds between tries for the Lease.")
    ] = 2.0,
    watch_seconds: Annotated[
        int,
        typer.Option("--watch-seconds", help="Seconds each watch request lasts before another."),
    ] = 300,
    resync_period: Annotated[
        str,
        typer.Option(
            "--resync-period",
            metavar="DURATION",
            help="How often every object is reconciled again though nothing of it changed "
            "(1h, 30m): a change no watch tells (of a worker Pod, a claim, a Service) reaches "
            "the object it bears on by then.",
        ),
    ] = "1h",
    runner: Annotated[
        str | None,
        typer.Option(
            "--runner",
            help="Where workers run: pods (each job a worker Pod, each claim a PVC; the "
            "default in a Pod) or local (child processes on this host, claims under "
            "--data-dir; the default elsewhere).",
        ),
    ] = None,
    worker_image: Annotated[
        str | None,
        typer.Option(
            "--worker-image",
            help="The image of the worker Pods (default: the operator's own, read from its "
            "Pod, which POD_NAME and POD_NAMESPACE name).",
        ),
    ] = None,
    export_route_timeout: Annotated[
        str,
        typer.Option(
            "--export-route-timeout",
            help="With workers as Pods, where the cluster serves OpenShift's Routes: the "
            "haproxy.router.openshift.io/timeout the export proxy's Route keeps (a number and "
            "a unit, as HAProxy reads it), so that long downloads are not cut.",
        ),
    ] = DEFAULT_ROUTE_TIMEOUT,
    server_cert_lifetime: Annotated[
        str,
        typer.Option(
            "--server-cert-lifetime",
            help="With workers as Pods: how long the certificates of export servers and of the "
            "export proxy last (e.g. 24h, 90m); each is renewed at half its life, without "
            "cutting a download.",
        ),
    ] = "24h",
) -> None:
    """Run the reconcilers of `diskferry serve` against a cluster's API, until SIGTERM.

    Of the operators that share the Lease, one reconciles every diskferry.io resource; the
    others wait, and one takes over within the lease's duration when the leader is gone. A
    leader that loses the Lease stops reconciling and exits 1. The probes answer on every
    instance: /healthz while it runs, /readyz while the cluster's API answers.

    Each job runs in a worker Pod of the operator's image, in the namespace of the claims it
    writes, each claim a PVC populated through a prime PVC; a new leader finds the Pods the last
    one started. With --runner local the leader runs its workers on its own host as child
    processes instead, their volumes and state under --data-dir, as `diskferry serve` does:
    every instance that may lead needs that same directory then.

    With workers as Pods, an export's server runs in a Pod behind a headless Service
    (virt-export-NAME, port 8443) and deploy/'s export proxy finds it there; the servers'
    certificates come from a CA kept in the Secret diskferry-export-ca of --namespace. The
    leader keeps the proxy's certificate (Secret diskferry-export-proxy-tls) and, where the
    cluster serves route.openshift.io, its Route diskferry-export-proxy (re-encrypt, the
    export CA as destination CA, the timeout annotation): created when absent, patched only
    where it differs, so that what a user added to it stays. An export's external links take
    the host of that Route, else of an Ingress to the proxy's Service; with neither they are
    absent, and the export's condition ExternalLinks says why."""
    from diskferry.cli.cancel import signals_set
    from diskferry.control.daemon import prepare_data_dir
    from diskferry.kube.api import KubeApi
    from diskferry.kube.config import api_client, own_namespace
    from diskferry.kube.lease import LeaseTimes
    from diskferry.kube.operator import (
        PODS,
        BadRunnerError,
        Operator,
        OperatorSettings,
        choose_runner,
        default_identity,
        own_image,
    )

    resync = positive_duration(resync_period, "--resync-period")
    lifetime = positive_duration(server_cert_lifetime, "--server-cert-lifetime")
    try:
        chosen = choose_runner(runner)
    except BadRunnerError as e:
        raise typer.BadParameter(e.message, param_hint="--runner") from None
    try:
        route_timeout(export_route_timeout)
    except RouteTimeoutError as e:
        raise typer.BadParameter(e.message, param_hint="--export-route-timeout") from None

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    times = LeaseTimes(lease_duration, renew_deadline, retry_period)
    directory = prepare_data_dir(data_dir or default_data_dir())
    settings = OperatorSettings(
        data_dir=directory,
        namespace=namespace or own_namespace(NAMESPACE),
        identity=identity or default_identity(),
        times=times,
        health_address=health_address,
        health_port=health_port,
        proxy_port=proxy_port,
        watch_seconds=watch_seconds,
        resync=resync,
        route_timeout=export_route_timeout,
        cert_lifetime=timedelta(seconds=lifetime),
    )
    api = KubeApi(api_client(kubeconfig), discovery_cache=directory / "discovery.json")
    if chosen == PODS:
        settings = replace(settings, runner=PODS, worker_image=worker_image or own_image(api))
    stop = threading.Event()
    with signals_set(stop):
        held = Operator(api, settings).run(stop)
    if not held:
        raise LeaseLostError(
            f"lost the lease {settings.namespace}/{settings.lease_name}: stopped reconciling"
        )


def register(app: typer.Typer) -> None:
    """Add `operator` to the CLI."""
    app.command("operator")(operator)
