"""The base of every typed error diskferry raises, with a short reason for status."""

from __future__ import annotations

import threading

# the reason of an error in what the user asked for: the CLI exits 2 on it, as on a bad flag
BAD_USAGE = "BadUsage"


class DiskferryError(Exception):
    """An error the user can act on: a one-line message, a CamelCase reason, and what a
    command-line user does about it (`hint`, an option to give), kept apart from the message so
    that a worker's result, which a reconciler words for a manifest, carries none."""

    reason = "Failed"

    def __init__(self, message: str, *, reason: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason
        self.hint = hint

    @property
    def message(self) -> str:
        """The one-line message."""
        return str(self)

    @property
    def command_line(self) -> str:
        """The message as the command line prints it: with its hint, when it has one."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class CancelledError(DiskferryError):
    """The operation was cancelled before it finished."""

    reason = "Cancelled"


def check_cancel(cancel: threading.Event | None) -> None:
    """Raise CancelledError when `cancel` is set."""
    if cancel is not None and cancel.is_set():
        raise CancelledError("cancelled")
