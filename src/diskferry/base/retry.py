"""Retrying after a transient network fault: the pause, and the one line each retry says."""

from __future__ import annotations

import logging
import threading
import time

from urllib3.exceptions import (
    ConnectTimeoutError,
    NameResolutionError,
    NewConnectionError,
    ReadTimeoutError,
)

from diskferry.base.errors import CancelledError

# the logger every retry and resume is said on; the CLI prints it on stderr, workers log it
log = logging.getLogger("diskferry.retry")


def fault_text(e: BaseException) -> str:
    """A short phrase for a network fault: `connection refused`, `unknown host h`, `timed out`."""
    reason = getattr(e, "reason", None) or e
    if isinstance(reason, NameResolutionError):
        return f"unknown host {reason.conn.host}" if reason.conn is not None else "unknown host"
    text = str(reason).lower()
    # before the timeouts: urllib3's NewConnectionError is a ConnectTimeoutError
    if isinstance(reason, (NewConnectionError, ConnectionError)) and "refused" in text:
        return "connection refused"
    if isinstance(reason, (NewConnectionError, ConnectionError)) and "reset" in text:
        return "connection reset"
    if isinstance(reason, (ConnectTimeoutError, ReadTimeoutError, TimeoutError)):
        return "timed out"
    lines = str(reason).strip().splitlines()
    return lines[0] if lines else type(reason).__name__


def delay_of(attempt: int, backoff: float) -> float:
    """Seconds to wait before retry number `attempt` (1, 2, ...): doubling from `backoff`."""
    return backoff * (2 ** (attempt - 1))


def pause(attempt: int, backoff: float, why: str, cancel: threading.Event | None = None) -> None:
    """Say `retrying in N s: why` and wait that long; CancelledError if `cancel` is set."""
    delay = delay_of(attempt, backoff)
    log.warning("retrying in %g s: %s", delay, why)
    if cancel is None:
        time.sleep(delay)
    elif cancel.wait(delay):
        raise CancelledError("cancelled")
