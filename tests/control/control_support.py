"""Helpers of the control-plane tests: waiting for a condition, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
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
