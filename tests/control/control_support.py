"""Helpers of the control-plane tests: waiting for a condition, and the workers a test left."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(what: Callable[[], T], timeout: float = 60, step: float = 0.05) -> T:
    """Poll `what` until it returns something true; that value. Fails at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {timeout} s: {what}")
        time.sleep(step)


def workers_under(directory: Path) -> list[int]:
    """The processes whose working directory is under `directory` (a data directory's jobs)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(directory)):
                found.append(int(pid))
    return found


def stop_workers_under(directory: Path) -> None:
    """SIGKILL whatever a failed test left running under `directory`."""
    for pid in workers_under(directory):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
