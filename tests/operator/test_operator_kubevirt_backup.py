"""`diskferry operator` backing up a KubeVirt VM through KubeVirt's own backup API, against the
stand-in (whose KubeVirt serves Pull VirtualMachineBackups) and a location on moto's S3 server,
driven with kubectl: a DataUpload of the VM makes its tracker and a Pull backup, and its backup
worker reads the point's data and map endpoints into the repository, full, then after a write
incremental of exactly that run; each backup is deleted once read, its checkpoint in the
tracker; a DataDownload restores the snapshot byte for byte into a disk of another namespace.
A Backup (Velero's) of the VM, full then incremental, is restored into another namespace: the
VM made again held Halted until its claim is back, byte for byte, then its runStrategy put back.

Every worker runs as a Pod of the built image (`--runner pods`): what a repository's chores read
(a location's listing, the Backup's manifests for its Restore) comes back through their logs;
the blank worker of the disk a DataDownload restores into runs once, its Pod kept as the record
of it until the download Completed and the disk's claim was handed its volume."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS
from kubevirt_vm import vm_manifests
from location_support import apply_s3_location
from operator_support import Cluster
from pods_support import pods_operator, pods_started, volume_file

from diskferry.kube.pods import pod_name

sys.path.insert(0, str(Path(__file__).parents[1] / "objstore"))

from s3server import make_bucket, running_moto

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 1200)]
MiB = 1 << 20
KiB = 1 << 10
STEP = 0.5
BUCKET = "kubevirt-backups"
ENDED = ("Completed", "Failed", "Canceled")
BACKUPS = "virtualmachinebackups.backup.kubevirt.io"
TRACKERS = "virtualmachinebackuptrackers.backup.kubevirt.io"
VM = vm_manifests("16Mi", default_class=True)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with running_moto() as endpoint:
        make_bucket(endpoint, BUCKET)
        yield endpoint


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path)
    yield made
    made.close()


def _upload(name: str) -> str:
    body = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "DataUpload",
        "metadata": {"name": name, "annotations": {"diskferry.io/vm-name": "vm1"}},
        "spec": {"backupStorageLocation": "repo"},
    }
    return json.dumps(body)


def _download(snapshot: str) -> str:
    body = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "DataDownload",
        "metadata": {"name": "down", "namespace": "default"},
        "spec": {
            "backupStorageLocation": "repo",
            "snapshotID": snapshot,
            "targetVolume": {"pvc": "root", "namespace": "restored"},
        },
    }
    return json.dumps(body)


def _get(cluster: Cluster, *what: str) -> dict[str, Any] | None:
    out = kubectl(cluster.standin, "get", *what, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def _phase(cluster: Cluster, what: str, name: str, *phases: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        found = _get(cluster, what, name)
        return found if ((found or {}).get("status") or {}).get("phase") in phases else None

    return wait_until(reached, 600, STEP)


def _volume_file(cluster: Cluster, claim: str, namespace: str = "default") -> Path:
    pvc = wait_until(
        lambda: (
            (found := _get(cluster, "pvc", claim, "-n", namespace))
            and (found.get("status") or {}).get("phase") == "Bound"
            and found
        ),
        120,
        STEP,
    )
    pv = _get(cluster, "pv", pvc["spec"]["volumeName"]) or {}
    return Path(pv["spec"]["hostPath"]["path"]) / "disk.img"


def _vm_on_its_claim(cluster: Cluster, pinned: str, s3_endpoint: str) -> Path:
    """The operator started with its workers as Pods, the location and the VM applied: the file
    of the VM's root claim."""
    pods_operator(cluster, pinned)
    apply_s3_location(cluster.standin, s3_endpoint, BUCKET, "kubevirt")
    kubectl(cluster.standin, "apply", "-f", "-", stdin=VM)
    return _volume_file(cluster, "root")


def test_a_kubevirt_vm_is_backed_up_through_its_backup_point_and_restored(
    cluster: Cluster, pinned: str, s3_endpoint: str
) -> None:
    standin = cluster.standin
    disk = _vm_on_its_claim(cluster, pinned, s3_endpoint)
    with open(disk, "wb") as f:
        f.truncate(16 * MiB)
        f.seek(MiB)
        f.write(b"\x11" * (512 * KiB))
        f.seek(12 * MiB)
        f.write(b"\x22" * MiB)
    _phase(cluster, "backupstoragelocation", "repo", "Available")

    kubectl(standin, "apply", "-f", "-", stdin=_upload("up1"))
    first = _phase(cluster, "dataupload", "up1", *ENDED)["status"]
    assert first["phase"] == "Completed", first
    [full] = first["disks"]
    assert (full["name"], full["type"]) == ("root", "full")
    assert full["bytesRead"] == 512 * KiB + MiB
    assert _get(cluster, BACKUPS, f"du-{_uid(cluster, 'up1')}") is None  # deleted once read
    tracker = _get(cluster, TRACKERS, "vm1-repo") or {}
    assert tracker["status"]["latestCheckpoint"]["name"] == full["checkpoint"]

    write = f"write -P 0x33 {4 * MiB} {64 * KiB}"
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", write, f"{disk}.cbt.qcow2"], check=True)
    kubectl(standin, "apply", "-f", "-", stdin=_upload("up2"))
    second = _phase(cluster, "dataupload", "up2", *ENDED)["status"]
    assert second["phase"] == "Completed", second
    [incremental] = second["disks"]
    assert incremental["type"] == "incremental", incremental
    assert incremental["bytesRead"] == 64 * KiB

    kubectl(standin, "create", "namespace", "restored")
    kubectl(standin, "apply", "-f", "-", stdin=_download(incremental["snapshotID"]))
    restored = _phase(cluster, "datadownload", "down", *ENDED)["status"]
    assert restored["phase"] == "Completed", restored
    target = wait_until(
        lambda: (
            (found := _get(cluster, "vd", "root", "-n", "restored"))
            and found["status"].get("phase") in ("Ready", "Failed")
            and found
        ),
        120,
        STEP,
    )
    assert target["status"]["phase"] == "Ready", target["status"]
    assert volume_file(cluster, target).read_bytes() == disk.read_bytes()
    blank = pod_name(f"vd-blank-{target['metadata']['uid']}")
    assert pods_started(cluster, blank, "restored") == 1


def _uid(cluster: Cluster, upload: str) -> str:
    return str((_get(cluster, "dataupload", upload) or {})["metadata"]["uid"])


def _velero(kind: str, name: str, spec: dict[str, Any]) -> str:
    body = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }
    return json.dumps(body)


def _held_while_restoring(cluster: Cluster) -> dict[str, Any]:
    """The restored VM once it is made: Halted for as long as its claim's download runs."""
    vm = wait_until(
        lambda: _get(cluster, "virtualmachines.kubevirt.io", "vm1", "-n", "restored"), 120, STEP
    )
    downloads = json.loads(kubectl(cluster.standin, "get", "datadownloads", "-o", "json"))["items"]
    running = [d for d in downloads if (d.get("status") or {}).get("phase") != "Completed"]
    assert vm["spec"]["runStrategy"] == "Halted" or not running, vm["spec"]
    return vm


def test_a_backup_of_a_kubevirt_vm_restores_it_held_until_its_claim_is_back(
    cluster: Cluster, pinned: str, s3_endpoint: str
) -> None:
    standin = cluster.standin
    disk = _vm_on_its_claim(cluster, pinned, s3_endpoint)
    with open(disk, "wb") as f:
        f.truncate(16 * MiB)
        f.seek(2 * MiB)
        f.write(b"\x55" * MiB)
    _phase(cluster, "backupstoragelocation", "repo", "Available")
    selection = {"includedNamespaces": ["default"], "storageLocation": "repo"}

    kubectl(standin, "apply", "-f", "-", stdin=_velero("Backup", "first", selection))
    first = _phase(cluster, "backup", "first", "Completed", "PartiallyFailed", "Failed")["status"]
    assert first["phase"] == "Completed", first
    [volume] = first["volumes"]
    assert (volume["kind"], volume["name"], volume["phase"]) == (
        "PersistentVolumeClaim",
        "root",
        "Completed",
    )
    write = f"write -P 0x66 {8 * MiB} {64 * KiB}"
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", write, f"{disk}.cbt.qcow2"], check=True)
    kubectl(standin, "apply", "-f", "-", stdin=_velero("Backup", "second", selection))
    second = _phase(cluster, "backup", "second", "Completed", "PartiallyFailed", "Failed")["status"]
    assert second["phase"] == "Completed", second
    upload = _get(cluster, "dataupload", second["volumes"][0]["dataUpload"]) or {}
    assert [d["type"] for d in upload["status"]["disks"]] == ["incremental"]

    restore = {"backupName": "second", "namespaceMapping": {"default": "restored"}}
    kubectl(standin, "apply", "-f", "-", stdin=_velero("Restore", "back", restore))
    held = _held_while_restoring(cluster)
    assert held["metadata"]["annotations"]["diskferry.io/restore-run-strategy"] == "Always"
    done = _phase(cluster, "restore", "back", "Completed", "PartiallyFailed", "Failed")["status"]
    assert done["phase"] == "Completed", done
    [machine] = done["virtualMachines"]
    assert (machine["runStrategy"], machine["phase"]) == ("Always", "Completed")
    vm = _get(cluster, "virtualmachines.kubevirt.io", "vm1", "-n", "restored") or {}
    assert vm["spec"]["runStrategy"] == "Always"
    assert "diskferry.io/restore-run-strategy" not in vm["metadata"].get("annotations", {})
    original = _get(cluster, "virtualmachines.kubevirt.io", "vm1") or {}
    assert vm["spec"]["template"] == original["spec"]["template"]
    assert _volume_file(cluster, "root", "restored").read_bytes() == disk.read_bytes()
