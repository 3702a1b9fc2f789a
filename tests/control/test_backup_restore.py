"""Backup and Restore through the daemon with the real engines: the issue's manifest set as
it stands, a volume policy skipping a cdrom, a Restore from the repository alone."""

from __future__ import annotations

from backup_support import apply, base, disk, disk_file, documents, get, wait_for
from control_support import stop_workers_under
from reconcile_support import Daemon

__all__ = ["base"]


def test_the_manifest_set_backs_up_and_restores_into_restored(base):
    daemon = Daemon(base / "data")
    try:
        source = disk(daemon, "vd-a", b"diskferry" * 1000)
        apply(daemon, documents("backup-restore.yaml", base / "backups"))
        backup = wait_for(daemon, "Backup", "default", "b1", "Completed", "Failed")
        assert backup["status"]["phase"] == "Completed", backup["status"]
        assert backup["status"]["progress"] == {
            "totalItems": 1,
            "itemsBackedUp": 1,
            "itemsFailed": 0,
        }
        [volume] = backup["status"]["volumes"]
        assert volume["phase"] == "Completed" and volume["snapshotID"]
        upload = get(daemon, "DataUpload", "default", volume["dataUpload"])
        assert upload["metadata"]["labels"]["diskferry.io/backup-name"] == "b1"
        assert upload["metadata"]["ownerReferences"][0]["name"] == "b1"
        restore = wait_for(daemon, "Restore", "default", "r1", "Completed", "Failed")
        assert restore["status"]["phase"] == "Completed", restore["status"]
        assert get(daemon, "Namespace", None, "restored") is not None
        vm = get(daemon, "VirtualMachine", "restored", "vm-a")
        assert vm["spec"]["runPolicy"] == "AlwaysOff"
        assert vm["metadata"]["labels"] == {"app": "web"}
        assert disk_file(daemon, "restored", "vd-a").read_bytes() == source.read_bytes()
    finally:
        daemon.stop()
        stop_workers_under(base)


def test_a_volume_policy_skips_the_cdrom_and_says_so(base):
    daemon = Daemon(base / "data")
    try:
        disk(daemon, "vd-a", b"data")
        docs = documents("backup-restore.yaml", base / "backups")[:3]
        vm = {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "VirtualMachine",
            "metadata": {"name": "vm-a", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "runPolicy": "AlwaysOff",
                "blockDeviceRefs": [
                    {"kind": "VirtualDisk", "name": "vd-a"},
                    {"kind": "VirtualImage", "name": "installer"},
                ],
            },
        }
        backup = documents("backup.yaml", base / "backups")[0]
        apply(daemon, [*docs, vm, backup])
        done = wait_for(daemon, "Backup", "default", "b1", "Completed", "Failed")["status"]
        assert done["phase"] == "Completed"
        by_name = {v["name"]: v for v in done["volumes"]}
        assert by_name["vd-a"]["phase"] == "Completed"
        assert by_name["installer"]["phase"] == "Skipped"
        assert by_name["installer"]["reason"] == "skipped by volume policy rule 1 (skip)"
        skipped = [e for e in daemon.events("b1") if e["reason"] == "VolumeSkipped"]
        assert "VirtualImage installer" in skipped[0]["message"]
    finally:
        daemon.stop()
        stop_workers_under(base)
