"""The export servers' certificate files, as the export engine's callers name them."""

from diskferry.serving.certs import CA_CERT
from diskferry.serving.tls import TLS_CERT, TLS_KEY

__all__ = ["CA_CERT", "TLS_CERT", "TLS_KEY"]
