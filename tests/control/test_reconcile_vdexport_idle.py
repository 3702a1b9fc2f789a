"""A VirtualDataExport's idle timeout on the reconcilers' clock: counted from when its URL is
ready and again from the last download; a downloaded export stays Completed while its server
is stopped, one nobody downloaded is Expired; until then the export serves on."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from vmexport_support import ExportDaemon, get

from diskferry.control.clock import ManualClock
from diskferry.control.host.servers import free_port
from diskferry.control.reconcilers.exports.vdexport import VirtualDataExportReconciler

VDE = "VirtualDataExport"
EXPORT = "VirtualMachineExport"
IDLE_SECONDS = 30 * 60  # the default idleTimeout, 30m


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC))


@pytest.fixture
def daemon(tmp_path: Path, clock: ManualClock) -> Iterator[ExportDaemon]:
    running = ExportDaemon(tmp_path / "data", free_port(), clock=clock)
    yield running
    running.stop()
    running.stop_workers()


def _download(daemon: ExportDaemon, vde: dict[str, Any]) -> tuple[int, bytes]:
    status = vde["status"]
    ca = base64.b64decode(status["ca"]).decode()
    return get(status["url"], ca, daemon.token(status["tokenSecretRef"]))


def _completed(vde: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in vde["status"]["conditions"] if c["type"] == "Completed")


def _ended(daemon: ExportDaemon, name: str) -> dict[str, Any]:
    """The vde once its url is cleared and its VirtualMachineExport gone."""
    return wait_until(
        lambda: (
            (vde := daemon.get(VDE, name))
            and "url" not in vde["status"]
            and daemon.get(EXPORT, vde["status"]["virtualMachineExportName"]) is None
            and vde
        ),
        60,
    )


def _seen(daemon: ExportDaemon, name: str, served: int) -> datetime:
    """When the reconciler saw the vde's export server reach `served` requests."""
    (reconciler,) = [
        r for r in daemon.controllers.reconcilers if isinstance(r, VirtualDataExportReconciler)
    ]
    uid = daemon.get(VDE, name)["metadata"]["uid"]
    return wait_until(
        lambda: (seen := reconciler.seen.get(uid)) and seen[0] == served and seen[1], 60
    )


def test_idle_time_runs_from_ready_and_from_the_last_download(
    daemon: ExportDaemon, clock: ManualClock, nginx, images
) -> None:
    disk = daemon.ready_disk(nginx, images.reference)
    target = {"kind": "VirtualDisk", "name": "vd1"}
    daemon.apply(VDE, "fetched", {"targetRef": target})
    daemon.apply(VDE, "left", {"targetRef": target})
    fetched = daemon.wait_phase(VDE, "fetched", "WaitForUserDownload")
    daemon.wait_phase(VDE, "left", "WaitForUserDownload")

    clock.advance(IDLE_SECONDS - 60)
    assert _download(daemon, fetched) == (200, daemon.claim(disk).read_bytes())
    daemon.wait_phase(VDE, "fetched", "Completed")
    assert _seen(daemon, "fetched", 1) == clock.now()
    assert daemon.get(VDE, "left")["status"]["phase"] == "WaitForUserDownload"

    clock.advance(120)
    expired = daemon.wait_phase(VDE, "left", "Expired")
    assert _completed(expired)["reason"] == "Expired"
    _ended(daemon, "left")
    assert daemon.get(VDE, "fetched")["status"]["url"] == fetched["status"]["url"]

    assert _download(daemon, fetched)[0] == 200
    assert _seen(daemon, "fetched", 2) == clock.now()
    clock.advance(IDLE_SECONDS - 60)
    assert "url" in daemon.get(VDE, "fetched")["status"]
    clock.advance(120)
    done = _ended(daemon, "fetched")
    assert done["status"]["phase"] == "Completed"
    assert _completed(done)["status"] == "True"
