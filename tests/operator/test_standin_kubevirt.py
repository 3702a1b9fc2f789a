"""The stand-in's KubeVirt through kubectl: a Pull VirtualMachineBackup through a tracker waits
for its token, then is served as KubeVirt serves it (ExportReady, includedVolumes' data and map
endpoints behind the token, the CA in endpointCert), its data the VM's disk byte for byte;
deleted, it puts its checkpoint into the tracker; the next one is Incremental, its map showing
exactly the run written since, and at its TTL it completes and moves the tracker on."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from daemon_support import kubectl
from kubevirt_vm import vm_manifests
from standin_support import StandIn, start_standin

MiB = 1 << 20
KiB = 1 << 10
TOKEN = "pull-token"
BACKUPS = "virtualmachinebackups.backup.kubevirt.io"
TRACKERS = "virtualmachinebackuptrackers.backup.kubevirt.io"
TRACKER = """\
---
apiVersion: backup.kubevirt.io/v1alpha1
kind: VirtualMachineBackupTracker
metadata: {name: tracker1, namespace: default}
spec:
  source: {apiGroup: kubevirt.io, kind: VirtualMachine, name: vm1}
"""
SETUP = vm_manifests("16Mi") + TRACKER


def _backup(name: str, ttl: str = "2h") -> str:
    return f"""\
apiVersion: backup.kubevirt.io/v1alpha1
kind: VirtualMachineBackup
metadata: {{name: {name}, namespace: default}}
spec:
  source: {{apiGroup: backup.kubevirt.io, kind: VirtualMachineBackupTracker, name: tracker1}}
  mode: Pull
  pvcName: scratch
  tokenSecretRef: pull-token
  ttlDuration: {ttl}
"""


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    base = tmp_path_factory.mktemp("standin")
    started = start_standin(base / "data", base / "standin.log")
    yield started
    assert started.stop() == 0


def _get(standin: StandIn, *what: str) -> dict[str, Any] | None:
    out = kubectl(standin, "get", *what, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == kind:
            return dict(found)
    return {}


def _progressing(standin: StandIn, name: str, reason: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        backup = _get(standin, BACKUPS, name)
        return backup if _condition(backup, "Progressing").get("reason") == reason else None

    return wait_until(reached, 60, step=0.3)


def _completed(standin: StandIn, name: str) -> dict[str, Any] | None:
    backup = _get(standin, BACKUPS, name)
    return backup if _condition(backup, "Complete").get("status") == "True" else None


def _fetch(url: str, ca: str) -> bytes:
    context = ssl.create_default_context(cadata=ca)
    request = urllib.request.Request(url, headers={"x-kubevirt-export-token": TOKEN})
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:
        return bytes(answer.read())


def _disk(standin: StandIn) -> Path:
    """The VM's disk in the claim's volume, with data at 1 MiB and 9 MiB."""
    pvc = wait_until(
        lambda: (p := _get(standin, "pvc", "root")) and p["status"].get("phase") == "Bound" and p,
        30,
        step=0.3,
    )
    pv = _get(standin, "pv", pvc["spec"]["volumeName"]) or {}
    disk = Path(pv["spec"]["hostPath"]["path"]) / "disk.img"
    with open(disk, "wb") as f:
        f.truncate(16 * MiB)
        f.seek(MiB)
        f.write(b"\x11" * (256 * KiB))
        f.seek(9 * MiB)
        f.write(b"\x22" * MiB)
    return disk


def test_a_pull_backup_is_served_then_moves_its_tracker_on(standin: StandIn) -> None:
    kubectl(standin, "apply", "-f", "-", stdin=SETUP)
    disk = _disk(standin)
    kubectl(standin, "apply", "-f", "-", stdin=_backup("b1"))
    waiting = _progressing(standin, "b1", "Initializing")
    assert "pull-token" in _condition(waiting, "Progressing")["message"]
    token = base64.b64encode(TOKEN.encode()).decode()
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull-token"}}
    kubectl(standin, "apply", "-f", "-", stdin=json.dumps({**secret, "data": {"token": token}}))

    served = _progressing(standin, "b1", "ExportReady")
    status = served["status"]
    [volume] = status["includedVolumes"]
    assert (volume["volumeName"], volume["type"], status["type"]) == ("rootdisk", "Full", "Full")
    assert "backup.kubevirt.io/vmbackup-protection" in served["metadata"]["finalizers"]
    assert _fetch(volume["dataEndpoint"], status["endpointCert"]) == disk.read_bytes()
    page = json.loads(_fetch(volume["mapEndpoint"], status["endpointCert"]))
    data = [(e["offset"], e["length"]) for e in page["extents"] if e["type"] == "data"]
    assert data == [(MiB, 256 * KiB), (9 * MiB, MiB)]
    vm = _get(standin, "virtualmachines.kubevirt.io", "vm1") or {}
    assert vm["status"]["changedBlockTracking"] == {"state": "Enabled"}

    kubectl(standin, "delete", BACKUPS, "b1", "--timeout=60s")
    tracker = _get(standin, TRACKERS, "tracker1") or {}
    assert tracker["status"]["latestCheckpoint"]["name"] == status["checkpointName"]

    overlay = f"{disk}.cbt.qcow2"
    write = f"write -P 0x33 {4 * MiB} {64 * KiB}"
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", write, overlay], check=True)
    kubectl(standin, "apply", "-f", "-", stdin=_backup("b2", ttl="20s"))
    served = _progressing(standin, "b2", "ExportReady")
    status = served["status"]
    [volume] = status["includedVolumes"]
    assert (volume["type"], status["type"]) == ("Incremental", "Incremental")
    page = json.loads(_fetch(volume["mapEndpoint"], status["endpointCert"]))
    assert [(e["offset"], e["length"]) for e in page["extents"] if e["type"] == "dirty"] == [
        (4 * MiB, 64 * KiB)
    ]
    query = f"?offset={4 * MiB}&length=4096"
    assert _fetch(volume["dataEndpoint"] + query, status["endpointCert"]) == b"\x33" * 4096

    complete = wait_until(lambda: _completed(standin, "b2"), 60, step=0.5)
    assert complete["status"]["checkpointName"] == status["checkpointName"]
    tracker = _get(standin, TRACKERS, "tracker1") or {}
    assert tracker["status"]["latestCheckpoint"]["name"] == status["checkpointName"]
