"""Helpers of the control-plane tests: waiting for a condition, the workers a test left, and
whether a host's service has every member of the protocol the reconcilers take it through."""

from __future__ import annotations

import contextlib
import inspect
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


def protocol_members(protocol: type) -> dict[str, object]:
    """The public methods and properties of `protocol`."""
    return {
        name: member
        for name, member in vars(protocol).items()
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    }


def assert_implements(protocol: type, implementation: type) -> None:
    """Fail unless `implementation` has every member of `protocol`, each method with the
    protocol's parameters."""
    members = protocol_members(protocol)
    assert members
    for name, member in members.items():
        found = getattr(implementation, name, None)
        assert found is not None, f"{implementation.__name__} has no {name}"
        if isinstance(member, property):
            continue  # a property of the protocol: an attribute or a property will do
        wanted = list(inspect.signature(member).parameters)
        assert list(inspect.signature(found).parameters) == wanted, f"{name}'s parameters"
