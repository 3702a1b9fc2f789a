"""Typed errors of the NBD client: server errors, broken connections, bad URLs."""

from diskferry.base.errors import DiskferryError
from diskferry.disk.errors import VolumeError


class NbdError(VolumeError):
    """The NBD server refused an option or failed a command; `errno_name` is its error."""

    reason = "NbdError"

    def __init__(self, message: str, *, errno_name: str | None = None) -> None:
        super().__init__(message)
        self.errno_name = errno_name


class NbdConnectionError(NbdError):
    """The connection to the NBD server could not be made, broke, or carried garbage."""

    reason = "NbdConnectionError"


class NbdUrlError(DiskferryError):
    """An NBD URL could not be read."""

    reason = "BadNbdUrl"
