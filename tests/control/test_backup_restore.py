"""Backup and Restore through the daemon with the real engines: the issue's manifest set as
it stands, a volume policy skipping a cdrom, a Restore from the repository alone."""

from __future__ import annotations

import re

from backup_restore_support import apply, base, disk, disk_file, documents, get, wait_for
from control_support import stop_workers_under, wait_until
from reconcile_support import Daemon

__all__ = ["base"]
DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"


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


def vm_doc(name: str, policy: str, disks: list[str]) -> dict:
    """A VirtualMachine in default labelled app=web on `disks`."""
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "runPolicy": policy,
            "blockDeviceRefs": [{"kind": "VirtualDisk", "name": d} for d in disks],
        },
    }


def test_a_fresh_data_directory_restores_from_the_repository_alone(
    base, repositories_opened_by_reconcilers
):
    docs = documents("backup-restore.yaml", base / "backups")
    first = Daemon(base / "first")
    try:
        one = disk(first, "vd-a", b"first disk" * 500)
        two = disk(first, "vd-b", b"second disk" * 700, size="2Mi")
        apply(first, [*docs[:3], vm_doc("vm-a", "Manual", ["vd-a", "vd-b"]), docs[4]])
        assert (
            wait_for(first, "Backup", "default", "b1", "Completed", "Failed")["status"]["phase"]
            == "Completed"
        )
    finally:
        first.stop()
        stop_workers_under(base / "first")
    fresh = Daemon(base / "fresh")
    try:
        apply(fresh, [*docs[:3], docs[5]])
        seen = []

        def sample() -> bool:
            vm = get(fresh, "VirtualMachine", "restored", "vm-a")
            downloads = [
                (get(fresh, "DataDownload", "default", f"r1-vm-a-{d}") or {}).get("status", {})
                for d in ("vd-a", "vd-b")
            ]
            if vm is not None:
                seen.append((vm["spec"]["runPolicy"], [s.get("phase") for s in downloads]))
            restore = get(fresh, "Restore", "default", "r1") or {}
            return restore.get("status", {}).get("phase") in ("Completed", "Failed")

        wait_until(sample, 120)
        restore = get(fresh, "Restore", "default", "r1")
        assert restore["status"]["phase"] == "Completed", restore["status"]
        assert restore["status"]["progress"] == {"totalItems": 1, "itemsRestored": 1}
        assert seen[0][0] == "AlwaysOff"
        for policy, phases in seen:
            assert policy == "AlwaysOff" or phases == ["Completed", "Completed"]
        vm = get(fresh, "VirtualMachine", "restored", "vm-a")
        assert vm["spec"]["runPolicy"] == "Manual"
        assert "diskferry.io/restore-run-policy" not in vm["metadata"].get("annotations", {})
        assert disk_file(fresh, "restored", "vd-a").read_bytes() == one.read_bytes()
        assert disk_file(fresh, "restored", "vd-b").read_bytes() == two.read_bytes()
    finally:
        fresh.stop()
        stop_workers_under(base / "fresh")
    assert repositories_opened_by_reconcilers == []


def test_long_names_are_cut_to_a_label_with_a_hash(base):
    vm_name, backup_name, restore_name = "v" * 60, "b" * 60, "r" * 60
    docs = documents("backup-restore.yaml", base / "backups")
    backup = {**docs[4], "metadata": {**docs[4]["metadata"], "name": backup_name}}
    restore = {
        **docs[5],
        "metadata": {**docs[5]["metadata"], "name": restore_name},
        "spec": {**docs[5]["spec"], "backupName": backup_name},
    }
    daemon = Daemon(base / "data")
    try:
        source = disk(daemon, "vd-a", b"long names" * 100)
        apply(daemon, [*docs[:3], vm_doc(vm_name, "AlwaysOff", ["vd-a"]), backup])
        done = wait_for(daemon, "Backup", "default", backup_name, "Completed", "Failed")
        assert done["status"]["phase"] == "Completed", done["status"]
        [volume] = done["status"]["volumes"]
        upload = get(daemon, "DataUpload", "default", volume["dataUpload"])
        label = upload["metadata"]["labels"]["diskferry.io/backup-name"]
        for name in (volume["dataUpload"], label):
            assert len(name) <= 63 and re.fullmatch(DNS_LABEL, name), name
        assert volume["dataUpload"].startswith(f"{backup_name[:40]}")
        assert label != volume["dataUpload"]
        apply(daemon, [restore])
        restored = wait_for(daemon, "Restore", "default", restore_name, "Completed", "Failed")
        assert restored["status"]["phase"] == "Completed", restored["status"]
        [machine] = restored["status"]["virtualMachines"]
        [restored_disk] = machine["disks"]
        download = get(daemon, "DataDownload", "default", restored_disk["dataDownload"])
        label = download["metadata"]["labels"]["diskferry.io/restore-name"]
        for name in (restored_disk["dataDownload"], label):
            assert len(name) <= 63 and re.fullmatch(DNS_LABEL, name), name
        assert disk_file(daemon, "restored", "vd-a").read_bytes() == source.read_bytes()
    finally:
        daemon.stop()
        stop_workers_under(base)
