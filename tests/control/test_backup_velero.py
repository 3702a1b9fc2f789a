"""Backup and Restore do what Velero's fields say, through the daemon with the real engines:
namespace globs, resource filters, or-label selectors, the default location, the default ttl,
FailedValidation, manifests without data, images, restorePVs, existingResourcePolicy,
scheduleName."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from backup_restore_support import apply, base, disk, disk_file, get, wait_for
from control_support import stop_workers_under, wait_until
from reconcile_support import Daemon

from diskferry.backup.metadata import delete_metadata, load_metadata
from diskferry.backup.repository import Repository
from diskferry.control.resources.registry import REGISTRY

__all__ = ["base"]
PASSWORD = "bars-secret"
ENDED = ("Completed", "PartiallyFailed", "Failed", "FailedValidation")
MiB = 1 << 20


def location(bucket: Path, default: bool = True) -> list[dict[str, Any]]:
    """The password Secret and the location `repo` in `bucket`, the default one when asked."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "repo-pass", "namespace": "default"},
            "stringData": {"password": PASSWORD},
        },
        {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "BackupStorageLocation",
            "metadata": {"name": "repo", "namespace": "default"},
            "spec": {
                "provider": "filesystem",
                "objectStorage": {"bucket": str(bucket)},
                "encryptionSecretRef": {"name": "repo-pass", "key": "password"},
                "default": default,
            },
        },
    ]


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


CDROM = [("VirtualImage", "installer")]
"""A block device no backup moves data of (an image, here one that does not exist)."""


def vm(name: str, ns: str = "default", refs: list[tuple[str, str]] = CDROM, **labels: str) -> dict:
    """A stopped VirtualMachine `ns/name` labelled `labels` on the block devices `refs`."""
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "runPolicy": "Manual",
            "blockDeviceRefs": [{"kind": kind, "name": ref} for kind, ref in refs],
        },
    }


def cluster_image(name: str) -> dict[str, Any]:
    """A ClusterVirtualImage waiting for its upload."""
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "ClusterVirtualImage",
        "metadata": {"name": name},
        "spec": {"dataSource": {"type": "Upload"}},
    }


def backup(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "Backup",
        "metadata": {"name": name, "namespace": "default", "labels": spec.pop("labels", {})},
        "spec": spec,
    }


def restore(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "Restore",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def ended(daemon: Daemon, kind: str, name: str) -> dict[str, Any]:
    return wait_for(daemon, kind, "default", name, *ENDED)


def stored(bucket: Path, backup_name: str) -> dict[str, Any]:
    """The metadata the Backup `default/backup_name` keeps in the repository."""
    with Repository.open(str(bucket), PASSWORD) as repo:
        return load_metadata(repo, f"default.{backup_name}")


def reasons(daemon: Daemon, name: str) -> list[str]:
    return [e["reason"] for e in daemon.events(name)]


def test_namespace_globs_or_labels_the_default_location_and_the_default_ttl(base) -> None:
    daemon = Daemon(base / "data")
    try:
        docs = [namespace(n) for n in ("web-a", "web-b", "other")]
        docs += [
            vm("vm1", "web-a", app="a"),
            vm("vm2", "web-a", app="c"),
            vm("vm3", "web-b", app="a"),
            vm("vm4", "other", app="b"),
            vm("vm5", "web-a", app="b"),
        ]
        spec = {
            "includedNamespaces": ["web-*"],
            "excludedNamespaces": ["web-b"],
            "orLabelSelectors": [{"matchLabels": {"app": "a"}}, {"matchLabels": {"app": "b"}}],
        }
        apply(daemon, [*location(base / "backups"), *docs, backup("b1", **spec)])
        done = ended(daemon, "Backup", "b1")
        status = done["status"]
        assert status["phase"] == "Completed", status
        assert status["progress"]["totalItems"] == 2
        assert done["spec"]["storageLocation"] == "repo"
        assert "DefaultStorageLocation" in reasons(daemon, "b1")
        started = datetime.fromisoformat(status["startTimestamp"])
        assert datetime.fromisoformat(status["expiration"]) - started == timedelta(hours=720)
        kept = stored(base / "backups", "b1")
        names = sorted(m["manifest"]["metadata"]["name"] for m in kept["virtualMachines"])
        assert names == ["vm1", "vm5"]
        assert kept["status"]["phase"] == "Completed"
    finally:
        daemon.stop()


def test_a_backup_that_takes_no_vm_kind_backs_up_nothing_and_says_so(base) -> None:
    daemon = Daemon(base / "data")
    try:
        apply(
            daemon,
            [*location(base / "backups"), vm("vm1"), backup("b1", includedResources=["pods"])],
        )
        status = ended(daemon, "Backup", "b1")["status"]
        assert status["phase"] == "Completed"
        assert status["progress"]["totalItems"] == 0
        assert (
            status["message"] == "the resource filters take no VirtualMachine: nothing is backed up"
        )
        assert status["warnings"] == 1
        assert "NothingSelected" in reasons(daemon, "b1")
    finally:
        daemon.stop()


def test_validation_errors_are_failed_validation(base) -> None:
    daemon = Daemon(base / "data")
    try:
        apply(daemon, location(base / "backups", default=False))
        read_only = location(base / "other")[1]
        read_only["metadata"]["name"] = "ro"
        read_only["spec"].update(default=False, accessMode="ReadOnly")
        apply(
            daemon,
            [
                read_only,
                backup("readonly", storageLocation="ro"),
                backup("nowhere"),
                backup("missing", storageLocation="aws-primary"),
                backup(
                    "both",
                    storageLocation="repo",
                    labelSelector={"matchLabels": {"a": "1"}},
                    orLabelSelectors=[{"matchLabels": {"b": "2"}}],
                ),
            ],
        )
        errors = {
            name: ended(daemon, "Backup", name)["status"]
            for name in ("nowhere", "missing", "both", "readonly")
        }
        assert {s["phase"] for s in errors.values()} == {"FailedValidation"}
        assert (
            "no BackupStorageLocation of the namespace default is default: true"
            in (errors["nowhere"]["validationErrors"][0])
        )
        assert errors["missing"]["validationErrors"] == [
            "the BackupStorageLocation aws-primary does not exist in the namespace default"
        ]
        assert "only one can be specified" in errors["both"]["validationErrors"][0]
        assert errors["readonly"]["validationErrors"] == [
            "the BackupStorageLocation ro is ReadOnly: no backup is written into it"
        ]
    finally:
        daemon.stop()


def test_manifests_without_data_and_images_are_kept_and_restored(base) -> None:
    first = Daemon(base / "first")
    refs = [("VirtualDisk", "vd-a"), ("ClusterVirtualImage", "installer")]
    try:
        disk(first, "vd-a", b"kept as a manifest only" * 100)
        apply(
            first, [*location(base / "backups"), cluster_image("installer"), vm("vm1", refs=refs)]
        )
        apply(first, [backup("b1", snapshotVolumes=False, includedNamespaces=["default"])])
        status = ended(first, "Backup", "b1")["status"]
        assert status["phase"] == "Completed", status
        by_name = {v["name"]: v for v in status["volumes"]}
        assert by_name["vd-a"]["phase"] == "Skipped"
        assert "snapshotVolumes is false" in by_name["vd-a"]["reason"]
        assert "backupItemOperationsAttempted" not in status or (
            status["backupItemOperationsAttempted"] == 0
        )
        kept = stored(base / "backups", "b1")
        [machine] = kept["virtualMachines"]
        assert [d["name"] for d in machine["disks"]] == ["vd-a"]
        assert "snapshotID" not in machine["disks"][0]
        assert [(i["kind"], i["name"]) for i in kept["images"]] == [
            ("ClusterVirtualImage", "installer")
        ]
    finally:
        first.stop()
        stop_workers_under(base / "first")
    fresh = Daemon(base / "fresh")
    try:
        apply(fresh, [*location(base / "backups"), restore("r1", backupName="b1")])
        status = ended(fresh, "Restore", "r1")["status"]
        assert status["phase"] == "Completed", status
        [restored_disk] = status["virtualMachines"][0]["disks"]
        assert restored_disk["message"].startswith("made from its manifest, no data restored")
        assert get(fresh, "ClusterVirtualImage", None, "installer") is not None
        assert disk_file(fresh, "default", "vd-a").read_bytes() == bytes(4 * MiB)
        assert get(fresh, "VirtualMachine", "default", "vm1")["spec"]["runPolicy"] == "Manual"
    finally:
        fresh.stop()
        stop_workers_under(base / "fresh")


def test_left_out_disks_are_neither_moved_nor_kept(base) -> None:
    daemon = Daemon(base / "data")
    try:
        disk(daemon, "vd-a", b"left out")
        docs = [*location(base / "backups"), vm("vm1", refs=[("VirtualDisk", "vd-a")])]
        apply(daemon, [*docs, backup("b1", excludedResources=["virtualdisks.diskferry.io"])])
        status = ended(daemon, "Backup", "b1")["status"]
        assert status["phase"] == "Completed", status
        [volume] = status["volumes"]
        assert volume["phase"] == "Skipped" and "leave VirtualDisks out" in volume["reason"]
        assert stored(base / "backups", "b1")["virtualMachines"][0]["disks"] == []
        uploads = daemon.objects.list(REGISTRY.by_kind("DataUpload"), "default").items
        assert uploads == []
    finally:
        daemon.stop()


def test_restore_policies_pvs_and_schedule_name(base) -> None:
    daemon = Daemon(base / "data")
    try:
        one = disk(daemon, "vd-a", b"first disk" * 500)
        disk(daemon, "vd-b", b"second disk" * 500)
        machine = vm("vm1", refs=[("VirtualDisk", "vd-a"), ("VirtualDisk", "vd-b")], app="web")
        scheduled = backup("nightly-1", labels={"diskferry.io/schedule-name": "nightly"})
        apply(daemon, [*location(base / "backups"), machine, scheduled])
        assert ended(daemon, "Backup", "nightly-1")["status"]["phase"] == "Completed"

        apply(daemon, [restore("r-none", backupName="nightly-1")])
        status = ended(daemon, "Restore", "r-none")["status"]
        assert status["progress"]["totalItems"] == 0 and status["warnings"] == 1
        assert "AlreadyExists" in reasons(daemon, "r-none")

        daemon.objects.delete(REGISTRY.by_kind("VirtualDisk"), "default", "vd-b")
        wait_until(lambda: get(daemon, "VirtualDisk", "default", "vd-b") is None)
        daemon.objects.patch(
            REGISTRY.by_kind("VirtualMachine"),
            "default",
            "vm1",
            {"metadata": {"labels": {"app": "changed"}}, "spec": {"runPolicy": "AlwaysOff"}},
            "merge",
        )
        apply(
            daemon, [restore("r-update", scheduleName="nightly", existingResourcePolicy="update")]
        )
        done = ended(daemon, "Restore", "r-update")
        assert done["spec"]["backupName"] == "nightly-1"
        assert done["status"]["phase"] == "Completed", done["status"]
        [machine_status] = done["status"]["virtualMachines"]
        assert machine_status["updated"] is True
        disks = {d["name"]: d for d in machine_status["disks"]}
        assert disks["vd-a"]["phase"] == "Skipped" and "data is left" in disks["vd-a"]["message"]
        assert disks["vd-b"]["phase"] == "Completed" and disks["vd-b"]["dataDownload"]
        vm_now = get(daemon, "VirtualMachine", "default", "vm1")
        assert vm_now["metadata"]["labels"] == {"app": "web"}
        assert vm_now["spec"]["runPolicy"] == "Manual"
        assert disk_file(daemon, "default", "vd-a").read_bytes() == one.read_bytes()
        assert b"second disk" in disk_file(daemon, "default", "vd-b").read_bytes()

        apply(
            daemon,
            [
                restore(
                    "r-nopvs",
                    backupName="nightly-1",
                    restorePVs=False,
                    namespaceMapping={"default": "copy"},
                ),
                restore(
                    "r-other", backupName="nightly-1", labelSelector={"matchLabels": {"app": "x"}}
                ),
            ],
        )
        status = ended(daemon, "Restore", "r-nopvs")["status"]
        assert status["phase"] == "Completed", status
        assert status.get("restoreItemOperationsAttempted", 0) == 0
        assert disk_file(daemon, "copy", "vd-a").read_bytes() == bytes(4 * MiB)
        assert ended(daemon, "Restore", "r-other")["status"]["progress"]["totalItems"] == 0
    finally:
        daemon.stop()
        stop_workers_under(base)


def test_a_restore_without_a_source_fails_validation(base) -> None:
    daemon = Daemon(base / "data")
    try:
        apply(daemon, [restore("r1", restoreStatus={"includedResources": ["foo.bar.io"]})])
        status = ended(daemon, "Restore", "r1")["status"]
        assert status["phase"] == "FailedValidation"
        assert status["validationErrors"] == [
            "either a backup or schedule must be specified as a source for the restore, "
            "but not both"
        ]
    finally:
        daemon.stop()


def test_a_location_syncs_the_backups_its_repository_holds(base) -> None:
    first = Daemon(base / "first")
    try:
        apply(first, [*location(base / "backups"), vm("vm1", app="web"), backup("b1")])
        assert ended(first, "Backup", "b1")["status"]["phase"] == "Completed"
    finally:
        first.stop()
    fresh = Daemon(base / "fresh")
    try:
        docs = location(base / "backups")
        docs[1]["spec"]["backupSyncPeriod"] = "1s"
        apply(fresh, docs)
        synced = ended(fresh, "Backup", "b1")
        assert synced["status"]["phase"] == "Completed"
        assert synced["metadata"]["annotations"]["diskferry.io/synced-from"] == "repo"
        assert synced["status"]["virtualMachines"] == [{"namespace": "default", "name": "vm1"}]
        bsl = get(fresh, "BackupStorageLocation", "default", "repo")
        assert bsl["status"]["lastSyncedTime"] and bsl["status"]["lastSyncedRevision"]
        assert "BackupsSynced" in reasons(fresh, "repo")
        with Repository.open(str(base / "backups"), PASSWORD) as repo:
            delete_metadata(repo, "default.b1")
        wait_until(lambda: get(fresh, "Backup", "default", "b1") is None, 60)
    finally:
        fresh.stop()
