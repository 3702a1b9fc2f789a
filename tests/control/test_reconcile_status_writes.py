"""How often a running import writes its object: its status at most about once a second,
whatever the worker's speed and however often the disk is reconciled (a resync five times a
second), and no write of its own calls its reconcile again."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from reconcile_support import RESYNC_SECONDS, Daemon
from reconcile_support import http_source as _http

from diskferry.control.errors import GoneError
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS

MiB = 1 << 20
SOURCE_SIZE = 8 * MiB
PIECE = 128 * 1024
TRICKLE = 0.15  # 64 pieces: about ten seconds
WRITES_A_SECOND = 2
PHASE_WRITES = 8  # Pending, the finalizer, Provisioning, Ready and their fields, with room


@pytest.fixture(params=[RESYNC_SECONDS, 0.2], ids=["resync-5s", "resync-0.2s"])
def daemon(request, tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "data", resync=request.param)
    yield running
    running.stop()


def test_a_slow_import_writes_its_status_about_once_a_second(daemon, faulty, tmp_path) -> None:
    source = tmp_path / "slow.raw"
    source.write_bytes(os.urandom(SOURCE_SIZE))
    url = faulty.add("slow.raw", source, piece=PIECE, trickle=TRICKLE)
    watch = daemon.objects.watch(
        VIRTUAL_DISKS, "default", resource_version=daemon.objects.resource_version()
    )
    started = time.monotonic()
    daemon.apply("VirtualDisk", "slow", {"dataSource": _http(url)})
    types: Counter[str] = Counter()
    shown: list[str] = []
    phase = None
    try:
        while phase not in ("Ready", "Failed"):
            assert time.monotonic() - started < 300, f"still {phase} after 300 s"
            try:
                events = watch.next(0.5)
            except GoneError:
                pytest.fail(f"the watch fell behind the disk's writes after {sum(types.values())}")
            for event in events:
                types[event.type] += 1
                status = event.object.get("status") or {}
                phase = status.get("phase")
                if status.get("progress") not in (None, *shown):
                    shown.append(status["progress"])
    finally:
        watch.close()
    seconds = time.monotonic() - started
    assert phase == "Ready"
    assert len(shown) >= 4, shown  # the import's progress was shown as it went
    assert types["MODIFIED"] <= WRITES_A_SECOND * seconds + PHASE_WRITES, (types, seconds)
