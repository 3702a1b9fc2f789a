"""Typed errors of HTTPS serving."""

from diskferry.base.errors import DiskferryError


class ServeError(DiskferryError):
    """A server could not be set up or listen."""

    reason = "ServeFailed"


class TlsSetupError(ServeError):
    """Certificates, keys or TLS settings could not be made or loaded."""

    reason = "TlsSetupFailed"
