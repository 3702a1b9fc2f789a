"""Typed errors of the export engine."""

from diskferry.disk.errors import DiskferryError


class ExportError(DiskferryError):
    """An export could not be served or set up."""

    reason = "ExportFailed"


class RoutesError(ExportError):
    """The proxy's routes file could not be read."""

    reason = "BadRoutes"


class DownloadError(ExportError):
    """A download from an export failed."""

    reason = "DownloadFailed"
