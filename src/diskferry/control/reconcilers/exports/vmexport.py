"""VirtualMachineExport, as KubeVirt has it: a Ready disk or snapshot served over HTTPS with a
token, inside (the internal link) and through the export proxy (the external one), until the
export is deleted at its TTL.

Each export's server is an export worker placed by the host's export servers (`host.servers`):
on this machine, on 127.0.0.1 with a port of its own, kept in an annotation so that a server
started again keeps its links, and also on a Unix socket of its own that the proxy's route
names, so that the proxy reaches it without TLS; in a cluster, on 8443 of its Pod behind a
headless Service that the proxy finds by the export's name. The worker gets its certificate
(from the servers' CA, short-lived, renewed at half its life) and its token as files, and the
base URLs its manifests point at in its job; `status.links` are the reconciler's, from where
the server is placed, the external ones only while clients elsewhere can reach the proxy
(otherwise the condition ExternalLinks says why).
Phases: Pending (the source or the token is not there yet, or the server is starting), Ready
(the server answers), Terminated (the TTL is reached or the export is being deleted: its
server stopped, its links removed), Skipped (a KubeVirt kind with no counterpart here, until
the TTL). What each source serves, KubeVirt's kinds mapped to diskferry's, is
`exportsources`'s. A VirtualMachine's VirtualDisks are served together while the VM is
stopped; a VM that runs keeps its export Pending, as KubeVirt does, since its disks change
under the readers. Time is the reconciler's clock, the store's in the daemon.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from diskferry.base.errors import DiskferryError
from diskferry.control.clock import Clock, rfc3339
from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.images import ImageStore
from diskferry.control.host.proxy import ExportProxy, Outside
from diskferry.control.host.servers import (
    LOOPBACK,
    PORT_ANNOTATION,
    ExportServers,
    ServerPlace,
    answers,
)
from diskferry.control.host.volumes import Volumes
from diskferry.control.reconcilers.disks.claimlife import POLL_SECONDS, WAIT_SECONDS
from diskferry.control.reconcilers.disks.datasources import Waiting
from diskferry.control.reconcilers.disks.importjob import Imports
from diskferry.control.reconcilers.disks.teardown import STOP_POLL
from diskferry.control.reconcilers.exports.exportbackup import NotServed, served_point
from diskferry.control.reconcilers.exports.exportmanifest import MANIFEST_FILE, vm_manifest
from diskferry.control.reconcilers.exports.exportsources import SKIPPED, ExportSources, Served
from diskferry.control.reconcilers.exports.exporttoken import TOKEN_NOT_READY, Token, export_token
from diskferry.control.resources.model import Reason, Resource
from diskferry.control.resources.vmexport import (
    EXTERNAL_LINKS,
    VIRTUAL_MACHINE_EXPORTS,
    ExportLinks,
    ExportPhase,
    ExportSourceKind,
    VirtualMachineExport,
)
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.finalizer import deleting, held, release
from diskferry.control.runtime.phases import (
    STARTING,
    TERMINATING,
    Condition,
    status_of,
    transition,
)
from diskferry.control.runtime.progress import job_details
from diskferry.control.runtime.reconciler import Result, tag
from diskferry.control.runtime.runner.base import JobFile, Runner
from diskferry.export import ExportJob, ExportVolumeSpec, LinkSettings

log = logging.getLogger("diskferry.control")
M = TypeVar("M", bound=Resource)
HOST = LOOPBACK
TOKEN_FILE = "token"
LINKS_FILE = "links.json"
DRAIN_SECONDS = 10.0
CHECK_SECONDS = 5.0
SERVER_STARTING = "the export server is starting"
PROXY_STARTING = "the export proxy is starting"
UNLINKED = {"links": None}
NOT_SERVED = Reason("SourceNotServed")
EXPIRED = Reason("Expired")


class ExportServerError(DiskferryError):
    """An export's server ended with a failure."""

    reason = "ExportServerFailed"


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
    place: ServerPlace,
    left: float,
    token: Token,
    model: type[ExportJob],
    fields: dict[str, Any],
    files: Sequence[JobFile] = (),
    links_file: str | None = LINKS_FILE,
) -> None:
    """Start the export worker `job_id`, a `model` job of `fields` (its name, volumes and own
    fields), where `place` says (and on its Unix socket) for `left` seconds, with the token, a
    certificate for the place's names, links through the proxy's `route` (namespace, name),
    written to `links_file` when one is named, and `files` its job names."""
    links = LinkSettings(
        internal_url=place.url,
        external_url=keeper.proxy.external_url(*route),
        external_ca=keeper.certs.ca_file,
        file=links_file,
    )
    job = model(
        **fields,
        token_file=TOKEN_FILE,
        ttl=left,
        grace=DRAIN_SECONDS,
        cert_dir=".",
        sans=list(place.sans),
        listen_address=place.address,
        listen_port=place.port,
        links=links,
        unix_socket=keeper.proxy.server_socket(job_id),
    )
    given = [*keeper.certs.job_files(place.sans), JobFile(TOKEN_FILE, token.value), *files]
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
        servers: ExportServers,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.runner = runner
        self.volumes = volumes
        self.certs = certs
        self.proxy = proxy
        self.servers = servers
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
            "serviceName": self.servers.service_name(obj),
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
            return self._idle(obj, TOKEN_NOT_READY, token, fields)
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
            return self._idle(obj, STARTING, message, fields)
        self.proxy.route(*self._key(obj), port, True, where.get("unixSocket"))
        if not self.proxy.serving():
            transition(self.client, obj, ExportPhase.PENDING, STARTING, PROXY_STARTING, fields)
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
            obj, place = self.servers.place(obj, job_id)
            self._start(obj, served, token, place, left)
            self.servers.expose(obj, job_id)
            self.proxy.route(*self._key(obj), place.port, ready=False)
            return self._pending(obj, STARTING, SERVER_STARTING, fields)
        found = self.servers.placed(obj)
        if found is None:  # where it listens is lost: serve again, placed anew
            self.imports.stop(job_id)
            return Result.requeue(STOP_POLL)
        place = found
        if self.runner.read_file(job_id, TOKEN_FILE) != token.value:
            self.runner.write_file(job_id, TOKEN_FILE, token.value)
        self.certs.renew(self.runner, job_id, place.sans)
        self.servers.expose(obj, job_id)
        where = where_listening(self, job_id)
        ca = self.certs.ca_pem()
        if where is None or not self.servers.answers(obj, job_id, place, ca):
            transition(self.client, obj, ExportPhase.PENDING, STARTING, SERVER_STARTING, fields)
            return Result.requeue(POLL_SECONDS)
        self.proxy.route(*self._key(obj), place.port, True, where.get("unixSocket"))
        if not self.proxy.serving():
            transition(self.client, obj, ExportPhase.PENDING, STARTING, PROXY_STARTING, fields)
            return Result.requeue(POLL_SECONDS)
        outside = self.proxy.outside()
        links, external = self._links(obj, served, place, ca.decode(), outside)
        message = f"serving on {place.url} and through {self.proxy.base_url}"
        fields["links"] = links
        transition(
            self.client,
            obj,
            ExportPhase.READY,
            "ExportReady",
            message,
            fields,
            conditions={EXTERNAL_LINKS: external},
        )
        renewal = self.certs.seconds_to_renewal(self.runner, job_id)
        return Result.requeue(max(min(CHECK_SECONDS, left, renewal), POLL_SECONDS / 10))

    def _key(self, obj: VirtualMachineExport) -> tuple[str, str]:
        return obj.metadata.namespace or "", obj.metadata.name or ""

    def _start(
        self,
        obj: VirtualMachineExport,
        served: Served,
        token: Token,
        place: ServerPlace,
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
        job_id = self.job_id(obj)
        start_server(self, job_id, route, place, left, token, ExportJob, fields, files, None)

    def _links(
        self,
        obj: VirtualMachineExport,
        served: Served,
        place: ServerPlace,
        ca: str,
        outside: Outside | str,
    ) -> tuple[dict[str, Any], Condition | None]:
        """The export's links in the status's shape: inside, with the servers' CA, and from
        outside when clients elsewhere reach the proxy; else the condition that says why not."""
        disks = [name for name, _ in served.volumes]
        has_manifest = served.vm is not None
        external = place.url if isinstance(outside, str) else outside.export_url(*self._key(obj))
        bases = LinkSettings(internalUrl=place.url, externalUrl=external)
        sides = {"internal": bases.disk_links("internal", ca, disks, has_manifest)}
        if isinstance(outside, str):
            return ExportLinks.model_validate(sides).to_json(), (False, "NoExternalHost", outside)
        sides["external"] = bases.disk_links("external", outside.ca, disks, has_manifest)
        return ExportLinks.model_validate(sides).to_json(), None

    def _unserve(self, obj: VirtualMachineExport) -> bool:
        """Drop the export's route and stop its server, then remove what exposed it; False
        while the server still runs."""
        self.proxy.drop_route(*self._key(obj))
        if not stop_server(self, self.job_id(obj)):
            return False
        self.servers.unexpose(obj)
        return True

    def _expire(self, obj: VirtualMachineExport) -> Result:
        """The TTL is reached: the server stopped, Terminated without links, then the export
        deleted, as KubeVirt does."""
        if not self._unserve(obj):
            return Result.requeue(STOP_POLL)
        if status_of(obj).get("phase") != ExportPhase.TERMINATED:
            log.info("%s: its TTL is reached: its server is stopped, deleting it", tag(obj))
            message = "the export's TTL is reached: its server is stopped"
            obj = transition(self.client, obj, ExportPhase.TERMINATED, EXPIRED, message, UNLINKED)
        self.client.delete(VirtualMachineExport, obj.metadata.namespace, obj.metadata.name or "")
        return Result.done()

    def _terminate(self, obj: VirtualMachineExport) -> Result:
        if status_of(obj).get("phase") != ExportPhase.TERMINATED:
            obj = transition(
                self.client, obj, ExportPhase.TERMINATED, TERMINATING, "being deleted", UNLINKED
            )
        if not self._unserve(obj):
            return Result.requeue(STOP_POLL)
        release(self.client, obj)
        return Result.done()
