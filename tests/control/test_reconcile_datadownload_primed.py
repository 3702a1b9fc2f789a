"""A DataDownload into a new VirtualDisk whose claim is ready only once sealed (a PVC, its
prime's volume handed to it once the disk is Ready): the restore worker writes the claim once
the disk says it is made blank and waits for the download, and the download Completed, the disk
is Ready, byte-exact."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from control_support import stop_workers_under
from datamover_support import MoverDaemon, download
from primed_support import PrimedVolumes

ENDED = ("Completed", "Failed", "Canceled")
MiB = 1 << 20


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MoverDaemon]:
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(tmp_path / "cache"))
    running = MoverDaemon(tmp_path / "data", volumes=PrimedVolumes(tmp_path / "data"))
    yield running
    running.stop()
    stop_workers_under(tmp_path)


def test_a_download_into_a_new_disk_of_sealed_claims_completes(
    daemon: MoverDaemon, tmp_path: Path
) -> None:
    daemon.location(tmp_path / "backups")
    claim = daemon.disk("vd-a", data=os.urandom(100_000), offset=MiB + 7)
    daemon.vm("vm-a", ["vd-a"])
    daemon.upload("up", "vm-a")
    uploaded = daemon.wait_phase("DataUpload", "up", *ENDED)["status"]
    assert uploaded["phase"] == "Completed", uploaded
    download(daemon, "dd", uploaded["disks"][0]["snapshotID"], "vd-restored")
    status = daemon.wait_phase("DataDownload", "dd", *ENDED)["status"]
    assert status["phase"] == "Completed", status
    disk = daemon.wait_phase("VirtualDisk", "vd-restored", "Ready", "Failed")
    assert disk["status"]["phase"] == "Ready", disk["status"]
    assert daemon.claim(disk).read_bytes() == claim.read_bytes()
