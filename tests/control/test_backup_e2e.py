"""Backup and Restore end to end with real VMs and the real engines: full then incremental
points of three VMs restored byte-exact on a directory and on S3; the data mover cap seen in
the watch events; a restored VM kept off until all its disks are back; a Backup of a VM whose
disk is missing PartiallyFailed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from backup_e2e_support import (
    CBT_LABELS,
    PLAIN_LABELS,
    EventLog,
    Seen,
    backup_manifest,
    directory_location,
    guest_write,
    mover_config,
    offline_write,
    restore_manifest,
    s3_location,
    short_base,
    vm_daemon,
    vm_manifest,
    worker_pids,
)
from backup_restore_support import apply, disk_file, get, wait_for
from control_support import wait_until
from daemon_support import Served, free_port, kubectl, start_daemon
from datamover_support import PASSWORD, make_bucket, repository_held, running_moto
from reconcile_support import Daemon
from vm_support import cbt_state

from diskferry.base import procstat
from diskferry.control.resources.model import API_VERSION
from diskferry.qemu.qmp import Qmp
from diskferry.qemu.session import FLEECE_NODE, FLEECE_SUFFIX

__all__ = ["short_base", "vm_daemon"]

KiB = 1024
MiB = 1 << 20
FINISHED = ("Completed", "PartiallyFailed", "Failed")
BUCKET = "diskferry-e2e"
FILLED = sorted(["InProgress"] * 3 + ["Prepared"] * 9)


def ready_disks(daemon: Daemon, data: dict[str, bytes], size: str = "4Mi") -> None:
    """Ready VirtualDisks in default, made at once, each holding its `data` at 1 MiB."""
    for name in data:
        daemon.apply("VirtualDisk", name, {"persistentVolumeClaim": {"size": size}})
    for name, held in data.items():
        with disk_file(daemon, "default", name).open("r+b") as f:
            f.seek(MiB)
            f.write(held)


def test_a_vm_whose_disk_is_missing_leaves_the_backup_partially_failed(vm_daemon, short_base):
    directory_location(vm_daemon, short_base / "backups")
    ready_disks(vm_daemon, {"vd-good": os.urandom(64 * KiB)})
    apply(
        vm_daemon,
        [
            vm_manifest("vm-good", "AlwaysOff", ["vd-good"], PLAIN_LABELS),
            vm_manifest("vm-bad", "AlwaysOff", ["vd-gone"], PLAIN_LABELS),
            backup_manifest("b1"),
        ],
    )
    status = wait_for(vm_daemon, "Backup", "default", "b1", *FINISHED)["status"]
    assert status["phase"] == "PartiallyFailed", status
    assert status["message"] == "1 of 2 VirtualMachines failed"
    assert status["progress"] == {"totalItems": 2, "itemsBackedUp": 1, "itemsFailed": 1}
    by_disk = {v["name"]: v for v in status["volumes"]}
    assert by_disk.keys() == {"vd-good", "vd-gone"}
    assert by_disk["vd-good"]["phase"] == "Completed" and by_disk["vd-good"]["snapshotID"]
    assert by_disk["vd-gone"]["phase"] == "Failed"
    assert by_disk["vd-gone"]["virtualMachine"] == "vm-bad"
    assert "VirtualDisk default/vd-gone does not exist" in by_disk["vd-gone"]["reason"]
    assert "dataUpload" not in by_disk["vd-gone"]
    assert get(vm_daemon, "DataUpload", "default", "b1-vm-bad") is None
    warnings = wait_until(
        lambda: [e for e in vm_daemon.events("b1") if e["reason"] == "PartiallyFailed"]
    )
    assert warnings[0]["type"] == "Warning"


@pytest.mark.long
def test_twelve_uploads_under_a_cap_of_three_never_run_more_than_three(vm_daemon, short_base):
    """A Backup of 12 stopped VMs with maxConcurrentDataMovers 3: while the repository is held
    the cap fills (3 InProgress, 9 Prepared); the watch events never show 4 InProgress."""
    directory_location(vm_daemon, short_base / "backups")
    wait_for(vm_daemon, "BackupStorageLocation", "default", "repo", "Available")
    mover_config(vm_daemon, maxConcurrentDataMovers=3)
    ready_disks(vm_daemon, {f"vd-{i}": bytes([i + 1]) * 8192 for i in range(12)}, size="2Mi")
    apply(
        vm_daemon,
        [vm_manifest(f"vm-{i}", "AlwaysOff", [f"vd-{i}"], PLAIN_LABELS) for i in range(12)],
    )
    log = EventLog(vm_daemon)
    try:
        with repository_held(short_base / "backups"):
            apply(vm_daemon, [backup_manifest("b12")])
            wait_until(lambda: sorted(map(str, log.phases("DataUpload"))) == FILLED, 60)
        backup = wait_for(vm_daemon, "Backup", "default", "b12", *FINISHED)["status"]
        assert backup["phase"] == "Completed", backup
        wait_until(lambda: log.phases("DataUpload") == ["Completed"] * 12)
    finally:
        log.stop()
    assert log.most_at_once("DataUpload", "InProgress") == 3


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 with the bucket the locations use."""
    with running_moto() as endpoint:
        make_bucket(endpoint, BUCKET)
        yield endpoint


@pytest.fixture(params=["directory", "s3"])
def located(request, vm_daemon: Daemon, short_base: Path) -> Daemon:
    """The daemon with the Available location `repo` on a directory, or on S3."""
    if request.param == "directory":
        directory_location(vm_daemon, short_base / "backups")
    else:
        s3_location(vm_daemon, request.getfixturevalue("s3_endpoint"), BUCKET)
    wait_for(vm_daemon, "BackupStorageLocation", "default", "repo", "Available")
    return vm_daemon


def disk_bytes(daemon: Daemon, namespace: str, names: list[str]) -> dict[str, bytes]:
    """The bytes of each VirtualDisk, by name."""
    return {n: disk_file(daemon, namespace, n).read_bytes() for n in names}


def running(daemon: Daemon, name: str) -> tuple[str, str]:
    """The Running VM's QMP socket and its first disk's node."""
    status = daemon.wait_phase("VirtualMachine", name, "Running", timeout=60)["status"]
    return status["qmpSocket"], status["blockDevices"][0]["target"]


@pytest.mark.long
def test_three_vms_backed_up_full_then_incremental_each_point_restored(located: Daemon):
    """A stopped VM and a running one with CBT, and a stopped one without: a Backup, writes
    (the running guest's through its QEMU), a second Backup whose uploads are incremental where
    CBT is on and full where not; each point restored by a Restore into a namespace of its own,
    every disk byte-exact as it was at that point."""
    daemon = located
    mover_config(daemon, maxConcurrentDataMovers=3)
    disks = ["vd-off", "vd-cbt", "vd-raw"]
    ready_disks(daemon, {n: os.urandom(96 * KiB) for n in disks}, size="16Mi")
    apply(
        daemon,
        [
            vm_manifest("vm-off", "AlwaysOff", ["vd-off"], CBT_LABELS),
            vm_manifest("vm-cbt", "AlwaysOn", ["vd-cbt"], CBT_LABELS),
            vm_manifest("vm-raw", "AlwaysOff", ["vd-raw"], PLAIN_LABELS),
        ],
    )
    for name in ("vm-off", "vm-raw"):
        daemon.wait_phase("VirtualMachine", name, "Stopped", timeout=60)
    for name in ("vm-off", "vm-cbt"):
        wait_until(lambda n=name: cbt_state(daemon, n) == "Enabled", 60)
    cbt_socket, cbt_node = running(daemon, "vm-cbt")

    first = disk_bytes(daemon, "default", disks)
    apply(daemon, [backup_manifest("b1")])
    done = wait_for(daemon, "Backup", "default", "b1", *FINISHED)["status"]
    assert done["phase"] == "Completed", done

    guest_write(cbt_socket, cbt_node, "write -P 0x5a 2M 64k")
    with disk_file(daemon, "default", "vd-raw").open("r+b") as raw:
        raw.seek(3 * MiB)
        raw.write(b"\x6b" * 64 * KiB)
    offline_write(disk_file(daemon, "default", "vd-off"), "write -P 0x7c 1M 64k")
    second = disk_bytes(daemon, "default", disks)
    assert all(second[n] != first[n] for n in disks)
    apply(daemon, [backup_manifest("b2")])
    done = wait_for(daemon, "Backup", "default", "b2", *FINISHED)["status"]
    assert done["phase"] == "Completed", done
    for vm in ("vm-off", "vm-cbt"):
        [moved] = get(daemon, "DataUpload", "default", f"b2-{vm}")["status"]["disks"]
        assert moved["type"] == "incremental", moved
        assert moved["bytesRead"] == 64 * KiB
    [moved] = get(daemon, "DataUpload", "default", "b2-vm-raw")["status"]["disks"]
    assert moved["type"] == "full", moved

    apply(
        daemon, [restore_manifest("r1", "b1", "point-1"), restore_manifest("r2", "b2", "point-2")]
    )
    for name, namespace, expected in (("r1", "point-1", first), ("r2", "point-2", second)):
        restore = wait_for(daemon, "Restore", "default", name, *FINISHED)["status"]
        assert restore["phase"] == "Completed", restore
        assert disk_bytes(daemon, namespace, disks) == expected


@pytest.fixture
def two_disk_backup(vm_daemon: Daemon, short_base: Path) -> dict[str, bytes]:
    """The running VM vm-two (CBT on) on vd-a and vd-b, backed up by b1; its disks' bytes."""
    directory_location(vm_daemon, short_base / "backups")
    wait_for(vm_daemon, "BackupStorageLocation", "default", "repo", "Available")
    ready_disks(vm_daemon, {"vd-a": os.urandom(64 * KiB), "vd-b": os.urandom(80 * KiB)})
    apply(vm_daemon, [vm_manifest("vm-two", "AlwaysOn", ["vd-a", "vd-b"], CBT_LABELS)])
    vm_daemon.wait_phase("VirtualMachine", "vm-two", "Running", timeout=60)
    wait_until(lambda: cbt_state(vm_daemon, "vm-two") == "Enabled", 60)
    apply(vm_daemon, [backup_manifest("b1")])
    done = wait_for(vm_daemon, "Backup", "default", "b1", *FINISHED)["status"]
    assert done["phase"] == "Completed", done
    return disk_bytes(vm_daemon, "default", ["vd-a", "vd-b"])


def is_vm(seen: Seen, namespace: str) -> bool:
    return seen.kind == "VirtualMachine" and seen.object["metadata"]["namespace"] == namespace


def test_a_restored_vm_stays_off_until_both_its_disks_are_back(vm_daemon, two_disk_backup):
    """In the watch events: the VM is created AlwaysOff before either DataDownload is
    InProgress, and gets AlwaysOn back (and runs) only after both are Completed."""
    log = EventLog(vm_daemon)
    try:
        apply(vm_daemon, [restore_manifest("r1", "b1", "restored")])
        restore = wait_for(vm_daemon, "Restore", "default", "r1", *FINISHED)["status"]
        assert restore["phase"] == "Completed", restore
        wait_until(lambda: is_running(vm_daemon, "restored", "vm-two"), 60)
    finally:
        log.stop()
    downloads = ["r1-vm-two-vd-a", "r1-vm-two-vd-b"]
    created = log.first(lambda s: is_vm(s, "restored"))
    assert created >= 0 and log.seen[created].object["spec"]["runPolicy"] == "AlwaysOff"
    started = [log.reached("DataDownload", d, "InProgress") for d in downloads]
    assert 0 <= created < min(started)
    both_back = max(log.reached("DataDownload", d, "Completed") for d in downloads)
    assert min(started) < both_back
    turned_on = log.first(
        lambda s: is_vm(s, "restored") and s.object["spec"]["runPolicy"] != "AlwaysOff"
    )
    assert log.seen[turned_on].object["spec"]["runPolicy"] == "AlwaysOn"
    assert both_back < turned_on
    ran = log.first(lambda s: is_vm(s, "restored") and s.phase == "Running")
    assert turned_on < ran
    assert disk_bytes(vm_daemon, "restored", ["vd-a", "vd-b"]) == two_disk_backup


def test_a_restored_vm_is_left_off_with_an_event_when_a_disk_fails(vm_daemon, two_disk_backup):
    """vd-b exists already where the VM goes: its DataDownload fails, vd-a's completes, and
    the VM stays AlwaysOff and stopped, a Warning Event saying so."""
    apply(
        vm_daemon,
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "taken"}},
            {
                "apiVersion": API_VERSION,
                "kind": "VirtualDisk",
                "metadata": {"name": "vd-b", "namespace": "taken"},
                "spec": {"persistentVolumeClaim": {"size": "4Mi"}},
            },
        ],
    )
    wait_for(vm_daemon, "VirtualDisk", "taken", "vd-b", "Ready")
    apply(vm_daemon, [restore_manifest("r2", "b1", "taken")])
    restore = wait_for(vm_daemon, "Restore", "default", "r2", *FINISHED)["status"]
    assert restore["phase"] == "Failed", restore
    [machine] = restore["virtualMachines"]
    assert machine["phase"] == "Failed"
    assert {d["name"]: d["phase"] for d in machine["disks"]} == {
        "vd-a": "Completed",
        "vd-b": "Failed",
    }
    vm = get(vm_daemon, "VirtualMachine", "taken", "vm-two")
    assert vm["spec"]["runPolicy"] == "AlwaysOff"
    assert vm["status"]["phase"] == "Stopped"
    [left] = [e for e in vm_daemon.events("r2") if e["reason"] == "VirtualMachineLeftOff"]
    assert left["type"] == "Warning" and "taken/vm-two left AlwaysOff" in left["message"]


def is_running(daemon: Daemon, namespace: str, name: str) -> bool:
    """Whether the VM is Running."""
    vm = get(daemon, "VirtualMachine", namespace, name) or {}
    return (vm.get("status") or {}).get("phase") == "Running"


SERVED = """\
apiVersion: v1
kind: Secret
metadata: {{name: repo-pass, namespace: default}}
stringData: {{password: {password}}}
---
apiVersion: diskferry.io/v1alpha1
kind: BackupStorageLocation
metadata: {{name: repo, namespace: default}}
spec:
  provider: filesystem
  objectStorage: {{bucket: {bucket}}}
  encryptionSecretRef: {{name: repo-pass, key: password}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: vd-k, namespace: default}}
spec:
  persistentVolumeClaim: {{size: 16Mi}}
"""

SERVED_VM = """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualMachine
metadata:
  name: vm-k
  namespace: default
  labels: {app: web, diskferry.io/changed-block-tracking: "true"}
spec:
  runPolicy: AlwaysOn
  blockDeviceRefs: [{kind: VirtualDisk, name: vd-k}]
  memory: {size: 64Mi}
  terminationGracePeriodSeconds: 0  # no guest OS to power off on an ACPI request
"""


def kubectl_json(served: Served, *args: str) -> dict:
    """`kubectl get ... -o json`, parsed."""
    return json.loads(kubectl(served, "get", *args, "-o", "json"))


@pytest.mark.long
def test_a_daemon_killed_mid_upload_finishes_it_cleanly_after_a_restart(short_base: Path):
    """`diskferry serve` SIGKILLed while the worker of a running VM's upload has its fleecing
    file (the worker held there, so the moment is certain); the next daemon takes the worker
    over, the Backup completes, `diskferry repo check --read-data` passes on the repository,
    and neither a scratch directory nor a fleecing file nor node is left."""
    data, bucket = short_base / "data", short_base / "backups"
    options = ("--proxy-port", str(free_port()))
    first = start_daemon(data, short_base / "daemon.log", options=options)
    worker = None
    try:
        kubectl(first, "apply", "-f", "-", stdin=SERVED.format(password=PASSWORD, bucket=bucket))
        kubectl(first, "wait", "vd", "vd-k", "--for=jsonpath={.status.phase}=Ready")
        status = kubectl_json(first, "vd", "vd-k")["status"]
        claim = data / "volumes" / status["storageClassName"] / "default"
        claim /= f"{status['target']['persistentVolumeClaimName']}.img"
        with claim.open("r+b") as f:
            f.write(os.urandom(12 * MiB))
        kubectl(first, "apply", "-f", "-", stdin=SERVED_VM)
        kubectl(first, "wait", "vm", "vm-k", "--for=jsonpath={.status.phase}=Running")
        kubectl(first, "wait", "bsl", "repo", "--for=jsonpath={.status.phase}=Available")
        kubectl(first, "apply", "-f", "-", stdin=yaml.safe_dump(backup_manifest("b1")))
        wait_until(lambda: fleecing(data), 120, step=0.01)
        [worker] = worker_pids(data, "diskferry.backup.worker", job="du-")
        os.kill(worker, signal.SIGSTOP)
        assert fleecing(data)
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
    assert procstat.start_time(worker) is not None  # the worker outlived its daemon

    second = start_daemon(data, short_base / "daemon.log", port=first.port, options=options)
    try:
        os.kill(worker, signal.SIGCONT)
        done = "--for=jsonpath={.status.completionTimestamp}"
        kubectl(second, "wait", "backup", "b1", done, "--timeout=180s")
        backup = kubectl_json(second, "backup", "b1")
        assert backup["status"]["phase"] == "Completed", backup["status"]
        [volume] = backup["status"]["volumes"]
        assert volume["phase"] == "Completed" and volume["snapshotID"]
        upload = kubectl_json(second, "dataupload", "b1-vm-k")["status"]
        assert upload["disks"][0]["type"] == "full" and upload["disks"][0]["bytesRead"] > 0
        wait_until(lambda: procstat.start_time(worker) is None, 30)
        assert not fleecing(data)
        assert not list((data / "jobs").glob("du-*"))
        assert not list((data / "jobs" / "failed").glob("du-*"))
        socket = kubectl_json(second, "vm", "vm-k")["status"]["qmpSocket"]
        with Qmp(socket) as qmp:
            nodes = [n["node-name"] for n in qmp.command("query-named-block-nodes")]
        assert not [n for n in nodes if n.startswith(FLEECE_NODE)]
        env = {**os.environ, "DISKFERRY_PASSWORD": PASSWORD}
        check = [sys.executable, "-m", "diskferry.cli.main", "repo", "check", "--repo"]
        checked = subprocess.run(
            [*check, str(bucket), "--read-data"], env=env, capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stderr
    finally:
        assert second.stop() == 0


def fleecing(data: Path) -> list[Path]:
    """The fleecing files of backups under `data`."""
    return list(data.glob(f"volumes/**/*{FLEECE_SUFFIX}"))
