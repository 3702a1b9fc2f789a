"""An export at its TTL, on the reconcilers' clock: its server stopped, its links removed,
phase Terminated, then the export deleted, as KubeVirt does."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from vmexport_support import ExportDaemon

from diskferry.control.clock import ManualClock
from diskferry.control.host.servers import PORT_ANNOTATION, free_port
from diskferry.control.resources.registry import REGISTRY

EXPORT = "VirtualMachineExport"
TTL_SECONDS = 60


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC))


@pytest.fixture
def daemon(tmp_path: Path, clock: ManualClock) -> Iterator[ExportDaemon]:
    running = ExportDaemon(tmp_path / "data", free_port(), clock=clock)
    yield running
    running.stop()
    running.stop_workers()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _changes(daemon: ExportDaemon, rv: str) -> Iterator[dict[str, Any]]:
    """The export's watch events after `rv`, up to its deletion."""
    watch = daemon.objects.watch(REGISTRY.by_kind(EXPORT), "default", resource_version=rv)
    while True:
        events = watch.next(timeout=60)
        assert events, "the export changed no more and was not deleted"
        for event in events:
            yield {"type": event.type, **event.object}
            if event.type == "DELETED":
                return


def test_an_export_at_its_ttl_is_terminated_then_deleted(
    daemon: ExportDaemon, clock: ManualClock, nginx, images
) -> None:
    daemon.ready_disk(nginx, images.reference)
    source = {"apiGroup": "diskferry.io", "kind": "VirtualDisk", "name": "vd1"}
    daemon.apply(EXPORT, "short", {"source": source, "ttlDuration": f"{TTL_SECONDS}s"})
    export = daemon.wait_phase(EXPORT, "short", "Ready", timeout=60)
    created = datetime.fromisoformat(export["metadata"]["creationTimestamp"])
    expires = datetime.fromisoformat(export["status"]["ttlExpirationTime"])
    assert expires - created == timedelta(seconds=TTL_SECONDS)
    assert export["status"]["links"]["internal"]["volumes"]
    port = int(export["metadata"]["annotations"][PORT_ANNOTATION])
    assert _listening(port)

    clock.advance(TTL_SECONDS + 1)
    rv = daemon.objects.resource_version()
    daemon.objects.patch(  # a change wakes the reconciler at once
        REGISTRY.by_kind(EXPORT),
        "default",
        "short",
        {"metadata": {"labels": {"poke": "1"}}},
        "merge",
    )
    seen = list(_changes(daemon, rv))
    terminated = next(o for o in seen if o.get("status", {}).get("phase") == "Terminated")
    assert "links" not in terminated["status"]
    assert "deletionTimestamp" not in terminated["metadata"]
    ready = next(c for c in terminated["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Expired")
    assert seen[-1]["type"] == "DELETED"
    assert all("links" not in o["status"] for o in seen[seen.index(terminated) :])
    assert not _listening(port)
    assert ("default", "short") not in daemon.controllers.proxy.routes()
    assert "Expired" in {e["reason"] for e in daemon.events("short")}
    wait_until(lambda: daemon.export_jobs() == [], 30)
