"""VirtualMachineBackup and VirtualMachineBackupTracker end to end, on a running QEMU VM with
CBT: Pull serves the point's data and map endpoints with the token until its TTL, full then
incremental through the tracker; Push lands full then incremental in the repository; a
missing VM fails."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

import pytest
from control_support import wait_until
from vm_support import create_vm, ready_disk
from vmbackup_support import (
    ENDED,
    PASSWORD,
    backup,
    condition,
    daemon,
    guest_write,
    location,
    running_vm,
    through,
    tracker,
)
from vmexport_support import ExportDaemon, connect, get_when_up

from diskferry.backup.repository import Repository
from diskferry.control.reconcilers.kvbackup import vmbackuppull
from diskferry.export.token import TOKEN_HEADER
from diskferry.qemu.qmp import Qmp

__all__ = ["daemon"]
KiB, MiB = 1024, 1 << 20
BACKUP = "VirtualMachineBackup"
PUSH = {"mode": "Push", "storageLocation": "repo"}


def fetch(url: str, ca_pem: str, token: str, query: str = "") -> tuple[int, bytes]:
    """GET `url` (with `query`) and the export token: status and body."""
    conn = connect(url, ca_pem)
    try:
        path = urlsplit(url).path + (f"?{query}" if query else "")
        conn.request("GET", path, headers={TOKEN_HEADER: token})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def dirty_runs(url: str, ca_pem: str, token: str) -> list[tuple[int, int]]:
    """The dirty extents the map endpoint lists, as (offset, length)."""
    status, body = fetch(url, ca_pem, token)
    assert status == 200, body
    page = json.loads(body)
    assert page["next_offset"] is None
    return [(e["offset"], e["length"]) for e in page["extents"] if e["type"] == "dirty"]


def block_node(vm: dict[str, Any]) -> dict[str, Any]:
    """The VM's disk node as its QEMU reports it."""
    target = vm["blockDevices"][0]["target"]
    with Qmp(vm["qmpSocket"]) as qmp:
        nodes = qmp.command("query-named-block-nodes", flat=True)
    assert not [n for n in nodes if n["node-name"].startswith("diskferry-fleece")]
    return next(n for n in nodes if n["node-name"] == target)


def ready(daemon: ExportDaemon, name: str) -> dict[str, Any]:
    """The backup's status once it serves its point."""
    obj = daemon.wait_phase(BACKUP, name, "Ready", *ENDED, timeout=90)
    assert obj["status"]["phase"] == "Ready", obj["status"]
    return obj["status"]


def complete(daemon: ExportDaemon, name: str) -> dict[str, Any]:
    """The backup's status once it ended, Complete."""
    obj = daemon.wait_phase(BACKUP, name, *ENDED, timeout=120)
    assert obj["status"]["phase"] == "Complete", obj["status"]
    assert condition(obj, "Complete")["status"] == "True"
    assert condition(obj, "Progressing")["status"] == "False"
    return obj["status"]


def latest(daemon: ExportDaemon, name: str) -> dict[str, Any]:
    """The tracker's latest checkpoint."""
    return (daemon.get("VirtualMachineBackupTracker", name) or {})["status"]["latestCheckpoint"]


def test_pull_full_then_incremental_through_the_tracker(daemon: ExportDaemon) -> None:
    disk, vm = running_vm(daemon, "vm-p", "vd-p")
    guest_write(vm, 0x11, "1M", "128k")
    tracker(daemon, "vmbt-p", "vm-p")
    backup(daemon, "pull-1", through("vmbt-p"), mode="Pull", ttlDuration="20s")
    status = ready(daemon, "pull-1")
    assert status["type"] == "Full"
    ca = daemon.ca_pem
    assert status["endpointCert"] == ca == status["links"]["internal"]["cert"]
    (volume,) = status["includedVolumes"]
    assert volume["volumeName"] == "vd-p"
    token = daemon.token(status["tokenSecretRef"])
    (inside,) = status["links"]["internal"]["volumes"]
    code, data = fetch(inside["dataEndpoint"], ca, token)
    assert code == 200 and data == disk.read_bytes()
    assert fetch(inside["dataEndpoint"], ca, "wrong")[0] == 401
    (outside,) = status["links"]["external"]["volumes"]
    assert outside == volume
    assert "/virtualmachineexports/pull-1/" in outside["mapEndpoint"]
    code, body = get_when_up(outside["mapEndpoint"], ca, token)
    assert code == 200 and json.loads(body)["extents"]

    first = complete(daemon, "pull-1")
    assert first["type"] == "Full" and "links" not in first
    assert latest(daemon, "vmbt-p")["name"] == first["checkpointName"]
    assert latest(daemon, "vmbt-p")["volumes"][0]["volumeName"] == "vd-p"
    with pytest.raises(ConnectionRefusedError):  # the session and its server are gone
        fetch(inside["dataEndpoint"], ca, token)
    node = block_node(vm)
    assert [b["name"] for b in node["dirty-bitmaps"] if b["name"].startswith("diskferry-vmbt")] == [
        first["checkpointName"]
    ]
    with Qmp(vm["qmpSocket"]) as qmp:
        assert qmp.command("query-block-exports") == []
        assert not qmp.command("query-block-jobs")

    guest_write(vm, 0x22, "4M", "64k")
    guest_write(vm, 0x33, "8M", "128k")
    backup(daemon, "pull-2", through("vmbt-p"), mode="Pull", ttlDuration="15s")
    status = ready(daemon, "pull-2")
    assert status["type"] == "Incremental"
    (volume,) = status["includedVolumes"]
    token = daemon.token(status["tokenSecretRef"])
    assert dirty_runs(volume["mapEndpoint"], ca, token) == [
        (4 * MiB, 64 * KiB),
        (8 * MiB, 128 * KiB),
    ]
    code, data = fetch(volume["dataEndpoint"], ca, token, f"offset={4 * MiB}&length={64 * KiB}")
    assert code == 200 and data == b"\x22" * (64 * KiB)
    second = complete(daemon, "pull-2")
    assert second["type"] == "Incremental"
    assert second["checkpointName"] != first["checkpointName"]
    assert latest(daemon, "vmbt-p")["name"] == second["checkpointName"]


def snapshot_count(directory: Any) -> int:
    with Repository.open(str(directory), PASSWORD) as repo:
        return len(list(repo.list_snapshots()))


def test_push_full_then_incremental_lands_in_the_repository(daemon: ExportDaemon) -> None:
    directory = location(daemon)
    _, vm = running_vm(daemon, "vm-u", "vd-u")
    guest_write(vm, 0x44, "2M", "256k")
    tracker(daemon, "vmbt-u", "vm-u")
    push = {"mode": "Push", "storageLocation": "repo"}
    backup(daemon, "push-1", through("vmbt-u"), **push)
    first = complete(daemon, "push-1")
    assert first["type"] == "Full" and first["snapshotID"]
    assert latest(daemon, "vmbt-u")["name"] == first["checkpointName"]
    assert snapshot_count(directory) == 1

    guest_write(vm, 0x55, "6M", "64k")
    backup(daemon, "push-2", through("vmbt-u"), **push)
    second = complete(daemon, "push-2")
    assert second["type"] == "Incremental"
    assert second["checkpointName"] != first["checkpointName"]
    assert latest(daemon, "vmbt-u")["name"] == second["checkpointName"]
    assert snapshot_count(directory) == 2
    upload = daemon.get("DataUpload", "vmbackup-push-2") or {}
    assert upload["status"]["disks"][0]["bytesRead"] == 64 * KiB

    backup(daemon, "push-3", through("vmbt-u"), forceFullBackup=True, **push)
    assert complete(daemon, "push-3")["type"] == "Full"


def test_a_missing_vm_fails_with_the_reason(daemon: ExportDaemon) -> None:
    backup(daemon, "gone", {"kind": "VirtualMachine", "name": "nope"}, mode="Pull")
    obj = daemon.wait_phase(BACKUP, "gone", *ENDED, timeout=30)
    failed = condition(obj, "Failed")
    assert obj["status"]["phase"] == "Failed"
    assert failed["status"] == "True" and failed["reason"] == "VirtualMachineNotFound"
    assert "nope" in failed["message"]
    wait_until(lambda: "VirtualMachineNotFound" in [e["reason"] for e in daemon.events("gone")], 10)


def for_manifests(daemon: ExportDaemon, text: str) -> str:
    """`text`, once checked to name what a manifest changes: no file of the data directory,
    no CLI command."""
    assert str(daemon.data_dir) not in text and not re.search(r"\bdiskferry [a-z]", text), text
    return text


TURN_ON = 'label it diskferry.io/changed-block-tracking: "true"'


def test_a_pull_of_disks_without_cbt_fails_naming_the_label_that_turns_it_on(
    daemon: ExportDaemon,
) -> None:
    ready_disk(daemon, "vd-n")
    spec = {"runPolicy": "AlwaysOff", "blockDeviceRefs": [{"kind": "VirtualDisk", "name": "vd-n"}]}
    create_vm(daemon, "vm-n", spec, {})
    daemon.wait_phase("VirtualMachine", "vm-n", "Stopped", timeout=30)
    backup(daemon, "no-cbt", {"kind": "VirtualMachine", "name": "vm-n"}, mode="Pull")
    obj = daemon.wait_phase(BACKUP, "no-cbt", *ENDED, timeout=60)
    failed = condition(obj, "Failed")
    assert failed["reason"] == "ChangedBlockTrackingOff"
    message = for_manifests(daemon, failed["message"])
    assert "CBT is off on VirtualMachine default/vm-n" in message and TURN_ON in message
    assert not list((daemon.data_dir / "jobs").glob("vmbackup-*"))


def test_a_push_of_a_stopped_vm_without_cbt_says_why_it_is_full(daemon: ExportDaemon) -> None:
    """Complete and Full; the backup's message, its DataUpload's disk reason and Event, and a
    Warning on the tracker that got no checkpoint say that CBT is off on the VM and which
    label turns it on."""
    location(daemon)
    ready_disk(daemon, "vd-o")
    spec = {"runPolicy": "AlwaysOff", "blockDeviceRefs": [{"kind": "VirtualDisk", "name": "vd-o"}]}
    create_vm(daemon, "vm-o", spec, {})
    daemon.wait_phase("VirtualMachine", "vm-o", "Stopped", timeout=30)
    tracker(daemon, "vmbt-o", "vm-o")
    backup(daemon, "push-o", through("vmbt-o"), mode="Push", storageLocation="repo")
    status = complete(daemon, "push-o")
    assert status["type"] == "Full"
    done = for_manifests(daemon, condition(daemon.get(BACKUP, "push-o"), "Complete")["message"])
    assert "CBT is off on VirtualMachine default/vm-o" in done and TURN_ON in done
    upload = daemon.get("DataUpload", "vmbackup-push-o") or {}
    reason = for_manifests(daemon, upload["status"]["disks"][0]["reason"])
    assert "CBT is off on VirtualMachine default/vm-o" in reason and TURN_ON in reason
    said = [e["message"] for e in daemon.events("vmbackup-push-o") if e["reason"] == "FullBackup"]
    assert said and TURN_ON in for_manifests(daemon, said[0])
    tracked = daemon.get("VirtualMachineBackupTracker", "vmbt-o") or {}
    assert "latestCheckpoint" not in tracked.get("status", {})
    wait_until(lambda: [e for e in daemon.events("vmbt-o") if e["type"] == "Warning"], 10)
    (warning,) = [e for e in daemon.events("vmbt-o") if e["type"] == "Warning"]
    assert TURN_ON in for_manifests(daemon, warning["message"])


def test_a_push_of_a_running_vm_without_cbt_fails_naming_the_label(daemon: ExportDaemon) -> None:
    location(daemon)
    ready_disk(daemon, "vd-r")
    refs = [{"kind": "VirtualDisk", "name": "vd-r"}]
    spec = {"runPolicy": "AlwaysOn", "blockDeviceRefs": refs, "memory": {"size": "64Mi"}}
    create_vm(daemon, "vm-r", spec, {})
    daemon.wait_phase("VirtualMachine", "vm-r", "Running", timeout=60)
    backup(daemon, "push-r", {"kind": "VirtualMachine", "name": "vm-r"}, **PUSH)
    obj = daemon.wait_phase(BACKUP, "push-r", *ENDED, timeout=120)
    message = for_manifests(daemon, condition(obj, "Failed")["message"])
    assert "CBT is off on VirtualMachine default/vm-r" in message and TURN_ON in message


def test_deleting_a_served_backup_ends_its_session(daemon: ExportDaemon) -> None:
    """A VM named directly is backed up whole; deleted while served, its server and session go."""
    _, vm = running_vm(daemon, "vm-d", "vd-d")
    backup(daemon, "pull-d", {"kind": "VirtualMachine", "name": "vm-d"}, mode="Pull")
    status = ready(daemon, "pull-d")
    assert status["type"] == "Full"
    assert condition(daemon.get(BACKUP, "pull-d") or {}, "Quiesced")["reason"] == "QuiesceFailed"
    (inside,) = status["links"]["internal"]["volumes"]
    daemon.delete(BACKUP, "pull-d")
    wait_until(lambda: daemon.get(BACKUP, "pull-d") is None, 30)
    assert not list((daemon.data_dir / "jobs").glob("vmbackup-*"))
    with pytest.raises(ConnectionRefusedError):
        fetch(inside["dataEndpoint"], daemon.ca_pem, "any")
    block_node(vm)  # no fleecing node left
    with Qmp(vm["qmpSocket"]) as qmp:
        assert qmp.command("query-block-exports") == []


def test_a_push_whose_upload_is_deleted_fails_and_makes_no_other(daemon: ExportDaemon) -> None:
    directory = location(daemon)
    ready_disk(daemon, "vd-x")
    spec = {"runPolicy": "AlwaysOff", "blockDeviceRefs": [{"kind": "VirtualDisk", "name": "vd-x"}]}
    create_vm(daemon, "vm-x", spec, {})
    daemon.wait_phase("VirtualMachine", "vm-x", "Stopped", timeout=30)
    with (
        Repository.open(str(directory), PASSWORD) as repo,
        repo.lock("exclusive", "prune"),
    ):
        source = {"kind": "VirtualMachine", "name": "vm-x"}
        backup(daemon, "push-x", source, mode="Push", storageLocation="repo")
        daemon.wait_phase("DataUpload", "vmbackup-push-x", "InProgress", timeout=60)
        daemon.objects.delete(daemon.registry.by_kind("DataUpload"), "default", "vmbackup-push-x")
        obj = daemon.wait_phase(BACKUP, "push-x", *ENDED, timeout=60)
    failed = condition(obj, "Failed")
    assert failed["reason"] == "DataUploadDeleted"
    assert failed["message"] == "DataUpload vmbackup-push-x was deleted"
    assert daemon.get("DataUpload", "vmbackup-push-x") is None


def test_a_pull_whose_checkpoint_write_fails_once_completes_and_records_it(
    daemon: ExportDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def fails_once(*args: Any, **kwargs: Any) -> None:
        calls.append(args)
        if len(calls) == 1:
            raise RuntimeError("the store failed here")
        real(*args, **kwargs)

    real = vmbackuppull.advance
    monkeypatch.setattr(vmbackuppull, "advance", fails_once)
    running_vm(daemon, "vm-k", "vd-k")
    tracker(daemon, "vmbt-k", "vm-k")
    backup(daemon, "pull-k", through("vmbt-k"), mode="Pull", ttlDuration="10s")
    done = complete(daemon, "pull-k")
    # it served its point: its Ready may have passed before a loaded machine looked
    wait_until(lambda: "ExportReady" in [e["reason"] for e in daemon.events("pull-k")])
    assert len(calls) == 2
    assert latest(daemon, "vmbt-k")["name"] == done["checkpointName"]
    wait_until(lambda: not list((daemon.data_dir / "jobs").glob("vmbackup-*")), 10)
