"""What a VirtualMachineExport's source serves: the volumes of a disk, a snapshot or a stopped
VirtualMachine, with KubeVirt's kinds mapped to diskferry's, or why the export waits or is
Skipped.

KubeVirt's `kubevirt.io` VirtualMachine is the VirtualMachine; a PersistentVolumeClaim is the
VirtualDisk whose claim it is (named `vd-<disk>-<uid>`, as the disk's
`status.target.persistentVolumeClaimName` shows it), else the VirtualDisk of that name, and
is served under the claim's name; a VirtualMachineSnapshot or a VirtualMachineTemplate has no
counterpart here, so the export is Skipped with what to export instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diskferry.control.host.images import ImageStore
from diskferry.control.host.volumes import Volumes
from diskferry.control.reconcilers.disks.datasources import Waiting, claim_name, resolve_source
from diskferry.control.reconcilers.disks.importjob import Source
from diskferry.control.reconcilers.disks.inuse import disk_holders, holds_disks, names
from diskferry.control.resources.common import DataSource, DataSourceType, ObjectRef
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualmachine import BlockDeviceKind, VirtualMachine
from diskferry.control.resources.vmexport import ExportSource, ExportSourceKind
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.phases import STILL_IN_USE

SKIPPED = {
    ExportSourceKind.VIRTUAL_MACHINE_SNAPSHOT: (
        "there is no VirtualMachineSnapshot kind here: a VM's disks are snapshotted one by "
        "one, as VirtualDiskSnapshots; export each VirtualDiskSnapshot (apiGroup diskferry.io), "
        "or the stopped VirtualMachine"
    ),
    ExportSourceKind.VIRTUAL_MACHINE_TEMPLATE: (
        "there is no VirtualMachineTemplate kind here: export the VirtualMachine "
        "(apiGroup kubevirt.io) instead"
    ),
}
"""Why an export of each of KubeVirt's kinds with no counterpart here is Skipped."""


@dataclass(frozen=True)
class Served:
    """The volumes to serve, by name; for a VirtualMachine, the VM and its VirtualDisks."""

    volumes: list[tuple[str, Source]]
    vm: VirtualMachine | None = None
    disks: list[VirtualDisk] = field(default_factory=list)


def claimed_disk(client: Client, namespace: str | None, claim: str) -> VirtualDisk | None:
    """The VirtualDisk whose claim is named `claim` (its name and uid make the claim's name),
    else the VirtualDisk named `claim`; None when there is neither."""
    for disk in client.list(VirtualDisk, namespace):
        if claim_name(disk) == claim:
            return disk
    return client.get(VirtualDisk, namespace, claim)


class ExportSources:
    """Resolves an export's source against the store and the claims."""

    def __init__(self, client: Client, volumes: Volumes, store: ImageStore) -> None:
        self.client = client
        self.volumes = volumes
        self.store = store

    def served(self, namespace: str | None, source: ExportSource) -> Served | Waiting:
        """The volumes `source` serves, or why they cannot be served yet."""
        kind, name = source.kind, source.name
        if kind is ExportSourceKind.VIRTUAL_MACHINE:
            return self._machine(namespace, name)
        if kind is ExportSourceKind.PERSISTENT_VOLUME_CLAIM:
            disk = claimed_disk(self.client, namespace, name)
            if disk is None:
                return Waiting(
                    f"waiting for the PersistentVolumeClaim {name}: no VirtualDisk has a claim "
                    "of that name, nor that name"
                )
            return self._disk(namespace, disk.metadata.name or "", name)
        if kind is ExportSourceKind.VIRTUAL_DISK:
            return self._disk(namespace, name, name)
        return self._volume(namespace, str(kind), name, name)

    def _disk(self, namespace: str | None, disk: str, volume: str) -> Served | Waiting:
        """The VirtualDisk `disk` served as `volume`, unless a running VM holds it."""
        holders = disk_holders(self.client, namespace, disk)
        if holders:
            message = (
                f"the VirtualDisk {disk} is in use by the running VirtualMachine "
                f"{names(holders)}: stop it to export"
            )
            return Waiting(message, STILL_IN_USE)
        return self._volume(namespace, ExportSourceKind.VIRTUAL_DISK.value, disk, volume)

    def _machine(self, namespace: str | None, name: str) -> Served | Waiting:
        """A stopped VM's VirtualDisks, each under its own name."""
        vm = self.client.get(VirtualMachine, namespace, name)
        if vm is None:
            return Waiting(f"waiting for the VirtualMachine {name}: it does not exist")
        if holds_disks(vm):
            message = f"the VirtualMachine {name} is {vm.status.phase}: stop it to export"
            return Waiting(message, STILL_IN_USE)
        refs = [r.name for r in vm.spec.block_device_refs if r.kind is BlockDeviceKind.VIRTUAL_DISK]
        if not refs:
            return Waiting(f"the VirtualMachine {name} has no VirtualDisk to export")
        volumes = []
        for ref in refs:
            volume = self._volume(namespace, BlockDeviceKind.VIRTUAL_DISK.value, ref, ref)
            if isinstance(volume, Waiting):
                return volume
            volumes.extend(volume.volumes)
        found = (self.client.get(VirtualDisk, namespace, ref) for ref in refs)
        disks = [disk for disk in found if disk is not None]
        return Served(volumes, vm, disks)

    def _volume(self, namespace: str | None, kind: str, name: str, volume: str) -> Served | Waiting:
        """The claim of the disk or snapshot `name`, served as `volume`, or why it waits."""
        ref = ObjectRef(kind=kind, name=name)
        data_source = DataSource(type=DataSourceType.OBJECT_REF, objectRef=ref)
        source = resolve_source(self.client, self.volumes, self.store, namespace, data_source)
        return source if isinstance(source, Waiting) else Served([(volume, source)])
