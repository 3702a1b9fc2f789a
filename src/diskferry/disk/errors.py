"""The errors of the byte layer: a volume that fails, a server that cannot resume."""

from __future__ import annotations

from diskferry.base.errors import DiskferryError


class VolumeError(DiskferryError):
    """A volume could not be opened, read or written."""

    reason = "VolumeError"


class RangeNotSupportedError(DiskferryError):
    """The server ignores Range, so a broken transfer cannot resume."""

    reason = "RangeNotSupported"
