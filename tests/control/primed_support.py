"""This host's file claims made to behave as a cluster's PVCs in one respect: a claim is ready
only once sealed (its prime's volume handed to it), not once its file is written."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from diskferry.control.host.embedded.volumes import DirectoryVolumes, FileClaim
from diskferry.control.host.volumes import Claim, VolumeClass


@dataclass(frozen=True)
class PrimedClaim(FileClaim):
    """A claim that is ready once sealed, not once its file is written."""

    sealed: bool = False

    @property
    def ready(self) -> bool:
        """Whether the claim was sealed."""
        return self.sealed


class PrimedVolumes(DirectoryVolumes):
    """This host's file claims, each ready only once sealed, as a PVC is."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.sealed: set[str] = set()

    def _primed(self, claim: FileClaim) -> PrimedClaim:
        fields = (claim.volume_class, claim.namespace, claim.name, claim.file, claim.path)
        return PrimedClaim(*fields, sealed=claim.name in self.sealed)

    def claim(self, volume_class: VolumeClass, namespace: str, name: str, size: int) -> FileClaim:
        return self._primed(super().claim(volume_class, namespace, name, size))

    def find(self, volume_class: VolumeClass, namespace: str, name: str) -> FileClaim | None:
        found = super().find(volume_class, namespace, name)
        return None if found is None else self._primed(found)

    def seal(self, claim: Claim) -> None:
        super().seal(claim)
        self.sealed.add(claim.name)
