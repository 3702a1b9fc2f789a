"""A daemon killed mid-import loses nothing: started again, it re-attaches to the worker, which
finishes without downloading its source again, and takes up what was applied meanwhile; one
killed in the middle of starting the worker has the import run once, by one worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from control_support import wait_until, workers_under
from reconcile_support import Daemon
from reconcile_support import http_source as _http

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.resources.model import API_VERSION
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS

MiB = 1 << 20
_DAEMON = """
import sys, time
from pathlib import Path
from diskferry.control.controllers import Controllers
from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.resources.registry import REGISTRY
data = Path(sys.argv[1])
Controllers(data, ObjectService(data / "state.db", REGISTRY)).start()
print("serving", flush=True)
time.sleep(600)
"""
_DIES_STARTING = """
import os, signal, sys, time
from pathlib import Path
from diskferry.control.controllers import Controllers
from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.runtime.runner import local

def die(step):
    if step == sys.argv[2]:
        os.kill(os.getpid(), signal.SIGKILL)

local.on_start_step = die
data = Path(sys.argv[1])
Controllers(data, ObjectService(data / "state.db", REGISTRY)).start()
time.sleep(600)
"""


def _disk(name: str, url: str) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "VirtualDisk",
        "metadata": {"name": name},
        "spec": {"dataSource": _http(url)},
    }


def test_a_killed_daemon_started_again_finishes_the_import(faulty, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    source = tmp_path / "slow.raw"
    source.write_bytes(os.urandom(8 * MiB))
    url = faulty.add("slow.raw", source, piece=128 * 1024, trickle=0.05)
    quick = tmp_path / "quick.raw"
    quick.write_bytes(os.urandom(MiB))
    quick_url = faulty.add("quick.raw", quick)

    daemon = subprocess.Popen(
        [sys.executable, "-c", _DAEMON, str(data_dir)], stdout=subprocess.PIPE, text=True
    )
    assert daemon.stdout.readline().strip() == "serving"
    objects = ObjectService(data_dir / "state.db", REGISTRY)
    objects.create(VIRTUAL_DISKS, "default", _disk("vd", url))
    wait_until(
        lambda: objects.get(VIRTUAL_DISKS, "default", "vd")["status"].get("phase") == "Provisioning"
    )
    daemon.send_signal(signal.SIGKILL)
    daemon.wait()
    objects.create(VIRTUAL_DISKS, "default", _disk("meanwhile", quick_url))
    objects.close()

    again = Daemon(data_dir)
    try:
        disk = again.wait_phase("VirtualDisk", "vd", "Ready", "Failed")
        assert disk["status"]["phase"] == "Ready", disk["status"]
        assert again.claim(disk).read_bytes() == source.read_bytes()
        # downloaded once, by the same worker: one GET sniffs it, then its one run is read
        ranges = [h.get("Range") for h in faulty.seen("slow.raw")]
        assert ranges == [None, f"bytes=0-{8 * MiB - 1}"]
        other = again.wait_phase("VirtualDisk", "meanwhile", "Ready", "Failed")
        assert again.claim(other).read_bytes() == quick.read_bytes()
    finally:
        again.stop(workers=True)


@pytest.mark.parametrize("step", ["spawned", "recorded"])
def test_a_daemon_killed_starting_the_worker_imports_once(faulty, tmp_path: Path, step: str):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    source = tmp_path / "source.raw"
    source.write_bytes(os.urandom(2 * MiB))
    url = faulty.add("once.raw", source, piece=128 * 1024, trickle=0.05)
    objects = ObjectService(data_dir / "state.db", REGISTRY)
    objects.create(VIRTUAL_DISKS, "default", _disk("vd", url))
    objects.close()

    daemon = subprocess.Popen([sys.executable, "-c", _DIES_STARTING, str(data_dir), step])
    assert daemon.wait(timeout=60) == -signal.SIGKILL
    # what the killed daemon left reads the source (it runs on) or ends (it never will)
    wait_until(lambda: faulty.seen("once.raw") or not workers_under(data_dir), 60)

    again = Daemon(data_dir)
    try:
        disk = again.wait_phase("VirtualDisk", "vd", "Ready", "Failed")
        assert disk["status"]["phase"] == "Ready", disk["status"]
        assert again.claim(disk).read_bytes() == source.read_bytes()
        ranges = [h.get("Range") for h in faulty.seen("once.raw")]
        assert ranges == [None, f"bytes=0-{2 * MiB - 1}"]
        wait_until(lambda: not workers_under(data_dir), 30)
    finally:
        again.stop(workers=True)


def test_an_import_whose_job_files_are_gone_is_found_done_in_its_claim(
    faulty, tmp_path: Path
) -> None:
    """A disk whose status went back to Provisioning after its import committed and its job's
    files were purged (a daemon killed between the two) is Ready again from what its claim
    holds: the import started again finds its own work there and reads nothing."""
    source = tmp_path / "disk.raw"
    source.write_bytes(os.urandom(MiB))
    url = faulty.add("disk.raw", source)
    daemon = Daemon(tmp_path / "data")
    try:
        daemon.apply("VirtualDisk", "vd", {"dataSource": _http(url)})
        daemon.wait_phase("VirtualDisk", "vd", "Ready", "Failed")
        read = len(faulty.seen("disk.raw"))
        status = {"status": {"phase": "Provisioning", "progress": "0%"}}
        daemon.objects.patch(VIRTUAL_DISKS, "default", "vd", status, "merge", subresource="status")
        disk = wait_until(
            lambda: (
                (o := daemon.get("VirtualDisk", "vd"))
                and o["status"].get("progress") == "100%"
                and o
            )
        )
        assert disk["status"]["phase"] == "Ready"
        assert daemon.claim(disk).read_bytes() == source.read_bytes()
        assert len(faulty.seen("disk.raw")) == read
    finally:
        daemon.stop(workers=True)
