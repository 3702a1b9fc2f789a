"""Typed errors of the export engine."""

from diskferry.base.errors import DiskferryError


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


class BusyError(ExportError):
    """The proxy's bounds leave no room for one more request now: try again later."""

    reason = "Busy"


class BackendBusyError(BusyError):
    """Every connection one export server may have is in use, and none came free in time."""

    reason = "BackendBusy"


class ProxyBusyError(BusyError):
    """Every connection of the proxy's pool is in use, and none came free in time."""

    reason = "ProxyBusy"
