"""Each Velero sample (tests/anchors/velero/, apiVersion changed and nothing else) applied with
the real kubectl to `diskferry serve`: it is accepted, with a warning for each field it sets
that has no effect here, and the flow it describes works (a Backup of a VM completes, and a
Restore of it is byte-exact; a Schedule makes its Backups) or its status says exactly what
does not apply here."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_support import wait_until
from daemon_support import Served, free_port, kubectl, start_daemon

SAMPLES = Path(__file__).parents[1] / "anchors" / "velero"
PASSWORD = "bars-secret"
MiB = 1 << 20


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Served]:
    served = start_daemon(
        tmp_path / "data", tmp_path / "daemon.log", options=("--proxy-port", str(free_port()))
    )
    yield served
    assert served.stop() == 0


def apply_sample(daemon: Served, name: str, verb: str = "apply") -> str:
    """`kubectl apply --validate=strict` (or `create`, for a sample with a generateName) of
    the sample as it is; what kubectl printed on stderr (its warnings)."""
    command = [
        "kubectl",
        "--kubeconfig",
        str(daemon.kubeconfig),
        "--cache-dir",
        str(daemon.data_dir.parent / "kube-cache"),
        verb,
        "--validate=strict",
        "-f",
        str(SAMPLES / name),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr


def apply(daemon: Served, *docs: dict[str, Any]) -> None:
    kubectl(daemon, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


def get(daemon: Served, kind: str, name: str, namespace: str) -> dict[str, Any]:
    return json.loads(kubectl(daemon, "get", kind, name, "-n", namespace, "-o", "json"))


def status_when(daemon: Served, kind: str, name: str, namespace: str, *phases: str) -> dict:
    """The object's status once its phase is one of `phases`."""

    def reached() -> dict[str, Any] | None:
        status = get(daemon, kind, name, namespace).get("status") or {}
        return status if status.get("phase") in phases else None

    return wait_until(reached, 150, step=0.5)


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def location(namespace: str, name: str, bucket: Path) -> list[dict[str, Any]]:
    """The password Secret and the namespace's default location `name`, encrypted, in
    `bucket`."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "repo-pass", "namespace": namespace},
            "stringData": {"password": PASSWORD},
        },
        {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "BackupStorageLocation",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "provider": "filesystem",
                "default": True,
                "objectStorage": {"bucket": str(bucket)},
                "encryptionSecretRef": {"name": "repo-pass", "key": "password"},
            },
        },
    ]


def disk_file(daemon: Served, namespace: str, name: str) -> Path:
    """The claim file of the Ready VirtualDisk."""
    status = status_when(daemon, "virtualdisk", name, namespace, "Ready")
    claim = status["target"]["persistentVolumeClaimName"]
    return daemon.data_dir / "volumes" / status["storageClassName"] / namespace / f"{claim}.img"


def vm_with_disk(daemon: Served, namespace: str, data: bytes) -> Path:
    """A stopped VM `vm-a` in `namespace` on the disk `vd-a` holding `data` at 1 MiB; the
    disk's file."""
    apply(
        daemon,
        {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "VirtualDisk",
            "metadata": {"name": "vd-a", "namespace": namespace},
            "spec": {"persistentVolumeClaim": {"size": "4Mi"}},
        },
    )
    path = disk_file(daemon, namespace, "vd-a")
    with open(path, "r+b") as f:
        f.seek(MiB)
        f.write(data)
    apply(
        daemon,
        {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "VirtualMachine",
            "metadata": {"name": "vm-a", "namespace": namespace},
            "spec": {
                "runPolicy": "AlwaysOff",
                "blockDeviceRefs": [{"kind": "VirtualDisk", "name": "vd-a"}],
            },
        },
    )
    return path


@pytest.mark.parametrize(
    "sample",
    [
        "backupstoragelocation.yaml",
        "backupstoragelocation-cacert.yaml",
        "backupstoragelocation-cacertref.yaml",
    ],
)
def test_a_location_sample_is_unavailable_until_it_names_its_password(daemon, sample) -> None:
    apply(daemon, namespace("velero"))
    apply_sample(daemon, sample)
    status = status_when(
        daemon, "backupstoragelocation", "default", "velero", "Available", "Unavailable"
    )
    assert status["phase"] == "Unavailable"
    assert "no spec.encryptionSecretRef" in status["message"]
    assert "spec.config.encryption: none" in status["message"]


def test_the_api_types_backup_sample_fails_validation_for_its_location(daemon) -> None:
    apply(daemon, namespace("velero"))
    warnings = apply_sample(daemon, "backup.yaml")
    for field in ("spec.volumeSnapshotLocations", "spec.csiSnapshotTimeout", "spec.resourcePolicy"):
        assert f"{field}: has no effect here" in warnings
    status = status_when(daemon, "backup", "a", "velero", "FailedValidation")
    assert status["validationErrors"] == [
        "encountered labelSelector as well as orLabelSelectors in the spec, only one can be "
        "specified",
        "the BackupStorageLocation aws-primary does not exist in the namespace velero",
    ]


def test_the_volume_group_snapshot_backup_sample_backs_up_and_is_restored(daemon, tmp_path) -> None:
    apply(daemon, namespace("my-app"), *location("default", "repo", tmp_path / "backups"))
    source = vm_with_disk(daemon, "my-app", b"velero's sample" * 1000)
    warnings = apply_sample(daemon, "backup-volumegroupsnapshot.yaml")
    assert "spec.volumeGroupSnapshotLabelKey: has no effect here" in warnings
    status = status_when(daemon, "backup", "myapp-backup", "default", "Completed", "Failed")
    assert status["phase"] == "Completed", status
    assert status["progress"]["itemsBackedUp"] == 1
    assert get(daemon, "backup", "myapp-backup", "default")["spec"]["storageLocation"] == "repo"
    apply(
        daemon,
        {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "Restore",
            "metadata": {"name": "back", "namespace": "default"},
            "spec": {"backupName": "myapp-backup", "namespaceMapping": {"my-app": "restored"}},
        },
    )
    status = status_when(daemon, "restore", "back", "default", "Completed", "Failed")
    assert status["phase"] == "Completed", status
    assert disk_file(daemon, "restored", "vd-a").read_bytes() == source.read_bytes()


BOTH_SELECTORS = (
    "encountered labelSelector as well as orLabelSelectors in the spec, only one can be specified"
)
NO_SOURCE = (
    "either a backup or schedule must be specified as a source for the restore, but not both"
)


@pytest.mark.parametrize(
    ("sample", "name", "errors"),
    [
        ("restore.yaml", "a-very-special-backup-0000111122223333", [BOTH_SELECTORS, NO_SOURCE]),
        ("restore-status.yaml", "restore-with-status", [NO_SOURCE]),
    ],
)
def test_a_restore_sample_that_velero_refuses_fails_validation_saying_why(
    daemon, sample, name, errors
) -> None:
    apply(daemon, namespace("velero"))
    warnings = apply_sample(daemon, sample)
    assert "spec.restoreStatus: has no effect here" in warnings
    status = status_when(daemon, "restore", name, "velero", "FailedValidation")
    assert status["validationErrors"] == errors


def test_the_cron_schedule_sample_is_enabled_for_its_next_time(daemon) -> None:
    apply(daemon, namespace("velero"))
    warnings = apply_sample(daemon, "schedule-cron.yaml")
    assert "spec.template.volumeSnapshotLocations: has no effect here" in warnings
    status = status_when(daemon, "schedule", "a", "velero", "Enabled")
    assert status["nextRun"].endswith("T07:00:00Z")
    header = kubectl(daemon, "get", "schedules", "-n", "velero").splitlines()[0]
    assert header.split() == ["NAME", "STATUS", "SCHEDULE", "LASTBACKUP", "PAUSED", "AGE"]


def test_the_every_minute_schedule_sample_backs_up_its_namespace(daemon, tmp_path) -> None:
    apply(daemon, namespace("velero"), namespace("schedule-backup"))
    apply(daemon, *location("velero", "default", tmp_path / "backups"))
    vm_with_disk(daemon, "schedule-backup", b"every minute")
    apply_sample(daemon, "schedule-every-1m.yaml")
    status = status_when(daemon, "schedule", "schedule-schedule-backup", "velero", "Enabled")
    assert status["nextRun"]

    def made() -> list[dict[str, Any]]:
        found = kubectl(
            daemon,
            "get",
            "backups",
            "-n",
            "velero",
            "-l",
            "diskferry.io/schedule-name=schedule-schedule-backup",
            "-o",
            "json",
        )
        items = json.loads(found)["items"]
        return [b for b in items if (b.get("status") or {}).get("phase") == "Completed"]

    [backup] = wait_until(made, 180, step=1)
    assert backup["spec"]["storageLocation"] == "default"
    assert backup["status"]["progress"]["itemsBackedUp"] == 1
    expires = backup["status"]["expiration"]
    assert expires > backup["status"]["startTimestamp"]


def test_the_dataupload_sample_fails_saying_it_names_no_vm(daemon, tmp_path) -> None:
    apply(daemon, namespace("velero"), *location("velero", "default", tmp_path / "backups"))
    warnings = apply_sample(daemon, "dataupload.yaml", "create")
    assert "spec.csiSnapshot: has no effect here" in warnings
    [name] = kubectl(daemon, "get", "datauploads", "-n", "velero", "-o", "name").split()
    status = status_when(daemon, "dataupload", name.split("/")[1], "velero", "Failed")
    assert "does not name a VM" in status["message"]


def test_the_datadownload_sample_fails_saying_its_snapshot_is_not_there(daemon, tmp_path) -> None:
    apply(daemon, namespace("velero"), *location("velero", "default", tmp_path / "backups"))
    apply_sample(daemon, "datadownload.yaml", "create")
    [name] = kubectl(daemon, "get", "datadownloads", "-n", "velero", "-o", "name").split()
    status = status_when(daemon, "datadownload", name.split("/")[1], "velero", "Failed")
    assert "8b1e2f3a4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7" in status["message"]
