"""The VirtualMachineExport a Pull VirtualMachineBackup serves its point through, made as KubeVirt
makes it: named as the backup and owned by it, its source the backup (`backup.kubevirt.io`
VirtualMachineBackup), its token the backup's, living for what is left of the backup's TTL.

An export of that name that is not the backup's is left alone: the backup says so and waits
for it to go.
"""

from __future__ import annotations

import math
from datetime import timedelta

from diskferry.control.errors import AlreadyExistsError
from diskferry.control.resources.duration import format_duration
from diskferry.control.resources.model import ObjectMeta, OwnerReference
from diskferry.control.resources.typedref import BACKUP
from diskferry.control.resources.vmbackup import VirtualMachineBackup
from diskferry.control.resources.vmexport import ExportSourceKind, VirtualMachineExport
from diskferry.control.runtime.client import Client


def owned(export: VirtualMachineExport, backup: VirtualMachineBackup) -> bool:
    """Whether the backup is the export's controller."""
    return any(
        ref.controller and ref.uid == backup.metadata.uid
        for ref in export.metadata.owner_references
    )


def _made(backup: VirtualMachineBackup, token_secret: str, left: float) -> VirtualMachineExport:
    owner = OwnerReference(
        apiVersion=backup.api_version,
        kind=backup.kind,
        name=backup.metadata.name or "",
        uid=backup.metadata.uid or "",
        controller=True,
        blockOwnerDeletion=True,
    )
    meta = ObjectMeta(
        name=backup.metadata.name, namespace=backup.metadata.namespace, ownerReferences=[owner]
    )
    source = {
        "apiGroup": BACKUP,
        "kind": ExportSourceKind.VIRTUAL_MACHINE_BACKUP.value,
        "name": backup.metadata.name,
    }
    spec = {
        "source": source,
        "tokenSecretRef": token_secret,
        "ttlDuration": format_duration(timedelta(seconds=math.ceil(left))),
    }
    return VirtualMachineExport.model_validate({"metadata": meta.to_json(), "spec": spec})


def backup_export(
    client: Client, backup: VirtualMachineBackup, token_secret: str, left: float
) -> VirtualMachineExport | str:
    """The backup's export, made (with the token Secret `token_secret`, for `left` seconds)
    when there is none; why not, when an export of its name is not the backup's."""
    namespace, name = backup.metadata.namespace, backup.metadata.name or ""
    found = client.get(VirtualMachineExport, namespace, name)
    if found is None:
        try:
            return client.create(_made(backup, token_secret, left))
        except AlreadyExistsError:
            found = client.get(VirtualMachineExport, namespace, name)
            if found is None:
                return f"the VirtualMachineExport {name} is being replaced"
    if not owned(found, backup):
        return (
            f"a VirtualMachineExport {name} exists and is not this backup's: delete it for the "
            "backup's own"
        )
    return found


def drop_backup_export(client: Client, backup: VirtualMachineBackup) -> None:
    """Delete the backup's export, when there is one and it is the backup's."""
    found = client.get(VirtualMachineExport, backup.metadata.namespace, backup.metadata.name or "")
    if found is not None and owned(found, backup) and found.metadata.deletion_timestamp is None:
        client.delete(VirtualMachineExport, backup.metadata.namespace, found.metadata.name or "")
