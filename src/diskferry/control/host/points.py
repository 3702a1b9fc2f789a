"""Backup points that a VM's hypervisor serves, as reconcilers see them: in a cluster, KubeVirt's
Pull VirtualMachineBackup through a VirtualMachineBackupTracker, each disk's `map` and `data`
endpoints behind a token, which a DataUpload's backup worker reads into the repository. The
embedded host serves none: its DataUploads read their VMs' disks themselves."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from diskferry.base.errors import DiskferryError


class PointError(DiskferryError):
    """A backup point could not be made, or failed before it was read."""

    reason = "BackupPointFailed"


@dataclass(frozen=True)
class ServedDisk:
    """One disk of a point: its volume's name, its endpoints, and the checkpoint its map shows
    the changes since (None: served full)."""

    name: str
    data: str
    map: str
    since: str | None = None


@dataclass(frozen=True)
class ServedPoint:
    """A point that answers: what serves it (for messages), its disks, its token and the CA of
    its server's certificate, the checkpoint it made, and whether its guest was frozen."""

    name: str
    disks: list[ServedDisk]
    token: bytes = field(repr=False)
    ca: bytes
    checkpoint: str | None
    consistency: str


class BackupPoints(Protocol):
    """Makes, follows and ends the backup points of VMs that the host's hypervisor backs up."""

    def point(
        self,
        name: str,
        namespace: str,
        vm: str,
        *,
        chain: str,
        full: bool,
        ttl: float,
    ) -> ServedPoint | str:
        """The point `name` of the VM `namespace/vm`, made when missing (through the VM's
        tracker for `chain`, whose checkpoints it goes on from unless `full`, living at most
        `ttl` seconds), once it answers; until then, what it waits for. PointError when the
        VM is missing, or the point failed or ended before it answered."""

    def release(self, name: str, namespace: str) -> bool:
        """End the point `name`, read or not (its checkpoint then goes into its tracker), and
        remove what was made for it; whether it is all gone."""
