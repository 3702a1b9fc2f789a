"""The controllers: every reconciler and the manager over one data directory.

They reach the objects through an Access: the embedded store's (`Controllers(data_dir,
objects)` with the daemon's ObjectService), or a cluster's API client (diskferry operator).
`Controllers(...).start()` creates the default StorageClasses on a fresh store
and the VirtualMachineClass `generic` when it is missing, re-attaches to the workers a previous
daemon left running (their state is in DATA_DIR/jobs) and starts reconciling and keeping the
export proxy; `stop()` stops both and leaves workers running. The reconcilers tell time by
the access's clock (the store's, the one that stamps the objects they read).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.clock import Clock
from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.embedded.certs import PKI_DIR, DaemonCa
from diskferry.control.host.embedded.imagestore import LayoutImageStore
from diskferry.control.host.embedded.machines import QemuMachines
from diskferry.control.host.embedded.proxy import PROXY_PORT, ProxyKeeper
from diskferry.control.host.embedded.servers import LoopbackServers
from diskferry.control.host.embedded.volumes import DirectoryVolumes
from diskferry.control.host.images import ImageStore
from diskferry.control.host.points import BackupPoints
from diskferry.control.host.proxy import KeptProxy
from diskferry.control.host.servers import ExportServers
from diskferry.control.host.volumes import Volumes
from diskferry.control.reconcilers.datamover.admission import Scheduler
from diskferry.control.reconcilers.datamover.datadownload import DataDownloadReconciler
from diskferry.control.reconcilers.datamover.dataupload import DataUploadReconciler
from diskferry.control.reconcilers.disks.claimlife import ClaimedKind
from diskferry.control.reconcilers.disks.inuse import devices_named
from diskferry.control.reconcilers.disks.storageclasses import ensure_default_classes
from diskferry.control.reconcilers.disks.vdsnapshot import VirtualDiskSnapshotReconciler
from diskferry.control.reconcilers.disks.virtualdisk import VirtualDiskReconciler
from diskferry.control.reconcilers.exports.vdexport import VirtualDataExportReconciler
from diskferry.control.reconcilers.exports.vmexport import VirtualMachineExportReconciler
from diskferry.control.reconcilers.images.clustervirtualimage import ClusterVirtualImageReconciler
from diskferry.control.reconcilers.images.virtualimage import VirtualImageReconciler
from diskferry.control.reconcilers.kvbackup.vmbackup import VirtualMachineBackupReconciler
from diskferry.control.reconcilers.velero.backup import BackupReconciler
from diskferry.control.reconcilers.velero.backupstoragelocation import (
    BackupStorageLocationReconciler,
)
from diskferry.control.reconcilers.velero.restore import RestoreReconciler
from diskferry.control.reconcilers.velero.schedule import ScheduleReconciler
from diskferry.control.reconcilers.vms.virtualmachine import VirtualMachineReconciler
from diskferry.control.reconcilers.vms.vmclass import (
    VirtualMachineClassReconciler,
    ensure_generic_class,
)
from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.virtualmachine import VIRTUAL_MACHINES
from diskferry.control.runtime.client import Client, EmbeddedClient
from diskferry.control.runtime.manager import RESYNC_SECONDS, Manager
from diskferry.control.runtime.reconciler import Reconciler
from diskferry.control.runtime.runner.base import LOG_LINES, Runner
from diskferry.control.runtime.runner.local import LocalRunner
from diskferry.control.runtime.source import Source, StoreSource


@dataclass(frozen=True)
class Access:
    """How the controllers reach the objects: a client to read and write them, a source that
    lists them and follows their changes, and the clock their times are told by."""

    client: Client
    source: Source
    clock: Clock


def embedded(objects: ObjectService) -> Access:
    """The embedded store's access: its client, its watch, its clock."""
    return Access(EmbeddedClient(objects, objects.registry), StoreSource(objects), objects.clock)


class Controllers:
    """The reconcilers of the disk, image (claimed and stored) and snapshot kinds (and any
    `extra`), and their manager; their workers run through `runner`, their claims are made by
    `volumes`, their images kept in `store`, their servers' certificates come from `certs`, the
    export proxy is `proxy`'s and export servers are placed by `servers` (this host's, under the
    data directory, unless others are given: a cluster's Pods, PVCs, image store, Secrets, proxy
    Deployment and Services); with `points` (a cluster's KubeVirt) Backups take its VMs too,
    DataUploads read the backup points it serves, and Restores hold its VMs Halted until their
    claims are back."""

    def __init__(
        self,
        data_dir: Path,
        objects: ObjectService | Access,
        *,
        extra: Sequence[Reconciler] = (),
        workers: int = 4,
        resync: float = RESYNC_SECONDS,
        proxy_port: int = PROXY_PORT,
        certs: ServerCerts | None = None,
        runner: Runner | None = None,
        volumes: Volumes | None = None,
        proxy: KeptProxy | None = None,
        servers: ExportServers | None = None,
        store: ImageStore | None = None,
        points: BackupPoints | None = None,
        owned: Sequence[KindInfo] = (),
    ) -> None:
        access = objects if isinstance(objects, Access) else embedded(objects)
        clock = access.clock
        self.client = access.client
        self.runner: Runner = runner or LocalRunner(data_dir)
        self.volumes: Volumes = volumes or DirectoryVolumes(data_dir)
        self.store: ImageStore = store or LayoutImageStore(data_dir)
        self.machines = QemuMachines(data_dir)
        self.certs: ServerCerts = certs or DaemonCa(Path(data_dir) / PKI_DIR)
        self.proxy: KeptProxy = proxy or ProxyKeeper(self.runner, self.certs, port=proxy_port)
        self.servers: ExportServers = servers or LoopbackServers(self.client)
        parts = (self.client, self.runner, self.volumes)
        owners: list[
            ClaimedKind
            | ClusterVirtualImageReconciler
            | VirtualDiskSnapshotReconciler
            | VirtualMachineExportReconciler
            | VirtualMachineBackupReconciler
        ]
        exports = VirtualMachineExportReconciler(
            *parts, self.store, self.certs, self.proxy, self.servers, clock
        )
        owners = [
            VirtualDiskReconciler(*parts, self.store, self.certs, self.proxy),
            VirtualImageReconciler(*parts, self.store, self.certs, proxy=self.proxy),
            ClusterVirtualImageReconciler(*parts, self.store, self.certs, proxy=self.proxy),
            VirtualDiskSnapshotReconciler(*parts, self.machines),
            exports,
            VirtualMachineBackupReconciler(*parts, self.machines, self.certs, self.proxy, clock),
        ]
        self.scheduler = Scheduler()
        movers = [
            DataUploadReconciler(*parts, self.scheduler, self.machines, points=points),
            DataDownloadReconciler(*parts, self.scheduler),
        ]
        self.job_owners: dict[str, Any] = {r.info.kind: r for r in [*owners, *movers]}
        machines = VirtualMachineReconciler(
            self.client, self.runner, self.volumes, self.store, self.machines, clock
        )
        self.reconcilers: list[Reconciler] = [
            *owners,
            machines,
            VirtualMachineClassReconciler(self.client),
            VirtualDataExportReconciler(self.client, self.runner, exports.job_id, clock),
            *movers,
            BackupStorageLocationReconciler(self.client, self.runner),
            BackupReconciler(self.client, self.runner, clock, points),
            RestoreReconciler(self.client, clock, self.machines, self.runner, points),
            ScheduleReconciler(self.client, self.runner, clock),
            *extra,
        ]
        self.manager = Manager(
            access.source,
            self.client,
            self.reconcilers,
            workers=workers,
            resync=resync,
            related={VIRTUAL_MACHINES.kind: devices_named},
            owned=owned,
        )

    def log_text(self, info: KindInfo, obj: dict[str, Any]) -> str | None:
        """The captured log of `obj`'s worker as text, None when it has none."""
        meta = obj.get("metadata", {})
        lines = self.log_tail(info.kind, meta.get("namespace"), meta.get("name", ""))
        return "".join(f"{line}\n" for line in lines) if lines else None

    def log_tail(
        self, kind: str, namespace: str | None, name: str, lines: int = LOG_LINES
    ) -> list[str]:
        """The last lines the object's worker (a VM's QEMU) logged ([] when it has none)."""
        if kind == VIRTUAL_MACHINES.kind:
            return self.machines.log_tail(namespace or "", name, lines)
        owner = self.job_owners.get(kind)
        obj = None if owner is None else self.client.get(owner.info.model, namespace, name)
        if owner is None or obj is None:
            return []
        return self.runner.log_tail(owner.job_id(obj), lines)

    def start(self) -> None:
        """Create the default StorageClasses if there are none and the VirtualMachineClass
        `generic` if it is missing, and start reconciling."""
        ensure_default_classes(self.client, self.volumes)
        ensure_generic_class(self.client)
        self.proxy.start()
        self.manager.start()

    def stop(self, timeout: float = 60) -> None:
        """Stop reconciling (workers keep running) once the reconciles under way are done."""
        self.manager.stop(timeout)
        self.proxy.stop()
