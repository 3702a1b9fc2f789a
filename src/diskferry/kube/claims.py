"""Where a worker in a Pod finds a claim, and whose the claim is.

A claim `C` of namespace `N` is, in every worker Pod that names it, the folder
`/claims/N/C` holding the disk `disk.img` (a Filesystem PVC mounted there) or the device
`/claims/N/C/disk` (a Block PVC). Those paths are all a job says of the claims it works on: the
Pod runner reads them back from the job to mount each claim, and to put the Pod in its
namespace. Which PVC is mounted for a claim is the cluster's volumes' to say (the prime PVC
while the claim is populated, its own once it holds its disk).

A claim is named by its object's kind, name and uid (`vd-<disk>-<uid>`, see
`control.reconcilers.disks.datasources.claim_name`), so the object that owns it, and owns
the Pods that write it, is known from its name alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from diskferry.control.reconcilers.disks.datasources import CLAIM_PREFIXES
from diskferry.control.resources.model import GROUP, NAME_PATTERN
from diskferry.control.resources.registry import REGISTRY

ROOT = "/claims"
DISK_FILE = "disk.img"
DEVICE = "disk"
_UID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_NAME = NAME_PATTERN.strip("^$").replace("(", "(?:")
_IN_POD = re.compile(
    rf"^{ROOT}/(?P<namespace>{_NAME})/(?P<name>{_NAME})/(?:{re.escape(DISK_FILE)}|{DEVICE})$"
)
_KINDS = {prefix: kind for kind, prefix in CLAIM_PREFIXES.items()}
_CLAIM = re.compile(rf"^({'|'.join(_KINDS)})-(.+)-({_UID})$")


@dataclass(frozen=True)
class NamedClaim:
    """A claim a job names: its namespace and name, and whether the job only reads it."""

    namespace: str
    name: str
    read_only: bool = False


def folder(namespace: str, name: str) -> str:
    """Where a Filesystem claim is mounted in a Pod."""
    return f"{ROOT}/{namespace}/{name}"


def claim_path(namespace: str, name: str, block: bool) -> str:
    """What a worker in a Pod writes of the claim: its device, or the disk in its folder."""
    return f"{folder(namespace, name)}/{DEVICE if block else DISK_FILE}"


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def named_claims(job: dict[str, Any], reads: Iterable[str] = ()) -> list[NamedClaim]:
    """The claims a job file names by their paths in a Pod, each once, in the order named; one
    named only by the fields `reads` is read-only."""
    found: dict[tuple[str, str], bool] = {}
    for field, value in job.items():
        for text in _strings(value):
            match = _IN_POD.match(text)
            if match:
                key = (match["namespace"], match["name"])
                found[key] = found.get(key, True) and field in reads
    return [NamedClaim(namespace, name, only) for (namespace, name), only in found.items()]


def owner(claim: str) -> dict[str, Any] | None:
    """The ownerReference of the disk, image or snapshot whose claim is named `claim`, as its
    controller; None for a name of no such object."""
    match = _CLAIM.match(claim)
    if match is None:
        return None
    info = REGISTRY.by_kind(_KINDS[match[1]], GROUP)
    return {
        "apiVersion": info.api_version,
        "kind": info.kind,
        "name": match[2],
        "uid": match[3],
        "controller": True,
        "blockOwnerDeletion": True,
    }
