"""The operator: the controllers of `diskferry serve` over a cluster's API, run only by the
instance that holds the Lease, with its probes on a port of their own.

Every instance answers the probes and tries for the Lease; the one that takes it reconciles
(every diskferry.io kind, through KubeClient and ClusterSource) until it is stopped, when it
releases the Lease, or until it loses it, when it stops reconciling before another may take
over. The controllers' workers run as Pods of the operator's own image, their claims PVCs
(`runner`, `volumes`), with no image store (`images`): a new leader finds the worker Pods the
last one started. Their servers' certificates come from the CA in a Secret (`certs`), an
export's server is reached through its Service (`servers`), and the export proxy is deploy/'s
Deployment, whose certificate and Route the leader keeps (`proxy`). With the local runner they
run on the leader's host as its child processes instead, their volumes, images and state under
its data directory, which instances that may lead then share. The VMs are KubeVirt's: a
DataUpload reads the backup point of a Pull VirtualMachineBackup (`points`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from diskferry.base.errors import DiskferryError
from diskferry.control.clock import Clock
from diskferry.control.controllers import Access, Controllers
from diskferry.control.host.embedded.certs import CERT_LIFETIME, PKI_DIR
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.runtime.runner.stop import serving
from diskferry.kube.api import KubeApi
from diskferry.kube.certs import SecretCa
from diskferry.kube.client import KubeClient
from diskferry.kube.config import POD_NAME, POD_NAMESPACE, in_cluster
from diskferry.kube.health import Health
from diskferry.kube.images import NoImageStore
from diskferry.kube.lease import LeaderElector, LeaseTimes
from diskferry.kube.owned import OWNED, SELECTORS
from diskferry.kube.points import KubeVirtPoints
from diskferry.kube.proxy import ClusterProxy
from diskferry.kube.routetimeout import DEFAULT_ROUTE_TIMEOUT
from diskferry.kube.runner import PodRunner
from diskferry.kube.servers import ServiceServers
from diskferry.kube.source import WATCH_SECONDS, ClusterSource
from diskferry.kube.volumes import ClusterVolumes
from diskferry.serving.defaults import OPERATOR_HEALTH_PORT, PROXY_PORT

log = logging.getLogger("diskferry.kube")
LEASE_NAME = "diskferry-operator"
NAMESPACE = "diskferry-system"
STOP_SECONDS = 30  # for the reconciles under way when the operator is stopped
LOCAL = "local"
PODS = "pods"
RUNNERS = (PODS, LOCAL)
CONTAINER = "operator"
RESYNC_SECONDS = 3600.0
"""How often every object is queued again. Longer than a pass over 10,000 objects (some two
minutes), so that the resyncs of a large cluster do not follow each other without a pause, and
short enough that what a watch cannot tell (a change of a kind the operator does not watch: a
worker Pod, a claim, a Service, a KubeVirt object) reaches an object at rest within the hour."""


class BadRunnerError(DiskferryError):
    """The operator was told to run its workers in a way it knows not."""


def choose_runner(given: str | None) -> str:
    """Where workers run: as `given` (one of RUNNERS), else as Pods when this operator runs
    in a Pod, on its own host otherwise; BadRunnerError for another."""
    chosen = given or (PODS if in_cluster() else LOCAL)
    if chosen not in RUNNERS:
        raise BadRunnerError(f"no runner {chosen!r}: use one of {', '.join(RUNNERS)}")
    return chosen


class NoWorkerImageError(DiskferryError):
    """The operator runs its workers as Pods and cannot tell their image: it runs in no Pod it
    can read (POD_NAME and POD_NAMESPACE), and no image was given."""


def own_image(api: KubeApi) -> str:
    """The image of the operator's own container (`operator`, else its Pod's first), read from
    its Pod, which POD_NAME and POD_NAMESPACE name; NoWorkerImageError when there is none."""
    name, namespace = os.environ.get(POD_NAME), os.environ.get(POD_NAMESPACE)
    pod = api.get("v1", "Pod", namespace, name) if name and namespace else None
    if pod is None:
        raise NoWorkerImageError(
            "the operator runs in no Pod it can read (POD_NAME, POD_NAMESPACE): give the "
            "workers' image with --worker-image"
        )
    containers = pod["spec"]["containers"]
    chosen = next((c for c in containers if c["name"] == CONTAINER), containers[0])
    return str(chosen["image"])


def default_identity() -> str:
    """This instance's name in the Lease: its Pod's (POD_NAME, else the host's) and a unique
    suffix, as client-go names a candidate."""
    return f"{os.environ.get(POD_NAME) or socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True)
class OperatorSettings:
    """What an operator instance is told: where its workers keep their state, its Lease, its
    name in it, its probes' address, the export proxy's port, its watches' length, how often
    every object is queued again (`resync`, seconds), where its workers run: as Pods of
    `worker_image` (PODS), or on its host (LOCAL), and, with Pods, the timeout of the export
    proxy's Route and how long the certificates of the servers and of the proxy last."""

    data_dir: Path
    namespace: str = NAMESPACE
    identity: str = field(default_factory=default_identity)
    lease_name: str = LEASE_NAME
    times: LeaseTimes = field(default_factory=LeaseTimes)
    health_address: str = "0.0.0.0"
    health_port: int = OPERATOR_HEALTH_PORT
    proxy_port: int = PROXY_PORT
    workers: int = 4
    watch_seconds: int = WATCH_SECONDS
    resync: float = RESYNC_SECONDS
    runner: str = LOCAL
    worker_image: str = ""
    route_timeout: str = DEFAULT_ROUTE_TIMEOUT
    cert_lifetime: timedelta = CERT_LIFETIME


class Operator:
    """One instance: its probes, its candidacy, and the controllers while it leads."""

    def __init__(self, api: KubeApi, settings: OperatorSettings) -> None:
        self.api = api
        self.settings = settings
        self.client = KubeClient(api, REGISTRY, instance=settings.identity)
        self.source = ClusterSource(
            api, REGISTRY, watch_seconds=settings.watch_seconds, selectors=SELECTORS
        )
        self.elector = LeaderElector(
            api, settings.namespace, settings.lease_name, settings.identity, settings.times
        )
        self.health = Health(
            settings.health_address, settings.health_port, self._alive, self._ready
        )

    def _alive(self) -> str | None:
        """The process answers: it is alive (it exits when it cannot go on)."""
        return None

    def _ready(self) -> str | None:
        """Ready while the cluster's API answered the Lease's last tries."""
        answered = self.elector.answered
        if answered is None:
            return "the cluster's API has not answered yet"
        silent = time.monotonic() - answered
        if silent > self.settings.times.duration:
            return f"the cluster's API has not answered for {silent:.0f} s"
        return None

    def run(self, stop: threading.Event) -> bool:
        """Answer the probes, wait for the Lease and reconcile while it is held, until `stop`
        is set (True) or the Lease is lost (False: reconciling has stopped)."""
        self.health.start()
        try:
            if not self.elector.acquire(stop):
                return True
            return self._lead(stop)
        finally:
            self.health.stop()

    def _host(self) -> dict[str, Any]:
        """The host's services the controllers take: with workers as Pods, the cluster's (Pods,
        PVCs, no image store, the CA in a Secret, the proxy's Deployment, Services), and the
        Pods and PVCs followed for their owners; none
        otherwise (this host's)."""
        settings = self.settings
        if settings.runner != PODS:
            return {}
        volumes = ClusterVolumes(self.api)
        certs = SecretCa(
            self.api,
            settings.namespace,
            settings.data_dir / PKI_DIR,
            lifetime=settings.cert_lifetime,
        )
        return {
            "runner": PodRunner(self.api, settings.worker_image, volumes, settings.namespace),
            "volumes": volumes,
            "store": NoImageStore(),
            "certs": certs,
            "proxy": ClusterProxy(self.api, certs, settings.namespace, settings.route_timeout),
            "servers": ServiceServers(self.api),
            "owned": OWNED,
        }

    def _lead(self, stop: threading.Event) -> bool:
        settings = self.settings
        log.info(
            "holding the lease %s/%s as %s: reconciling",
            settings.namespace,
            settings.lease_name,
            settings.identity,
        )
        with serving(settings.data_dir):
            access = Access(self.client, self.source, Clock())
            controllers = Controllers(
                settings.data_dir,
                access,
                workers=settings.workers,
                resync=settings.resync,
                proxy_port=settings.proxy_port,
                points=KubeVirtPoints(self.api),
                **self._host(),
            )
            held = False
            try:
                controllers.start()
                held = self.elector.hold(stop)
            finally:
                # a holder that lost the Lease stops before anybody else may take it
                margin = settings.times.duration - settings.times.renew_deadline
                controllers.stop(STOP_SECONDS if held else margin)
        if held:
            self.elector.release()
        return held
