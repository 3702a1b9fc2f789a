"""DataUpload through the controllers with the real backup engine: a stopped VM's disks backed
up, then incrementally; forced full; cancel; the operation timeout; one upload per VM."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess

import pytest
from control_support import stop_workers_under, wait_until
from datamover_support import PASSWORD, MoverDaemon, repository_held

from diskferry.backup import BackupResult
from diskferry.backup.repository import Repository
from diskferry.control.reconcilers.datamover.moverlife import MoverFailure
from diskferry.control.resources.dataupload import DataUpload
from diskferry.control.resources.model import API_VERSION
from diskferry.qemu import cbt
from diskferry.qemu.qmp import Qmp
from diskferry.qemu.session import FLEECE_NODE, FLEECE_SUFFIX

KiB = 1024
ENDED = ("Completed", "Failed", "Canceled")


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(tmp_path / "cache"))
    d = MoverDaemon(tmp_path / "data")
    d.location(tmp_path / "backups")
    yield d
    d.stop()
    stop_workers_under(tmp_path)


# the VM's disks stay on their CBT overlays only while CBT is on for the VM
TRACKED = {"diskferry.io/changed-block-tracking": "true"}


def write_through_overlay(claim, offset: int, length: int) -> None:
    """Write through the CBT overlay, as a running guest would, so the bitmap sees it."""
    overlay = cbt.overlay_path(str(claim))
    command = f"write -P 0x5a {offset} {length}"
    subprocess.run(
        ["qemu-io", "-f", "qcow2", "-c", command, overlay], check=True, capture_output=True
    )


def test_stopped_vm_full_then_incremental(daemon, tmp_path):
    tracked = daemon.disk("vd-a", data=os.urandom(300 * KiB), offset=1 << 20)
    daemon.disk("vd-b", data=os.urandom(100 * KiB))
    cbt.enable(str(tracked))
    daemon.vm("vm-a", ["vd-a", "vd-b"], labels=TRACKED)
    daemon.upload("up-1", "vm-a")
    first = daemon.wait_phase("DataUpload", "up-1", *ENDED)["status"]
    assert first["phase"] == "Completed", first
    assert first["snapshotID"] and first["acceptedTimestamp"] and first["completionTimestamp"]
    assert first["progress"]["bytesDone"] == first["progress"]["totalBytes"] >= 400 * KiB
    assert {d["name"]: d["type"] for d in first["disks"]} == {"vd-a": "full", "vd-b": "full"}
    assert first["node"]

    write_through_overlay(tracked, 64 * KiB, 64 * KiB)
    daemon.upload("up-2", "vm-a")
    second = daemon.wait_phase("DataUpload", "up-2", *ENDED)["status"]
    assert second["phase"] == "Completed", second
    by_disk = {d["name"]: d for d in second["disks"]}
    assert by_disk["vd-a"]["type"] == "incremental"
    assert by_disk["vd-a"]["bytesRead"] == 64 * KiB
    assert by_disk["vd-b"]["type"] == "incremental" and by_disk["vd-b"]["bytesRead"] == 0
    wait_until(lambda: "IncrementalBackup" in [e["reason"] for e in daemon.events("up-2")])
    with Repository.open(str(tmp_path / "backups"), PASSWORD) as repo:
        ids = {s.id for s in repo.list_snapshots()}
    assert {d["snapshotID"] for d in first["disks"] + second["disks"]} <= ids
    assert not list((tmp_path / "data" / "jobs").glob("du-*"))


def test_forced_full_leaves_the_chain_usable(daemon):
    tracked = daemon.disk("vd-a", data=os.urandom(64 * KiB))
    cbt.enable(str(tracked))
    daemon.vm("vm-a", ["vd-a"], labels=TRACKED)
    daemon.upload("up-1", "vm-a")
    assert daemon.wait_phase("DataUpload", "up-1", *ENDED)["status"]["phase"] == "Completed"
    daemon.upload_with("up-2", "vm-a", {"diskferry.io/force-full-backup": "true"})
    forced = daemon.wait_phase("DataUpload", "up-2", *ENDED)["status"]
    assert forced["disks"][0]["type"] == "full"
    assert "asked" in forced["disks"][0]["reason"]
    daemon.upload("up-3", "vm-a")
    after = daemon.wait_phase("DataUpload", "up-3", *ENDED)["status"]
    assert after["disks"][0]["type"] == "incremental", after


def test_waits_for_its_location(daemon):
    daemon.disk("vd-a", data=b"x" * 4096)
    daemon.vm("vm-a", ["vd-a"])
    daemon.upload("up-1", "vm-a", backupStorageLocation="elsewhere")
    wait_until(
        lambda: (
            "BackupStorageLocation elsewhere"
            in ((daemon.get("DataUpload", "up-1") or {}).get("status", {}).get("message", ""))
        )
    )
    assert daemon.get("DataUpload", "up-1")["status"]["phase"] == "New"


def test_missing_vm_fails_saying_so(daemon):
    daemon.upload("up-1", "nowhere")
    status = daemon.wait_phase("DataUpload", "up-1", *ENDED)["status"]
    assert status["phase"] == "Failed"
    assert "VirtualMachine default/nowhere does not exist" in status["message"]


@pytest.fixture
def running_vm(daemon):
    """VM vm-a Running on a CBT disk vd-a, in a QEMU that something else runs (`spec.qmpSocket`,
    a guest with nothing to boot), so the daemon watches it and never stops it; the
    disk's claim and the QMP socket."""
    claim = daemon.disk("vd-a", data=os.urandom(128 * KiB))
    cbt.enable(str(claim))
    sockets = daemon.data_dir / "vm-sockets"  # where the daemon takes a VM's spec.qmpSocket
    sockets.mkdir(mode=0o700)
    monitor = os.path.join(sockets, "qmp.sock")
    overlay = cbt.overlay_path(str(claim))
    qemu = subprocess.Popen(
        [
            "qemu-system-x86_64", "-machine", "pc", "-accel", "tcg", "-m", "16M",
            "-nodefaults", "-display", "none",
            "--blockdev", f"driver=file,filename={overlay},node-name=file0",
            "--blockdev", "driver=qcow2,file=file0,node-name=vd-a",
            "--chardev", f"socket,id=mon,path={monitor},server=on,wait=off",
            "--mon", "chardev=mon,mode=control",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_until(lambda: os.path.exists(monitor), 30)
    refs = [{"kind": "VirtualDisk", "name": "vd-a"}]
    spec = {"runPolicy": "Manual", "blockDeviceRefs": refs, "qmpSocket": monitor}
    body = {"apiVersion": API_VERSION, "kind": "VirtualMachine", "spec": spec}
    body["metadata"] = {"name": "vm-a", "labels": TRACKED}
    daemon.objects.create(daemon.registry.by_kind("VirtualMachine"), "default", body)
    daemon.wait_phase("VirtualMachine", "vm-a", "Running", timeout=60)
    yield claim, monitor
    qemu.terminate()
    qemu.wait(10)
    shutil.rmtree(sockets, ignore_errors=True)


def test_running_vm_without_agent_is_crash_consistent_with_a_warning(daemon, running_vm, caplog):
    caplog.set_level(logging.INFO, "diskferry.control")
    daemon.upload("up-1", "vm-a")
    status = daemon.wait_phase("DataUpload", "up-1", *ENDED)["status"]
    assert status["phase"] == "Completed", status
    assert status["consistency"] == "crash-consistent"
    warnings = [e for e in daemon.events("up-1") if e["reason"] == "QuiesceUnavailable"]
    assert warnings and warnings[0]["type"] == "Warning"
    assert "crash-consistent" in warnings[0]["message"]
    logged = [r.getMessage() for r in caplog.records if "data mover log" in r.getMessage()]
    assert logged and "DataUpload default/up-1 (VirtualMachine default/vm-a)" in logged[0]


def test_deleting_an_upload_of_a_running_vm_removes_its_fleecing(daemon, running_vm):
    claim, monitor = running_vm
    daemon.mover_config(bandwidthLimit="4Ki")  # 128 KiB take half a minute to read
    fleece = cbt.overlay_path(str(claim)) + FLEECE_SUFFIX
    daemon.upload_with("up-1", "vm-a", {"diskferry.io/skip-quiesce": "true"})
    upload = daemon.wait_phase("DataUpload", "up-1", "InProgress")
    assert "diskferry.io/data-mover" in upload["metadata"]["finalizers"]
    wait_until(lambda: os.path.exists(fleece), 30)
    daemon.objects.delete(daemon.registry.by_kind("DataUpload"), "default", "up-1")
    wait_until(lambda: daemon.get("DataUpload", "up-1") is None, 30)
    assert not os.path.exists(fleece)
    with Qmp(monitor, timeout=10) as qmp:
        nodes = [n["node-name"] for n in qmp.command("query-named-block-nodes", flat=True)]
        assert not [n for n in nodes if n.startswith(FLEECE_NODE)], nodes
        assert qmp.command("query-block-exports") == []
        assert qmp.command("query-block-jobs") == []


def test_required_quiesce_without_agent_fails(daemon, running_vm):
    daemon.upload_with("up-1", "vm-a", {"diskferry.io/require-quiesce": "true"})
    status = daemon.wait_phase("DataUpload", "up-1", *ENDED)["status"]
    assert status["phase"] == "Failed"
    assert "require-quiesce" in status["message"]


def test_skipped_quiesce_gives_no_warning(daemon, running_vm):
    daemon.upload_with("up-1", "vm-a", {"diskferry.io/skip-quiesce": "true"})
    assert daemon.wait_phase("DataUpload", "up-1", *ENDED)["status"]["phase"] == "Completed"
    assert "QuiesceUnavailable" not in {e["reason"] for e in daemon.events("up-1")}


def test_a_full_backup_that_read_nothing_from_a_disk_with_data_fails(daemon):
    daemon.disk("vd-a", data=os.urandom(64 * KiB))
    daemon.vm("vm-a", ["vd-a"])
    daemon.upload("up-1", "vm-a", backupStorageLocation="missing")
    upload = DataUpload.model_validate(daemon.get("DataUpload", "up-1"))
    reconciler = daemon.controllers.job_owners["DataUpload"]
    read_nothing = BackupResult.model_validate(
        {
            "backup": "b",
            "vm": "default.vm-a",
            "consistency": "crash",
            "disks": [
                {
                    "disk": "vd-a",
                    "snapshot": "s",
                    "type": "full",
                    "reason": "no earlier backup of this disk",
                    "cbt": False,
                    "bytesRead": 0,
                    "bytesNew": 0,
                    "bytesUploaded": 0,
                    "seconds": 0.1,
                }
            ],
        }
    )
    with pytest.raises(MoverFailure, match="read no data although the disk holds") as failed:
        reconciler.completed(upload, read_nothing)
    assert failed.value.reason == "ZeroData"


def test_max_incremental_backups_makes_the_next_one_full(daemon):
    tracked = daemon.disk("vd-a", data=os.urandom(64 * KiB))
    cbt.enable(str(tracked))
    daemon.vm("vm-a", ["vd-a"], labels=TRACKED)
    daemon.mover_config(maxIncrementalBackups=1)
    types = []
    for i in range(3):
        daemon.upload(f"up-{i}", "vm-a")
        status = daemon.wait_phase("DataUpload", f"up-{i}", *ENDED)["status"]
        types.append(status["disks"][0]["type"])
    assert types == ["full", "incremental", "full"]
    assert "reached the limit of 1" in status["disks"][0]["reason"]


def test_a_job_its_worker_would_refuse_fails_where_it_is_built_and_starts_none(daemon, tmp_path):
    daemon.disk("vd-a", data=os.urandom(64 * KiB))
    daemon.vm("vm-a", ["vd-a"])
    daemon.upload_with("up", "vm-a", {"diskferry.io/max-incremental-backups": "-1"})
    status = daemon.wait_phase("DataUpload", "up", *ENDED)["status"]
    assert status["phase"] == "Failed", status
    assert "max_incrementals: Input should be greater than or equal to 0" in status["message"]
    failed = [e for e in daemon.events("up") if e["type"] == "Warning"]
    assert [e["reason"] for e in failed] == ["InvalidJob"]
    assert not list((tmp_path / "data" / "jobs").glob("du-*"))
    assert not list((tmp_path / "data" / "jobs" / "failed").glob("du-*"))


def test_an_upload_survives_a_daemon_restart(daemon, tmp_path, monkeypatch):
    daemon.disk("vd-a", data=os.urandom(64 * KiB))
    daemon.vm("vm-a", ["vd-a"])
    with repository_held(tmp_path / "backups"):
        daemon.upload("up", "vm-a")
        daemon.wait_phase("DataUpload", "up", "InProgress")
        daemon.stop()
    again = MoverDaemon(tmp_path / "data")
    try:
        status = again.wait_phase("DataUpload", "up", *ENDED)["status"]
    finally:
        again.stop()
    assert status["phase"] == "Completed", status


def test_a_read_only_location_takes_no_upload(daemon, tmp_path):
    daemon.apply(
        "BackupStorageLocation",
        "ro",
        {
            "provider": "filesystem",
            "objectStorage": {"bucket": str(tmp_path / "backups")},
            "encryptionSecretRef": {"name": "repo-pass", "key": "password"},
            "accessMode": "ReadOnly",
        },
    )
    daemon.wait_phase("BackupStorageLocation", "ro", "Available")
    daemon.disk("vd-a", data=b"x" * 4096)
    daemon.vm("vm-a", ["vd-a"])
    daemon.upload("up", "vm-a", backupStorageLocation="ro")
    status = daemon.wait_phase("DataUpload", "up", *ENDED)["status"]
    assert status["phase"] == "Failed" and "ReadOnly" in status["message"]
