"""VirtualMachineBackups as KubeVirt writes them, end to end: a Push into `pvcName` (here the
BackupStorageLocation of that name, waited for as KubeVirt waits for the PVC) lands in its
repository, and an export of it is Skipped; a Pull through a tracker is served through a
VirtualMachineExport of itself, as KubeVirt serves it, which lists KubeVirt's backup links; an
export a user makes of it serves the same point under its own name, with the backup's token."""

from __future__ import annotations

from typing import Any

from control_support import wait_until
from datamover_support import filesystem_bsl, secret
from vm_support import create_vm, ready_disk
from vmbackup_support import (
    ENDED,
    PASSWORD,
    backup,
    condition,
    create,
    daemon,
    guest_write,
    running_vm,
)
from vmexport_support import ExportDaemon, get, get_when_up

from diskferry.backup.repository import Repository
from diskferry.control.resources.core import SECRETS

__all__ = ["daemon"]
BACKUP = "VirtualMachineBackup"
EXPORT = "VirtualMachineExport"
KUBEVIRT_VM = {"apiGroup": "kubevirt.io", "kind": "VirtualMachine"}


def stopped_vm(daemon: ExportDaemon, name: str, disk: str) -> None:
    """A stopped VM on one blank VirtualDisk `disk`."""
    ready_disk(daemon, disk)
    spec = {"runPolicy": "AlwaysOff", "blockDeviceRefs": [{"kind": "VirtualDisk", "name": disk}]}
    create_vm(daemon, name, spec, {})
    daemon.wait_phase("VirtualMachine", name, "Stopped", timeout=30)


def test_a_push_into_pvc_name_waits_for_that_location_and_lands_in_it(
    daemon: ExportDaemon,
) -> None:
    stopped_vm(daemon, "my-vm", "vd-m")
    backup(daemon, "backup1", {**KUBEVIRT_VM, "name": "my-vm"}, pvcName="backup-output-pvc")
    waiting: dict[str, Any] = daemon.wait_phase(BACKUP, "backup1", "Pending", *ENDED, timeout=30)
    progressing = condition(waiting, "Progressing")
    assert waiting["status"]["phase"] == "Pending"
    assert (progressing["status"], progressing["reason"]) == ("True", "Initializing")
    assert "BackupStorageLocation backup-output-pvc (pvcName)" in progressing["message"]
    assert daemon.get("DataUpload", "vmbackup-backup1") is None

    directory = daemon.data_dir.parent / "backup-output"
    secret(daemon, "repo-pass", password=PASSWORD)
    daemon.apply("BackupStorageLocation", "backup-output-pvc", filesystem_bsl(directory))
    done = daemon.wait_phase(BACKUP, "backup1", *ENDED, timeout=120)
    assert done["status"]["phase"] == "Complete", done["status"]
    upload = daemon.get("DataUpload", "vmbackup-backup1") or {}
    assert upload["spec"]["backupStorageLocation"] == "backup-output-pvc"
    with Repository.open(str(directory), PASSWORD) as repo:
        (snapshot,) = repo.list_snapshots()
    assert (snapshot.vm, snapshot.disk, snapshot.type) == ("default.my-vm", "vd-m", "full")
    assert done["status"]["snapshotID"]

    source = {"apiGroup": "backup.kubevirt.io", "kind": "VirtualMachineBackup", "name": "backup1"}
    daemon.apply(EXPORT, "of-push", {"source": source})
    skipped = daemon.wait_phase(EXPORT, "of-push", "Skipped", timeout=30)
    (ready,) = skipped["status"]["conditions"]
    assert "backup1 is a Push backup" in ready["message"]
    assert "BackupStorageLocation backup-output-pvc" in ready["message"]


def _links(export: dict[str, Any], side: str) -> dict[str, dict[str, str]]:
    """Each volume's endpoints on one side of an export's links, by volume."""
    backups = export["status"]["links"][side]["backups"]
    return {b["name"]: {e["endpoint"]: e["url"] for e in b["endpoints"]} for b in backups}


def test_a_pull_is_served_through_an_export_of_itself(daemon: ExportDaemon) -> None:
    disk, vm = running_vm(daemon, "my-vm", "vd-k")
    guest_write(vm, 0x5A, "1M", "64k")
    create(
        daemon,
        "VirtualMachineBackupTracker",
        "my-backup-tracker",
        {"source": {**KUBEVIRT_VM, "name": "my-vm"}},
    )
    token_secret(daemon, "my-token", "t0ken-1")
    tracked = {
        "apiGroup": "backup.kubevirt.io",
        "kind": "VirtualMachineBackupTracker",
        "name": "my-backup-tracker",
    }
    backup(
        daemon,
        "backup1",
        tracked,
        mode="Pull",
        pvcName="backup-output-pvc",
        tokenSecretRef="my-token",
        ttlDuration="60s",
    )
    status = daemon.wait_phase(BACKUP, "backup1", "Ready", *ENDED, timeout=90)["status"]
    assert status["phase"] == "Ready", status
    assert condition(daemon.get(BACKUP, "backup1"), "Progressing")["reason"] == "ExportReady"

    export = daemon.get(EXPORT, "backup1")
    assert export["status"]["phase"] == "Ready"
    assert status["exportUID"] == export["metadata"]["uid"]
    (owner,) = export["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == (BACKUP, "backup1", True)
    source = {"apiGroup": "backup.kubevirt.io", "kind": "VirtualMachineBackup", "name": "backup1"}
    assert export["spec"]["source"] == source
    assert export["status"]["tokenSecretRef"] == "my-token"
    assert export["status"]["virtualMachineName"] == "my-vm"
    assert not export["status"]["links"]["external"].get("volumes")
    external = _links(export, "external")
    (volume,) = status["includedVolumes"]
    assert external == {"vd-k": {"map": volume["mapEndpoint"], "data": volume["dataEndpoint"]}}
    assert (
        "/api/export.kubevirt.io/v1/namespaces/default/virtualmachineexports/backup1/"
        in volume["dataEndpoint"]
    )
    assert status["endpointCert"] == export["status"]["links"]["external"]["cert"] == daemon.ca_pem
    expected = (200, disk.read_bytes())
    assert get_when_up(volume["dataEndpoint"], daemon.ca_pem, "t0ken-1") == expected

    daemon.apply(EXPORT, "mine", {"source": source})
    mine = daemon.wait_phase(EXPORT, "mine", "Ready", timeout=30)
    assert mine["status"]["tokenSecretRef"] == "my-token"
    url = _links(mine, "external")["vd-k"]["data"]
    assert "/virtualmachineexports/mine/exports/vd-k/data" in url
    assert get(url, daemon.ca_pem, "t0ken-1") == (200, disk.read_bytes())
    inside = _links(mine, "internal")["vd-k"]["data"]
    assert get(inside, daemon.ca_pem, "t0ken-1") == (200, disk.read_bytes())

    token_secret(daemon, "other", "another-token")
    daemon.apply(EXPORT, "other-token", {"source": source, "tokenSecretRef": "other"})
    wait_until(lambda: _reason(daemon, "other-token") == "TokenNotReady", 30)
    pending = daemon.get(EXPORT, "other-token")
    assert pending["status"]["phase"] == "Pending"
    assert (
        "served with the token of its Secret my-token"
        in pending["status"]["conditions"][0]["message"]
    )

    done = daemon.wait_phase(BACKUP, "backup1", *ENDED, timeout=90)
    assert done["status"]["phase"] == "Complete", done["status"]
    wait_until(lambda: daemon.get(EXPORT, "backup1") is None, 30)
    wait_until(lambda: "no longer served" in _message(daemon, "mine"), 30)
    assert daemon.get(EXPORT, "mine")["status"]["phase"] == "Pending"
    assert ("default", "mine") not in daemon.controllers.proxy.routes()


def _ready_condition(daemon: ExportDaemon, name: str) -> dict[str, Any]:
    conditions = (daemon.get(EXPORT, name) or {}).get("status", {}).get("conditions") or [{}]
    return conditions[0]


def _reason(daemon: ExportDaemon, name: str) -> str | None:
    return _ready_condition(daemon, name).get("reason")


def _message(daemon: ExportDaemon, name: str) -> str:
    return _ready_condition(daemon, name).get("message", "")


def token_secret(daemon: ExportDaemon, name: str, token: str) -> None:
    """A Secret whose data.token is `token`."""
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}}
    daemon.objects.create(SECRETS, "default", {**body, "stringData": {"token": token}})
