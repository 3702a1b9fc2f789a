"""The volumes of the StorageClasses as reconcilers see them: claims the host makes, finds and
removes (files and loop devices in the embedded host, PVCs in a cluster). What writes a claim's
bytes (blank, grow, import, clone) is a job a worker runs, never the host."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from diskferry.base.errors import DiskferryError
from diskferry.control.resources.storageclass import PROVISIONER

FILE = "file"
BLOCK = "block"
READ_WRITE_ONCE = "ReadWriteOnce"


class VolumeError(DiskferryError):
    """A claim could not be made, found or removed."""

    reason = "VolumeFailed"


class ExpansionRefusedError(VolumeError):
    """The claim's storage may not grow: its StorageClass does not allow volume expansion."""

    reason = "VolumeExpansionNotAllowed"


class ProvisionerUnavailableError(VolumeError):
    """This host cannot make claims of the class: its provisioner is another's (a cluster's)."""

    reason = "ProvisionerUnavailable"


@dataclass(frozen=True)
class VolumeClass:
    """Where a StorageClass keeps its claims (`root`, else the host's own place for the class),
    of which type (file or block: a claim's volume mode), who makes them (`provisioner`) and how
    workers may share one (`access_mode`, as a PVC asks for it)."""

    name: str
    type: str = FILE
    root: Path | None = None
    retain: bool = False
    provisioner: str = PROVISIONER
    access_mode: str = READ_WRITE_ONCE

    @property
    def block(self) -> bool:
        """Whether claims are block devices."""
        return self.type == BLOCK


@dataclass(frozen=True)
class Expansion:
    """Where the growth of a claim's storage stands: `done` once the storage has room for the
    disk, else what it waits for (`message`); and whether a worker then grows the disk itself
    (`grows_disk`: a file, and its loop device on this host; not a cluster's Block volume,
    which is the disk)."""

    done: bool
    grows_disk: bool
    message: str = ""


class Claim(Protocol):
    """One claim: the file behind it and the path workers write (the file, or its device)."""

    @property
    def volume_class(self) -> VolumeClass:
        """The class the claim is of."""

    @property
    def namespace(self) -> str:
        """The namespace the claim is in."""

    @property
    def name(self) -> str:
        """The claim's name."""

    @property
    def file(self) -> Path:
        """The file that holds the claim's bytes."""

    @property
    def path(self) -> str:
        """What a worker writes: the file, or the block device over it."""

    @property
    def block(self) -> bool:
        """Whether the claim is a block device."""

    @property
    def ready(self) -> bool:
        """Whether the claim holds a disk (a file claim exists only once written whole)."""

    def allocated(self) -> int:
        """The bytes the claim takes on its storage."""

    def size(self) -> int:
        """The bytes the claim holds (0 while a file claim is not written)."""


class Volumes(Protocol):
    """Makes, finds and removes the claims of StorageClasses; VolumeError when it cannot."""

    def block_unavailable(self) -> str | None:
        """Why block claims cannot be made here, None when they can."""

    def sized_claims(self) -> bool:
        """Whether a file claim is made with its size, which what writes it cannot pass (a
        PVC), rather than taking the size of what a job writes into it (a file)."""

    def claim(self, volume_class: VolumeClass, namespace: str, name: str, size: int) -> Claim:
        """Make the claim of `size` bytes, or find it made (a file claim holds no file until a
        job writes it whole)."""

    def find(self, volume_class: VolumeClass, namespace: str, name: str) -> Claim | None:
        """The claim when it was made."""

    def locate(self, classes: Iterable[VolumeClass], namespace: str, name: str) -> Claim | None:
        """The claim `name` in whichever of `classes` holds it, None when none does."""

    def remove(self, volume_class: VolumeClass, namespace: str, name: str) -> None:
        """Remove the claim and whatever was made beside it (its CBT overlay)."""

    def expand(self, claim: Claim, size: int) -> Expansion:
        """Ask the claim's storage for room for a disk of `size` bytes (never less than it
        has), and say where that stands; ExpansionRefusedError when its class may not grow."""

    def resized(self, claim: Claim, size: int) -> None:
        """Record that the claim's disk now holds `size` bytes, once it was grown."""

    def seal(self, claim: Claim) -> None:
        """Make the claim a worker wrote the host's alone (its writer had its own umask)."""

    def writable(self, claim: Claim) -> bool:
        """Whether a worker can write the claim now: a file or device of this host at once, a
        claim of a cluster once a volume backs it (its own, or its prime's)."""

    def instant_copies(self, claim: Claim) -> bool:
        """Whether the claim can be copied at an instant (reflink) into another of its class."""

    def shared_host(self) -> bool:
        """Whether every claim is on the host every worker runs on, so that a worker reads
        another claim's file as it is; False in a cluster, where a claim is reached from the
        node its volume is attached to, and a copy between claims reads its source over NBD
        from a worker beside it."""

    def tracked(self, claim: Claim) -> bool:
        """Whether the claim has its changed-block-tracking overlay."""
