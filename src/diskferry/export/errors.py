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


class UntrustedBackendError(ExportError):
    """An export server's Unix socket is served by another user than the proxy's."""

    reason = "BackendNotTrusted"
