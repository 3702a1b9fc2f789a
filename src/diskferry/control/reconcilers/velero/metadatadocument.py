"""The metadata a Backup keeps in its repository once its uploads ended: the manifests of the
VMs backed up, of their VirtualDisks (with the snapshot of each whose data moved; a KubeVirt
VM's claims, by name, with theirs), of the images the filters take, the Backup's own manifest
and final status, and each VM's tracker (`trackers`, by the VM's name in the repository, put in
by the worker that stores it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from diskferry.backup import StoredMetadata
from diskferry.control.host.points import HostedMachine
from diskferry.control.reconcilers.datamover.dataupload import repository_vm
from diskferry.control.reconcilers.velero.manifests import clean_manifest, metadata_name
from diskferry.control.reconcilers.velero.selection import ClusterImages, Taken
from diskferry.control.resources.backup import Backup
from diskferry.control.resources.model import API_VERSION, Resource
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualimage import ClusterVirtualImage, VirtualImage
from diskferry.control.resources.virtualmachine import VirtualMachine
from diskferry.control.runtime.client import Client

Volumes = list[dict[str, Any]]
Machines = dict[tuple[str, str], bool]


def _images(client: Client, taken: Taken, volumes: Volumes, vms: Machines) -> list[dict]:
    """The manifests of the images the filters take: the VirtualImages and the related
    ClusterVirtualImages the VMs backed up mount, or every ClusterVirtualImage."""
    wanted: dict[tuple[str, str | None, str], Resource | None] = {}
    for entry in volumes:
        if not vms.get((entry["namespace"], entry["virtualMachine"])):
            continue
        if entry["kind"] == VirtualImage.__name__ and taken.images:
            key = (entry["kind"], entry["namespace"], entry["name"])
            wanted[key] = client.get(VirtualImage, entry["namespace"], entry["name"])
        elif (
            entry["kind"] == ClusterVirtualImage.__name__
            and taken.cluster_images is ClusterImages.RELATED
        ):
            key = (entry["kind"], None, entry["name"])
            wanted[key] = client.get(ClusterVirtualImage, None, entry["name"])
    if taken.cluster_images is ClusterImages.ALL:
        for image in client.list(ClusterVirtualImage):
            wanted[(ClusterVirtualImage.__name__, None, image.metadata.name or "")] = image
    return [
        {"kind": kind, "name": name, "manifest": clean_manifest(found.to_json())}
        for (kind, _, name), found in sorted(wanted.items(), key=lambda i: str(i[0]))
        if found is not None
    ]


def _disks(
    client: Client, taken: Taken, volumes: Volumes, namespace: str, vm: str
) -> list[dict[str, Any]]:
    """The VM's VirtualDisks the filters take, whose data moved or was not to move."""
    disks = []
    for entry in volumes:
        if (entry["namespace"], entry["virtualMachine"]) != (namespace, vm):
            continue
        if entry["kind"] != VirtualDisk.__name__ or not taken.disks:
            continue
        if entry["phase"] not in ("Completed", "Skipped"):
            continue
        disk = client.get(VirtualDisk, namespace, entry["name"])
        kept = {
            "name": entry["name"],
            "manifest": clean_manifest({} if disk is None else disk.to_json()),
        }
        if entry.get("snapshotID"):
            kept["snapshotID"] = entry["snapshotID"]
        disks.append(kept)
    return disks


def _claims(volumes: Volumes, namespace: str, vm: str) -> list[dict[str, Any]]:
    """The claims of a KubeVirt VM, each with the snapshot of its data when it moved."""
    claims = []
    for entry in volumes:
        if (entry["namespace"], entry["virtualMachine"]) != (namespace, vm):
            continue
        if entry["kind"] == VirtualDisk.__name__ or entry["phase"] not in ("Completed", "Skipped"):
            continue
        kept = {"name": entry["name"]}
        if entry.get("snapshotID"):
            kept["snapshotID"] = entry["snapshotID"]
        claims.append(kept)
    return claims


def backup_document(
    client: Client,
    backup: Backup,
    taken: Taken,
    volumes: Volumes,
    vms: Machines,
    status: dict[str, Any],
    hosted: Sequence[HostedMachine] = (),
) -> StoredMetadata:
    """The Backup's metadata, with `status` as its final status, as a worker stores it in the
    repository with the trackers of the VMs backed up: diskferry's, with their VirtualDisks,
    and those of `hosted` (a cluster's KubeVirt), with their claims."""
    machines = []
    trackers = []
    by_name = {(m.namespace, m.name): m for m in hosted}
    for (namespace, name), good in vms.items():
        vm = client.get(VirtualMachine, namespace, name)
        machine = by_name.get((namespace, name))
        if not good or (vm is None and machine is None):
            continue
        if vm is not None:
            manifest = clean_manifest(vm.to_json())
            disks = _disks(client, taken, volumes, namespace, name)
        else:
            assert machine is not None
            manifest = clean_manifest(machine.manifest)
            disks = _claims(volumes, namespace, name)
        machines.append({"manifest": manifest, "disks": disks})
        trackers.append(repository_vm(namespace, name))
    kept = {k: v for k, v in status.items() if k not in ("conditions", "observedGeneration")}
    document = {
        "apiVersion": API_VERSION,
        "kind": "BackupMetadata",
        "backup": clean_manifest(backup.to_json()),
        "status": kept,
        "storageLocation": backup.spec.storage_location,
        "virtualMachines": machines,
        "images": _images(client, taken, volumes, vms),
    }
    name = metadata_name(backup.metadata.namespace or "default", backup.metadata.name or "")
    return StoredMetadata(name=name, document=document, trackers=trackers)
