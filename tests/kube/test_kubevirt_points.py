"""KubeVirt's backup points through the cluster's API, against the stand-in (whose KubeVirt serves
a Pull VirtualMachineBackup): a point is a Pull backup through the VM's tracker for its chain,
with a token Secret and a scratch claim it owns, read once it answers; released, it is deleted
with what it owns and its checkpoint goes into the tracker, the next point going on from there;
a VM that does not exist is refused."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from daemon_support import kubectl
from kubevirt_vm import vm_manifests
from standin_support import StandIn

from diskferry.control.errors import NotFoundError
from diskferry.control.host.points import PointError, ServedPoint
from diskferry.disk.point_volume import PointVolume
from diskferry.kube.api import KubeApi
from diskferry.kube.points import BACKUP, PVC, SECRET, TRACKER, KubeVirtPoints

MiB = 1 << 20
KiB = 1 << 10
SETUP = vm_manifests("8Mi")


def _disk(api: KubeApi) -> Path:
    """The VM's disk, with data at 1 MiB, once its claim is bound."""
    pvc = wait_until(
        lambda: (
            (p := api.get(*PVC, "default", "root")) and p["status"].get("phase") == "Bound" and p
        ),
        30,
        step=0.3,
    )
    pv = api.get("v1", "PersistentVolume", None, pvc["spec"]["volumeName"]) or {}
    disk = Path(pv["spec"]["hostPath"]["path"]) / "disk.img"
    with open(disk, "wb") as f:
        f.truncate(8 * MiB)
        f.seek(MiB)
        f.write(b"\x11" * (128 * KiB))
    return disk


def _served(points: KubeVirtPoints, name: str) -> ServedPoint:
    def answered() -> ServedPoint | None:
        got = points.point(name, "default", "vm1", chain="loc", full=False, ttl=600)
        return got if isinstance(got, ServedPoint) else None

    return wait_until(answered, 60, step=0.3)


def _read(point: ServedPoint, tmp_path: Path, offset: int, length: int) -> bytes:
    ca = tmp_path / "point-ca.pem"
    ca.write_bytes(point.ca)
    [disk] = point.disks
    with PointVolume(
        disk.data, disk.map, point.token.decode(), ca_bundle=str(ca), changes=bool(disk.since)
    ) as volume:
        return volume.read(offset, length)


def _owner(obj: dict[str, Any] | None) -> str:
    return ((obj or {}).get("metadata") or {}).get("ownerReferences", [{}])[0].get("name", "")


def test_a_point_is_made_read_and_released(standin: StandIn, api: KubeApi, tmp_path: Path) -> None:
    kubectl(standin, "apply", "-f", "-", stdin=SETUP)
    disk = _disk(api)
    points = KubeVirtPoints(api)
    first = _served(points, "du-1")
    backup = api.get(*BACKUP, "default", "du-1") or {}
    assert backup["spec"] == {
        "source": {
            "apiGroup": "backup.kubevirt.io",
            "kind": "VirtualMachineBackupTracker",
            "name": "vm1-loc",
        },
        "mode": "Pull",
        "pvcName": "du-1",
        "tokenSecretRef": "du-1",
        "ttlDuration": "10m0s",
    }
    tracker = api.get(*TRACKER, "default", "vm1-loc") or {}
    assert tracker["spec"]["source"] == {
        "apiGroup": "kubevirt.io",
        "kind": "VirtualMachine",
        "name": "vm1",
    }
    scratch = api.get(*PVC, "default", "du-1")
    assert scratch is not None and _owner(scratch) == "du-1"
    assert scratch["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert _owner(api.get(*SECRET, "default", "du-1")) == "du-1"
    [served] = first.disks
    assert (served.name, served.since) == ("root", None) and first.checkpoint
    assert _read(first, tmp_path, 0, 8 * MiB) == disk.read_bytes()

    wait_until(lambda: points.release("du-1", "default"), 60, step=0.3)
    tracker = api.get(*TRACKER, "default", "vm1-loc") or {}
    assert tracker["status"]["latestCheckpoint"]["name"] == first.checkpoint
    assert wait_until(lambda: api.get(*SECRET, "default", "du-1") is None, 30, step=0.3)

    write = f"write -P 0x44 {2 * MiB} {64 * KiB}"
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", write, f"{disk}.cbt.qcow2"], check=True)
    later = _served(points, "du-2")
    [served] = later.disks
    assert served.since == first.checkpoint
    assert _read(later, tmp_path, 2 * MiB, 4096) == b"\x44" * 4096
    wait_until(lambda: points.release("du-2", "default"), 60, step=0.3)


def test_a_point_of_a_vm_that_does_not_exist_is_refused(api: KubeApi) -> None:
    with pytest.raises(PointError, match="VirtualMachine default/gone"):
        KubeVirtPoints(api).point("du-3", "default", "gone", chain="loc", full=False, ttl=60)


class NoKubeVirt:
    """A cluster's API that serves no kubevirt.io kinds."""

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        raise NotFoundError(f"the cluster serves no {kind} in {api_version}")

    def list(self, api_version: str, kind: str, *args: Any, **kwargs: Any) -> None:
        raise NotFoundError(f"the cluster serves no {kind} in {api_version}")


def test_a_cluster_without_kubevirt_has_no_vm_to_back_up() -> None:
    points = KubeVirtPoints(NoKubeVirt())  # type: ignore[arg-type]
    assert points.machines() == []
    with pytest.raises(PointError, match="serves no VirtualMachine in kubevirt"):
        points.point("du-4", "default", "vm1", chain="loc", full=False, ttl=60)
