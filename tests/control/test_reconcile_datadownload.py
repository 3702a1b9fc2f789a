"""DataDownload with the real engines: a disk backed up by a DataUpload restored byte-exact
into a new VirtualDisk, larger when the annotation asks; a smaller size and an existing disk
refused; the bandwidth limit carried to both workers; a download deleted while it writes."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import pytest
from control_support import stop_workers_under, wait_until, workers_under
from datamover_support import MoverDaemon, download, repository_held

from diskferry.control.clock import ManualClock
from diskferry.control.reconcilers.datamover.datadownload import DataDownloadReconciler

ENDED = ("Completed", "Failed", "Canceled")
MiB = 1 << 20


@pytest.fixture
def backed_up(tmp_path, monkeypatch):
    """A daemon whose VM vm-a's disk vd-a (8 MiB) is backed up; the daemon and the snapshot."""
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(tmp_path / "cache"))
    daemon = MoverDaemon(tmp_path / "data")
    daemon.location(tmp_path / "backups")
    claim = daemon.disk("vd-a", data=os.urandom(200_000), offset=3 * MiB + 123)
    with open(claim, "r+b") as f:
        f.write(os.urandom(5000))
    daemon.vm("vm-a", ["vd-a"])
    daemon.upload("up", "vm-a")
    status = daemon.wait_phase("DataUpload", "up", *ENDED)["status"]
    assert status["phase"] == "Completed", status
    yield daemon, status["disks"][0]["snapshotID"], claim
    daemon.stop()
    stop_workers_under(tmp_path)


def test_restores_byte_exact_into_a_new_disk(backed_up):
    daemon, snapshot, claim = backed_up
    download(daemon, "dd", snapshot, "vd-restored")
    status = daemon.wait_phase("DataDownload", "dd", *ENDED)["status"]
    assert status["phase"] == "Completed", status
    assert status["progress"]["bytesDone"] == status["progress"]["totalBytes"] == 8 * MiB
    restored = daemon.claim(daemon.wait_phase("VirtualDisk", "vd-restored", "Ready"))
    assert restored.read_bytes() == claim.read_bytes()


def test_a_larger_size_asked_grows_the_disk(backed_up):
    daemon, snapshot, claim = backed_up
    download(daemon, "dd", snapshot, "vd-big", {"diskferry.io/backup-pvc-size": "12Mi"})
    assert daemon.wait_phase("DataDownload", "dd", *ENDED)["status"]["phase"] == "Completed"
    data = daemon.claim(daemon.wait_phase("VirtualDisk", "vd-big", "Ready")).read_bytes()
    assert len(data) == 12 * MiB
    assert data[: 8 * MiB] == claim.read_bytes() and not any(data[8 * MiB :])


def test_a_smaller_size_is_refused(backed_up):
    daemon, snapshot, _ = backed_up
    download(daemon, "dd", snapshot, "vd-small", {"diskferry.io/backup-pvc-size": "4Mi"})
    status = daemon.wait_phase("DataDownload", "dd", *ENDED)["status"]
    assert status["phase"] == "Failed"
    assert "smaller than the backed-up disk" in status["message"]
    assert daemon.get("VirtualDisk", "vd-small") is None


def test_an_existing_disk_is_not_overwritten(backed_up):
    daemon, snapshot, _ = backed_up
    other = daemon.disk("vd-other", data=b"keep me" * 100)
    before = other.read_bytes()
    download(daemon, "dd", snapshot, "vd-other")
    status = daemon.wait_phase("DataDownload", "dd", *ENDED)["status"]
    assert status["phase"] == "Failed" and "exists already" in status["message"]
    assert other.read_bytes() == before


def test_downloads_are_counted_apart_and_cancel_removes_the_disk(backed_up, tmp_path):
    daemon, snapshot, _ = backed_up
    daemon.mover_config(maxConcurrentDataMovers=1)
    with repository_held(tmp_path / "backups"):
        daemon.upload("up-2", "vm-a")
        daemon.wait_phase("DataUpload", "up-2", "InProgress")
        download(daemon, "dd", snapshot, "vd-restored")
        daemon.wait_phase("DataDownload", "dd", "InProgress")
        assert daemon.get("VirtualDisk", "vd-restored") is not None
        daemon.patch_spec("DataDownload", "dd", {"cancel": True})
        status = daemon.wait_phase("DataDownload", "dd", *ENDED)["status"]
        assert status["phase"] == "Canceled"
        wait_until(lambda: daemon.get("VirtualDisk", "vd-restored") is None)
    assert daemon.wait_phase("DataUpload", "up-2", *ENDED)["status"]["phase"] == "Completed"


def test_an_unknown_snapshot_fails_saying_so(backed_up):
    daemon, _, _ = backed_up
    download(daemon, "dd", "0000000000000000", "vd-none")
    status = daemon.wait_phase("DataDownload", "dd", *ENDED)["status"]
    assert status["phase"] == "Failed" and "no snapshot 0000000000000000" in status["message"]
    assert daemon.get("VirtualDisk", "vd-none") is None


def job_file(daemon, kind: str, name: str, prefix: str) -> dict:
    """The job file of the mover's worker."""
    uid = daemon.get(kind, name)["metadata"]["uid"]
    return json.loads((daemon.data_dir / "jobs" / f"{prefix}-{uid}" / "job.json").read_text())


def test_the_bandwidth_limit_reaches_both_workers(backed_up, tmp_path):
    daemon, snapshot, _ = backed_up
    daemon.mover_config(bandwidthLimit="50Mi")
    with repository_held(tmp_path / "backups"):
        daemon.upload("up-2", "vm-a")
        daemon.wait_phase("DataUpload", "up-2", "InProgress")
        download(daemon, "dd", snapshot, "vd-restored")
        daemon.wait_phase("DataDownload", "dd", "InProgress")
        assert job_file(daemon, "DataUpload", "up-2", "du")["bandwidthLimit"] == 50 * MiB
        assert job_file(daemon, "DataDownload", "dd", "dd")["bandwidthLimit"] == 50 * MiB
    assert daemon.wait_phase("DataDownload", "dd", *ENDED)["status"]["phase"] == "Completed"


def test_deleting_a_download_that_writes_removes_the_half_written_disk(backed_up, tmp_path):
    daemon, snapshot, _ = backed_up
    daemon.mover_config(bandwidthLimit="4Ki")  # 200 KB take most of a minute to write
    download(daemon, "dd", snapshot, "vd-restored")
    dd = daemon.wait_phase("DataDownload", "dd", "InProgress")
    claim = daemon.claim(daemon.wait_phase("VirtualDisk", "vd-restored", "Provisioning"))
    assert "diskferry.io/data-mover" in dd["metadata"]["finalizers"]
    wait_until(lambda: [n for n in os.listdir(claim.parent) if ".prime-" in n], 30)
    daemon.objects.delete(daemon.registry.by_kind("DataDownload"), "default", "dd")
    wait_until(lambda: daemon.get("DataDownload", "dd") is None, 30)
    assert daemon.get("VirtualDisk", "vd-restored") is None
    assert not workers_under(daemon.data_dir)
    assert not [n for n in os.listdir(claim.parent) if n.startswith(claim.stem)]
    assert not list((daemon.data_dir / "jobs").glob("dd-*"))


def test_a_download_that_ended_while_the_daemon_was_down_keeps_its_disk(backed_up, tmp_path):
    daemon, snapshot, claim = backed_up
    with repository_held(tmp_path / "backups"):
        download(daemon, "dd", snapshot, "vd-restored", operationTimeout="10m")
        daemon.wait_phase("DataDownload", "dd", "InProgress")
        daemon.stop()
    wait_until(lambda: not workers_under(tmp_path / "data"), 60)
    # the daemon comes back after the download's operationTimeout ran out
    again = MoverDaemon(
        tmp_path / "data", clock=ManualClock(datetime.now(UTC) + timedelta(hours=1))
    )
    try:
        status = again.wait_phase("DataDownload", "dd", *ENDED)["status"]
        restored = again.claim(again.wait_phase("VirtualDisk", "vd-restored", "Ready"))
        assert status["phase"] == "Completed", status
        assert restored.read_bytes() == claim.read_bytes()
    finally:
        again.stop()


def test_a_failed_download_removes_its_disk_before_it_says_failed(backed_up, tmp_path, monkeypatch):
    daemon, snapshot, _ = backed_up
    cleanup = DataDownloadReconciler.cleanup
    calls = []

    def killed_at_first(self, obj, succeeded):
        calls.append(succeeded)
        if len(calls) == 1:
            raise RuntimeError("the daemon was killed here")
        return cleanup(self, obj, succeeded)

    monkeypatch.setattr(DataDownloadReconciler, "cleanup", killed_at_first)
    with repository_held(tmp_path / "backups"):
        download(daemon, "dd", snapshot, "vd-restored", operationTimeout="2s")
        status = daemon.wait_phase("DataDownload", "dd", *ENDED)["status"]
    assert status["phase"] == "Failed", status
    assert "did not end within 2s" in status["message"]
    assert daemon.get("VirtualDisk", "vd-restored") is None
    assert calls[0] is False


def test_the_disk_restored_into_is_not_ready_before_the_download_completed(backed_up, tmp_path):
    daemon, snapshot, claim = backed_up
    with repository_held(tmp_path / "backups"):
        download(daemon, "dd", snapshot, "vd-restored")
        daemon.wait_phase("DataDownload", "dd", "InProgress")
        disk = daemon.get("VirtualDisk", "vd-restored")
        assert disk["status"]["phase"] == "Provisioning", disk["status"]
        [ready] = [c for c in disk["status"]["conditions"] if c["type"] == "Ready"]
        assert ready["status"] == "False" and ready["reason"] == "WaitingForDataDownload"
        assert "DataDownload default/dd" in ready["message"]
    assert daemon.wait_phase("DataDownload", "dd", *ENDED)["status"]["phase"] == "Completed"
    restored = daemon.claim(daemon.wait_phase("VirtualDisk", "vd-restored", "Ready"))
    assert restored.read_bytes() == claim.read_bytes()
