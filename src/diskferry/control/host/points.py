"""The VMs a cluster's hypervisor runs (KubeVirt's), as backups and restores see them: the VMs a
Backup picks from, each disk named by its claim; backup points, a Pull VirtualMachineBackup
through a VirtualMachineBackupTracker whose disks' `map` and `data` endpoints behind a token a
DataUpload's backup worker reads into the repository; and a restored VM held halted until its
disks are back, as OADP holds it. The embedded host has none of them: it runs its VMs itself
(`machines`), and its DataUploads read their disks themselves."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from diskferry.base.errors import DiskferryError


class PointError(DiskferryError):
    """A backup point could not be made, or failed before it was read."""

    reason = "BackupPointFailed"


@dataclass(frozen=True)
class HostedMachine:
    """A VM of the hypervisor: where, its labels, each of its volumes' claims (by volume), and
    its manifest."""

    namespace: str
    name: str
    labels: dict[str, str]
    claims: dict[str, str]
    manifest: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class ServedDisk:
    """One disk of a point: its claim's name, its endpoints, and the checkpoint its map shows
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
    """Lists the hypervisor's VMs, makes, follows and ends their backup points, and holds a
    restored one halted."""

    def machines(self) -> list[HostedMachine]:
        """Every VM the hypervisor runs."""

    def hold(self, namespace: str, manifest: dict[str, Any]) -> str | None:
        """Make the VM of `manifest` in `namespace` halted, its own run strategy kept to be
        given back; that strategy, None when a VM of that name is there already (it is left as
        it is)."""

    def give_back(self, namespace: str, name: str) -> str | None:
        """Give the VM held by `hold` its own run strategy again; the strategy, None when the
        VM is gone or was not held."""

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
