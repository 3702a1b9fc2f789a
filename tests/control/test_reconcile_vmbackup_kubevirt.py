"""VirtualMachineBackups as KubeVirt writes them, end to end: a Push into `pvcName` (here the
BackupStorageLocation of that name, waited for as KubeVirt waits for the PVC) lands in its
repository."""

from __future__ import annotations

from typing import Any

from datamover_support import filesystem_bsl, secret
from vm_support import create_vm, ready_disk
from vmbackup_support import ENDED, PASSWORD, backup, condition, daemon
from vmexport_support import ExportDaemon

from diskferry.backup.repository import Repository

__all__ = ["daemon"]
BACKUP = "VirtualMachineBackup"
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
