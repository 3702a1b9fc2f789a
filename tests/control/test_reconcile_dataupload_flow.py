"""DataUpload's scheduling with the real backup engine: cancel in each phase, the operation
timeout, the cap observed from watch events (filled beyond the manager's reconciling threads),
one active upload per VM with a stale one not blocking. A repository held exclusively (as a
prune holds it) keeps workers waiting."""

from __future__ import annotations

import os
import signal
import time

import pytest
from control_support import stop_workers_under, wait_until, workers_under
from datamover_support import MoverDaemon, PhaseWatch, repository_held

from diskferry.control.reconcilers.datamover import moverlife

ENDED = ("Completed", "Failed", "Canceled")


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(tmp_path / "cache"))
    d = MoverDaemon(tmp_path / "data")
    d.location(tmp_path / "backups")
    yield d
    d.stop()
    stop_workers_under(tmp_path)


def vms(daemon: MoverDaemon, count: int) -> list[str]:
    """`count` stopped VMs, one small disk each."""
    names = []
    for i in range(count):
        daemon.disk(f"vd-{i}", size="2Mi", data=bytes([i + 1]) * 8192)
        daemon.vm(f"vm-{i}", [f"vd-{i}"])
        names.append(f"vm-{i}")
    return names


def phase(daemon: MoverDaemon, name: str) -> str | None:
    return ((daemon.get("DataUpload", name) or {}).get("status") or {}).get("phase")


def message(daemon: MoverDaemon, name: str) -> str:
    return ((daemon.get("DataUpload", name) or {}).get("status") or {}).get("message", "")


def cancel(daemon: MoverDaemon, name: str) -> dict:
    daemon.patch_spec("DataUpload", name, {"cancel": True})
    return daemon.wait_phase("DataUpload", name, *ENDED)["status"]


def test_cancel_while_new(daemon):
    vms(daemon, 1)
    daemon.upload("up", "vm-0", backupStorageLocation="missing")
    wait_until(lambda: "missing" in message(daemon, "up"))
    status = cancel(daemon, "up")
    assert status["phase"] == "Canceled"
    # an Event follows its status change: a reader may see the phase first
    wait_until(lambda: {"Canceling", "Canceled"} <= {e["reason"] for e in daemon.events("up")})


def test_cancel_while_accepted(daemon):
    daemon.vm("vm-0", ["vd-never"])
    daemon.upload("up", "vm-0")
    wait_until(lambda: "VirtualDisk vd-never" in message(daemon, "up"))
    assert phase(daemon, "up") == "Accepted"
    assert cancel(daemon, "up")["phase"] == "Canceled"


def test_cancel_while_prepared_and_in_progress(daemon, tmp_path):
    daemon.mover_config(maxConcurrentDataMovers=1)
    vms(daemon, 2)
    with repository_held(tmp_path / "backups"):
        daemon.upload("up-0", "vm-0")
        daemon.wait_phase("DataUpload", "up-0", "InProgress")
        daemon.upload("up-1", "vm-1")
        wait_until(lambda: "1 of 1 in progress" in message(daemon, "up-1"))
        assert phase(daemon, "up-1") == "Prepared"
        assert cancel(daemon, "up-1")["phase"] == "Canceled"
        assert workers_under(tmp_path / "data")
        assert cancel(daemon, "up-0")["phase"] == "Canceled"
    wait_until(lambda: not workers_under(tmp_path / "data"), 10)
    jobs = tmp_path / "data" / "jobs"
    assert not list(jobs.glob("du-*")) and not list((jobs / "failed").iterdir())


def test_operation_timeout_fails_and_keeps_the_scratch(daemon, tmp_path):
    vms(daemon, 1)
    with repository_held(tmp_path / "backups"):
        daemon.upload("up", "vm-0", operationTimeout="2s")
        status = daemon.wait_phase("DataUpload", "up", *ENDED)["status"]
    assert status["phase"] == "Failed"
    assert "did not end within 2s of being accepted" in status["message"]
    wait_until(lambda: "OperationTimeout" in [e["reason"] for e in daemon.events("up")])
    assert not workers_under(tmp_path / "data")
    kept = list((tmp_path / "data" / "jobs" / "failed").glob("du-*"))
    assert len(kept) == 1 and (kept[0] / "stderr").exists()


def test_a_worker_that_could_not_stop_at_its_deadline_fails_for_the_timeout(daemon, tmp_path):
    """A worker stopped before it can take its SIGTERM (held here with SIGSTOP, then killed)
    ends without a result; past the deadline that is still the timeout, not a lost worker."""
    vms(daemon, 1)
    with repository_held(tmp_path / "backups"):
        daemon.upload("up", "vm-0", operationTimeout="2s")
        daemon.wait_phase("DataUpload", "up", "InProgress")
        wait_until(lambda: workers_under(tmp_path / "data"))
        held = workers_under(tmp_path / "data")
        for pid in held:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(3)  # past the deadline, the daemon's SIGTERM pending
        for pid in held:
            os.kill(pid, signal.SIGKILL)
        status = daemon.wait_phase("DataUpload", "up", *ENDED)["status"]
    assert status["phase"] == "Failed"
    assert status["message"].startswith("the operation did not end within 2s of being accepted")


def test_an_upload_that_ended_while_the_daemon_was_down_is_judged_by_its_result(daemon, tmp_path):
    vms(daemon, 1)
    with repository_held(tmp_path / "backups"):
        daemon.upload("up", "vm-0", operationTimeout="3s")
        accepted = time.monotonic()
        daemon.wait_phase("DataUpload", "up", "InProgress")
        daemon.stop()
    # the worker goes on alone, and ends past its deadline
    wait_until(lambda: not workers_under(tmp_path / "data"), 60)
    wait_until(lambda: time.monotonic() - accepted > 4, 10)
    again = MoverDaemon(tmp_path / "data")
    try:
        status = again.wait_phase("DataUpload", "up", *ENDED)["status"]
    finally:
        again.stop()
    assert status["phase"] == "Completed", status
    assert status["snapshotID"] and status["disks"][0]["snapshotID"]


def test_cap_is_filled_beyond_the_reconciling_threads_and_never_exceeded(daemon, tmp_path):
    cap = daemon.controllers.manager.workers + 1  # uploads run at once, not a thread each
    daemon.mover_config(maxConcurrentDataMovers=cap)
    names = vms(daemon, cap + 2)
    watch = PhaseWatch(daemon, "DataUpload")
    try:
        with repository_held(tmp_path / "backups"):
            for i, vm in enumerate(names):
                daemon.upload(f"up-{i}", vm)
            wait_until(lambda: watch.count("InProgress") == cap and watch.count("Prepared") == 2)
        for i in range(len(names)):
            assert daemon.wait_phase("DataUpload", f"up-{i}", *ENDED)["status"]["phase"] == (
                "Completed"
            )
        wait_until(lambda: watch.count("Completed") == len(names))
    finally:
        watch.stop()
    assert watch.most == cap


def test_one_upload_per_vm_and_a_stale_one_stops_blocking(daemon, tmp_path):
    vms(daemon, 1)
    with repository_held(tmp_path / "backups"):
        daemon.upload("up-old", "vm-0")
        daemon.wait_phase("DataUpload", "up-old", "InProgress")
        daemon.upload("up-new", "vm-0")
        wait_until(lambda: "waiting for DataUpload default/up-old" in message(daemon, "up-new"))
        assert phase(daemon, "up-new") == "New"
        daemon.mover_config(staleDataUploadThreshold="1s")
        wait_until(lambda: phase(daemon, "up-new") not in (None, "New"), 20)
    for name in ("up-old", "up-new"):
        assert daemon.wait_phase("DataUpload", name, *ENDED)["status"]["phase"] == "Completed"


def test_deleting_an_upload_in_progress_stops_its_worker(daemon, tmp_path):
    vms(daemon, 1)
    with repository_held(tmp_path / "backups"):
        daemon.upload("up", "vm-0")
        upload = daemon.wait_phase("DataUpload", "up", "InProgress")
        assert upload["metadata"]["finalizers"] == ["diskferry.io/data-mover"]
        daemon.objects.delete(daemon.registry.by_kind("DataUpload"), "default", "up")
        wait_until(lambda: daemon.get("DataUpload", "up") is None)
    assert not workers_under(tmp_path / "data")
    assert not list((tmp_path / "data" / "jobs").glob("du-*"))


def test_deleting_a_failed_upload_removes_its_kept_scratch(daemon, tmp_path):
    vms(daemon, 1)
    failed = tmp_path / "data" / "jobs" / "failed"
    with repository_held(tmp_path / "backups"):
        daemon.upload("up", "vm-0", operationTimeout="1s")
        assert daemon.wait_phase("DataUpload", "up", *ENDED)["status"]["phase"] == "Failed"
    wait_until(lambda: list(failed.glob("du-*")), 10)
    daemon.objects.delete(daemon.registry.by_kind("DataUpload"), "default", "up")
    wait_until(lambda: daemon.get("DataUpload", "up") is None)
    assert not list(failed.glob("du-*"))
    assert not list((tmp_path / "data" / "logs").glob("du-*"))


def test_failed_scratch_is_kept_up_to_a_bound(daemon, tmp_path, monkeypatch):
    monkeypatch.setattr(moverlife, "FAILED_KEPT", 1)
    names = vms(daemon, 2)
    with repository_held(tmp_path / "backups"):
        for i, vm in enumerate(names):
            daemon.upload(f"up-{i}", vm, operationTimeout="1s")
        for i in range(2):
            assert daemon.wait_phase("DataUpload", f"up-{i}", *ENDED)["status"]["phase"] == (
                "Failed"
            )
    failed = tmp_path / "data" / "jobs" / "failed"
    wait_until(lambda: len(list(failed.glob("du-*"))) == 1, 10)
