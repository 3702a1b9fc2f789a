"""VirtualMachineExport, as KubeVirt has it: a Ready disk or snapshot served over HTTPS with a
token, on this machine (the internal link) and through the export proxy (the external one),
until the export is deleted at its TTL.

Each export's server is an export worker on 127.0.0.1 with a port of its own, kept in an
annotation so that a server started again (it is, when it ends unexpectedly) keeps its links;
it also listens on a Unix socket of its own, and the proxy's route names the socket it says
it listens on, so that the proxy reaches it without TLS.
The worker gets its certificate (the daemon's CA, short-lived, renewed at half its life), its
token and where to write its links as files; the links it writes become `status.links`.
Phases: Pending (the source or the token is not there yet, or the server is starting), Ready
(the server answers), Terminated (the TTL is reached or the export is being deleted: its
server stopped, its links removed), Skipped (a KubeVirt kind with no counterpart here, until
the TTL). What each source serves, KubeVirt's kinds mapped to diskferry's, is
`exportsources`'s. A VirtualMachine's VirtualDisks are served together while the VM is
stopped; a VM that runs keeps its export Pending, as KubeVirt does, since its disks change
under the readers. Time is the reconciler's clock, the store's in the daemon.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from diskferry.base.errors import DiskferryError
from diskferry.control.clock import Clock, rfc3339
from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.images import ImageStore
from diskferry.control.host.proxy import ExportProxy
from diskferry.control.host.volumes import Volumes
from diskferry.control.model import Resource
from diskferry.control.reconcilers.claimed import POLL_SECONDS, WAIT_SECONDS, tag
from diskferry.control.reconcilers.exportbackup import NotServed, served_point
from diskferry.control.reconcilers.exportmanifest import MANIFEST_FILE, vm_manifest
from diskferry.control.reconcilers.exportsources import SKIPPED, ExportSources, Served
from diskferry.control.reconcilers.exporttoken import Token, export_token
from diskferry.control.reconcilers.imports import Imports
from diskferry.control.reconcilers.lifecycle import deleting, held, release
from diskferry.control.reconcilers.phases import status_of, transition
from diskferry.control.reconcilers.progress import job_details
from diskferry.control.reconcilers.sources import Waiting
from diskferry.control.reconcilers.teardown import STOP_POLL
from diskferry.control.resources.vmexport import (
    VIRTUAL_MACHINE_EXPORTS,
    ExportLinks,
    ExportPhase,
    ExportSourceKind,
    VirtualMachineExport,
)
from diskferry.control.runner.base import JobFile, Runner
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.reconciler import Result
from diskferry.export import ExportJob, ExportVolumeSpec, LinkSettings

log = logging.getLogger("diskferry.control")
M = TypeVar("M", bound=Resource)
PORT_ANNOTATION = "diskferry.io/export-port"
HOST = "127.0.0.1"
TOKEN_FILE = "token"
LINKS_FILE = "links.json"
DRAIN_SECONDS = 10.0
CHECK_SECONDS = 5.0
PROBE_TIMEOUT = 1.0
STARTING = "the export server is starting"
PROXY_STARTING = "the export proxy is starting"
UNLINKED = {"links": None}
NOT_SERVED = "SourceNotServed"


class ExportServerError(DiskferryError):
    """An export's server ended with a failure."""

    reason = "ExportServerFailed"


def free_port(port: int | None = None) -> int:
    """`port` when it can be listened on at 127.0.0.1, else a free port the system picks."""
    for wanted in ([port] if port else []) + [0]:
        with socket.socket() as probe:
            try:
                probe.bind((HOST, wanted))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise OSError(f"no free port on {HOST}")


def answers(port: int, ca_pem: bytes) -> bool:
    """Whether the export server on `port` answers its readiness path over verified TLS."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    conn = http.client.HTTPSConnection(HOST, port, timeout=PROBE_TIMEOUT, context=context)
    try:
        conn.request("GET", ExportJob.READY_PATH)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def recorded_port(client: Client, obj: M) -> tuple[M, int]:
    """The server's port: the one recorded in the object's annotation while it is free, else a
    new one recorded."""
    recorded = obj.metadata.annotations.get(PORT_ANNOTATION)
    port = free_port(int(recorded) if recorded else None)
    if str(port) == recorded:
        return obj, port
    annotations = {**obj.metadata.annotations, PORT_ANNOTATION: str(port)}
    meta = obj.metadata.model_copy(update={"annotations": annotations})
    return client.update(obj.model_copy(update={"metadata": meta})), port


class ServerKeeper(Protocol):
    """What starts and stops an export worker: the runner, the certificates, the proxy, and
    the jobs' bookkeeping."""

    runner: Runner
    certs: ServerCerts
    proxy: ExportProxy
    imports: Imports


def start_server(
    keeper: ServerKeeper,
    job_id: str,
    route: tuple[str, str],
    port: int,
    left: float,
    token: Token,
    model: type[ExportJob],
    fields: dict[str, Any],
    files: Sequence[JobFile] = (),
) -> None:
    """Start the export worker `job_id`, a `model` job of `fields` (its name, volumes and own
    fields), on `port` (and on its Unix socket) for `left` seconds, with the token, a
    certificate for 127.0.0.1, links through the proxy's `route` (namespace, name), and
    `files` its job names."""
    links = LinkSettings(
        internal_url=f"https://{HOST}:{port}",
        external_url=keeper.proxy.external_url(*route),
        external_ca=keeper.certs.ca_file,
        file=LINKS_FILE,
    )
    job = model(
        **fields,
        token_file=TOKEN_FILE,
        ttl=left,
        grace=DRAIN_SECONDS,
        cert_dir=".",
        sans=[HOST],
        listen_address=HOST,
        listen_port=port,
        links=links,
        unix_socket=keeper.proxy.server_socket(job_id),
    )
    given = [*keeper.certs.job_files([HOST]), JobFile(TOKEN_FILE, token.value), *files]
    keeper.runner.start(job_id, job, given)


def stop_server(keeper: ServerKeeper, job_id: str) -> bool:
    """Stop the export worker `job_id`, its files and a socket it was killed before removing
    gone; False while it still runs."""
    if not keeper.imports.stop(job_id):
        return False
    keeper.proxy.drop_server_socket(job_id)
    return True


def where_listening(keeper: ServerKeeper, job_id: str) -> dict[str, Any] | None:
    """What the export worker `job_id` said of where it listens (`listenPort`, and its
    `unixSocket` when it has one), None until it said so."""
    details = job_details(keeper.runner.state(job_id))
    return details if details.get("listenPort") else None


class VirtualMachineExportReconciler:
    """Serves each export's source through an export worker and the proxy, until its TTL."""

    info = VIRTUAL_MACHINE_EXPORTS

    def __init__(
        self,
        client: Client,
        runner: Runner,
        volumes: Volumes,
        store: ImageStore,
        certs: ServerCerts,
        proxy: ExportProxy,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.runner = runner
        self.volumes = volumes
        self.certs = certs
        self.proxy = proxy
        self.clock = clock or Clock()
        self.imports = Imports(runner)
        self.sources = ExportSources(client, volumes, store)

    def job_id(self, obj: VirtualMachineExport) -> str:
        """The id of the export's server job."""
        return f"vmexport-{obj.metadata.uid}"

    def expires(self, obj: VirtualMachineExport) -> datetime:
        """When the export is deleted: its creation plus `spec.ttlDuration`."""
        created = obj.metadata.creation_timestamp or self.clock.now()
        return created + obj.spec.ttl

    def reconcile(self, obj: VirtualMachineExport) -> Result:
        """One step of the export's life."""
        if deleting(obj):
            return self._terminate(obj)
        obj = held(self.client, obj)
        left = (self.expires(obj) - self.clock.now()).total_seconds()
        if left <= 0:
            return self._expire(obj)
        fields = {
            "ttlExpirationTime": rfc3339(self.expires(obj)),
            "serviceName": f"virt-export-{obj.metadata.name}",
        }
        kind = obj.spec.source.kind
        if kind in SKIPPED:
            return self._skip(obj, SKIPPED[kind], fields, left)
        if kind is ExportSourceKind.VIRTUAL_MACHINE_BACKUP:
            return self._point(obj, fields, left)
        served = self.sources.served(obj.metadata.namespace, obj.spec.source)
        if isinstance(served, Waiting):
            return self._idle(obj, served.reason, served.message, fields)
        if served.vm is not None:
            fields["virtualMachineName"] = served.vm.metadata.name
        token = export_token(self.client, obj)
        if isinstance(token, str):
            return self._idle(obj, "TokenNotReady", token, fields)
        fields["tokenSecretRef"] = token.secret_name
        return self._serve(obj, served, token, fields, left)

    def _skip(
        self, obj: VirtualMachineExport, message: str, fields: dict[str, Any], left: float
    ) -> Result:
        """Skipped, with nothing served, until the TTL."""
        self._unserve(obj)
        fields = {**fields, **UNLINKED}
        transition(self.client, obj, ExportPhase.SKIPPED, NOT_SERVED, message, fields)
        return Result.requeue(left)

    def _point(self, obj: VirtualMachineExport, fields: dict[str, Any], left: float) -> Result:
        """Route the export to a Pull backup's point server, with KubeVirt's backup links."""
        point = served_point(self.client, self.runner, obj)
        if isinstance(point, NotServed):
            return self._skip(obj, point.message, fields, left)
        if isinstance(point, Waiting):
            return self._idle(obj, point.reason, point.message, fields)
        name = point.backup.metadata.name
        fields.update(tokenSecretRef=point.token.secret_name, virtualMachineName=point.vm_name)
        port = int(point.backup.metadata.annotations.get(PORT_ANNOTATION, "0"))
        where = where_listening(self, point.job_id)
        if where is None or not answers(port, self.certs.ca_pem()):
            message = f"waiting for the VirtualMachineBackup {name} to serve its point"
            return self._idle(obj, "Starting", message, fields)
        self.proxy.route(*self._key(obj), port, True, where.get("unixSocket"))
        if not self.proxy.serving():
            transition(self.client, obj, ExportPhase.PENDING, "Starting", PROXY_STARTING, fields)
            return Result.requeue(POLL_SECONDS)
        bases = LinkSettings(
            internalUrl=f"https://{HOST}:{port}",
            externalUrl=self.proxy.external_url(*self._key(obj)),
        )
        fields["links"] = bases.point_links(self.certs.ca_pem().decode(), point.volumes)
        message = f"serving the point of VirtualMachineBackup {name} through {self.proxy.base_url}"
        transition(self.client, obj, ExportPhase.READY, "ExportReady", message, fields)
        return Result.requeue(max(min(CHECK_SECONDS, left), POLL_SECONDS / 10))

    def _pending(
        self, obj: VirtualMachineExport, reason: str, message: str, fields: dict[str, Any]
    ) -> Result:
        transition(self.client, obj, ExportPhase.PENDING, reason, message, fields)
        return Result.requeue(WAIT_SECONDS)

    def _idle(
        self, obj: VirtualMachineExport, reason: str, message: str, fields: dict[str, Any]
    ) -> Result:
        """Pending with nothing served: the route dropped, the server stopped, no links."""
        self._unserve(obj)
        return self._pending(obj, reason, message, {**fields, **UNLINKED})

    def _serve(
        self,
        obj: VirtualMachineExport,
        served: Served,
        token: Token,
        fields: dict[str, Any],
        left: float,
    ) -> Result:
        job_id = self.job_id(obj)
        state = self.runner.state(job_id)
        if state is not None and not state.running:
            if (state.result or {}).get("ended") == "expired":
                return self._expire(obj)
            log.warning("%s: its export server ended unexpectedly: starting it again", tag(obj))
            self.client.event(obj, "Warning", "ServerRestarted", "the export server ended")
            self.imports.finish(job_id, tag(obj), keep=False)
            if state.failed and state.result is not None:  # started again after a backoff
                reason = state.result.get("reason")
                message = f"the export server failed: {reason}: {state.result.get('message')}"
                return Result.failed(ExportServerError(message))
            state = None
        if state is None:
            obj, port = recorded_port(self.client, obj)
            self._start(obj, served, token, port, left)
            self.proxy.route(*self._key(obj), port, ready=False)
            return self._pending(obj, "Starting", STARTING, fields)
        recorded = obj.metadata.annotations.get(PORT_ANNOTATION)
        if recorded is None:  # the annotation was removed: serve again on a port recorded
            self.imports.stop(job_id)
            return Result.requeue(STOP_POLL)
        port = int(recorded)
        if self.runner.read_file(job_id, TOKEN_FILE) != token.value:
            self.runner.write_file(job_id, TOKEN_FILE, token.value)
        self.certs.renew(self.runner, job_id, [HOST])
        links = self._links(job_id)
        where = where_listening(self, job_id)
        if links is None or where is None or not answers(port, self.certs.ca_pem()):
            transition(self.client, obj, ExportPhase.PENDING, "Starting", STARTING, fields)
            return Result.requeue(POLL_SECONDS)
        self.proxy.route(*self._key(obj), port, True, where.get("unixSocket"))
        if not self.proxy.serving():
            transition(self.client, obj, ExportPhase.PENDING, "Starting", PROXY_STARTING, fields)
            return Result.requeue(POLL_SECONDS)
        message = f"serving on https://{HOST}:{port} and through {self.proxy.base_url}"
        fields["links"] = links
        transition(self.client, obj, ExportPhase.READY, "ExportReady", message, fields)
        renewal = self.certs.seconds_to_renewal(self.runner, job_id)
        return Result.requeue(max(min(CHECK_SECONDS, left, renewal), POLL_SECONDS / 10))

    def _key(self, obj: VirtualMachineExport) -> tuple[str, str]:
        return obj.metadata.namespace or "", obj.metadata.name or ""

    def _start(
        self,
        obj: VirtualMachineExport,
        served: Served,
        token: Token,
        port: int,
        left: float,
    ) -> None:
        """Start the server of the served volumes; a VM's with its manifest."""
        volumes = [
            ExportVolumeSpec(name=volume, path=source.location) for volume, source in served.volumes
        ]
        fields: dict[str, Any] = {"name": obj.metadata.name, "volumes": volumes}
        files = []
        if served.vm is not None:
            fields["manifest"] = MANIFEST_FILE
            files.append(JobFile(MANIFEST_FILE, vm_manifest(served.vm, served.disks)))
        route = self._key(obj)
        start_server(self, self.job_id(obj), route, port, left, token, ExportJob, fields, files)

    def _links(self, job_id: str) -> dict[str, Any] | None:
        """The links the server wrote, in the status's shape; None before it wrote them."""
        text = self.runner.read_file(job_id, LINKS_FILE)
        if text is None:
            return None
        found = json.loads(text)
        shaped = {
            side: {key: found[side][key] for key in ("cert", "volumes", "manifests")}
            for side in ("internal", "external")
        }
        return ExportLinks.model_validate(shaped).to_json()

    def _unserve(self, obj: VirtualMachineExport) -> bool:
        """Drop the export's route and stop its server; False while the server still runs."""
        self.proxy.drop_route(*self._key(obj))
        return stop_server(self, self.job_id(obj))

    def _expire(self, obj: VirtualMachineExport) -> Result:
        """The TTL is reached: the server stopped, Terminated without links, then the export
        deleted, as KubeVirt does."""
        if not self._unserve(obj):
            return Result.requeue(STOP_POLL)
        if status_of(obj).get("phase") != ExportPhase.TERMINATED:
            log.info("%s: its TTL is reached: its server is stopped, deleting it", tag(obj))
            message = "the export's TTL is reached: its server is stopped"
            obj = transition(self.client, obj, ExportPhase.TERMINATED, "Expired", message, UNLINKED)
        self.client.delete(VirtualMachineExport, obj.metadata.namespace, obj.metadata.name or "")
        return Result.done()

    def _terminate(self, obj: VirtualMachineExport) -> Result:
        if status_of(obj).get("phase") != ExportPhase.TERMINATED:
            obj = transition(
                self.client, obj, ExportPhase.TERMINATED, "Terminating", "being deleted", UNLINKED
            )
        if not self._unserve(obj):
            return Result.requeue(STOP_POLL)
        release(self.client, obj)
        return Result.done()
