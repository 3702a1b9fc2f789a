"""The manifest an export of a VirtualMachine serves as `all`, as KubeVirt's export serves the VM
and the DataVolumes that import its disks from it: what a user applies elsewhere to make the
VM again.

The VM as its user wrote it (name, namespace, labels, annotations and spec, no status), and
each of its VirtualDisks with its size, filled over HTTP from this export's gzip URL of that
disk. The URL is left relative (`volumes/<disk>/disk.img.gz`): the export server points it at
the side asked for, with the token and that side's CA.
"""

from __future__ import annotations

from typing import Any

import yaml

from diskferry.control.resources.model import Resource
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualmachine import VirtualMachine

MANIFEST_FILE = "manifest.yaml"


def _document(obj: Resource, spec: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": obj.metadata.name, "namespace": obj.metadata.namespace}
    if obj.metadata.labels:
        meta["labels"] = obj.metadata.labels
    if obj.metadata.annotations:
        meta["annotations"] = obj.metadata.annotations
    return {"apiVersion": obj.api_version, "kind": obj.kind, "metadata": meta, "spec": spec}


def disk_document(disk: VirtualDisk) -> dict[str, Any]:
    """The VirtualDisk made again from this export: its size (as asked, else as it came out),
    its data from the export's gzip URL of it."""
    size = disk.spec.persistent_volume_claim.size or disk.status.capacity
    spec: dict[str, Any] = {"persistentVolumeClaim": {"size": size}} if size else {}
    url = f"volumes/{disk.metadata.name}/disk.img.gz"
    spec["dataSource"] = {"type": "HTTP", "http": {"url": url}}
    return _document(disk, spec)


def vm_manifest(vm: VirtualMachine, disks: list[VirtualDisk]) -> bytes:
    """The VM and its disks, as YAML documents."""
    documents = [_document(vm, vm.to_json()["spec"])]
    documents += [disk_document(disk) for disk in disks]
    return yaml.safe_dump_all(documents, sort_keys=False).encode()
