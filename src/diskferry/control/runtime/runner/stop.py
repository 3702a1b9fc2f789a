"""Stopping a data directory for good: the daemon serving it, then every worker it started.

A daemon stopped by SIGTERM leaves its workers running for the next one to re-attach to. To
stop for good, `diskferry serve --stop` calls `stop_data_dir`: it SIGTERMs the daemon that
`serving` recorded in DATA_DIR/serve.json (pid, start time and boot id, so that a stale record
never names another process) and waits for it to end, so that no reconcile starts another
worker; then it stops every worker under DATA_DIR/jobs (`LocalRunner.stop_all`). Each gets
SIGTERM and a timeout to end, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diskferry.base import procstat
from diskferry.base.errors import DiskferryError
from diskferry.control.runtime.runner.local import (
    KILL_SECONDS,
    STOP_POLL_SECONDS,
    LocalRunner,
    write_atomically,
)

SERVE_RECORD = "serve.json"


class NoDataDirError(DiskferryError):
    """There is no data directory to stop."""


@dataclass(frozen=True)
class Stopped:
    """What `stop_data_dir` stopped: the daemon's pid (None when none ran) and the workers'
    job ids."""

    daemon: int | None
    workers: list[str]


def _this_process() -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "startTime": procstat.start_time(pid), "bootId": procstat.boot_id()}


@contextlib.contextmanager
def serving(data_dir: Path) -> Iterator[None]:
    """Record this process as the daemon serving `data_dir` while the block runs."""
    path = data_dir / SERVE_RECORD
    record = _this_process()
    write_atomically(path, json.dumps(record).encode())
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()) == record:
                path.unlink()


def _daemon(data_dir: Path) -> tuple[int, int] | None:
    """The pid and start time of the daemon recorded as serving `data_dir`, while it runs."""
    try:
        record = json.loads((data_dir / SERVE_RECORD).read_text())
    except (OSError, ValueError):
        return None
    pid, started = record.get("pid"), record.get("startTime")
    if not (isinstance(pid, int) and isinstance(started, int)):
        return None
    alive = record.get("bootId") == procstat.boot_id() and procstat.is_same(pid, started)
    return (pid, started) if alive else None


def _wait_ended(pid: int, started: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not procstat.has_ended(pid, started):
        if time.monotonic() > deadline:
            return False
        time.sleep(STOP_POLL_SECONDS)
    return True


def stop_data_dir(data_dir: Path, timeout: float) -> Stopped:
    """Stop the daemon serving `data_dir`, if one runs, then every worker under it; each is
    sent SIGTERM, and SIGKILL when it has not ended `timeout` seconds later."""
    if not data_dir.is_dir():
        raise NoDataDirError(f"{data_dir} is not a directory: there is nothing to stop")
    daemon = _daemon(data_dir)
    if daemon is not None:
        pid, started = daemon
        os.kill(pid, signal.SIGTERM)
        if not _wait_ended(pid, started, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_ended(pid, started, KILL_SECONDS)
    workers = LocalRunner(data_dir).stop_all(timeout)
    return Stopped(None if daemon is None else daemon[0], workers)
