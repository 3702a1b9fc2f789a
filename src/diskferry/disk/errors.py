"""The base of every typed error diskferry raises, with a short reason for status."""

from __future__ import annotations

import threading

# the reason of an error in what the user asked for: the CLI exits 2 on it, as on a bad flag
BAD_USAGE = "BadUsage"


class DiskferryError(Exception):
    """An error the user can act on: a one-line message and a CamelCase reason."""

    reason = "Failed"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason

    @property
    def message(self) -> str:
        """The one-line message."""
        return str(self)


class VolumeError(DiskferryError):
    """A volume could not be opened, read or written."""

    reason = "VolumeError"


class CancelledError(DiskferryError):
    """The operation was cancelled before it finished."""

    reason = "Cancelled"


class RangeNotSupportedError(DiskferryError):
    """The server ignores Range, so a broken transfer cannot resume."""

    reason = "RangeNotSupported"


def check_cancel(cancel: threading.Event | None) -> None:
    """Raise CancelledError when `cancel` is set."""
    if cancel is not None and cancel.is_set():
        raise CancelledError("cancelled")
