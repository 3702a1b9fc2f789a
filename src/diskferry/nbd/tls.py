"""The TLS context of an nbds:// connection, from the URL's certificate directory."""

from __future__ import annotations

import os
import ssl

from diskferry.nbd.errors import NbdConnectionError
from diskferry.nbd.url import NbdUrl


def client_context(url: NbdUrl) -> ssl.SSLContext:
    """A client context: the CA (and client certificate) from tls-certificates, else the system's.

    The directory holds ca-cert.pem and optionally client-cert.pem with client-key.pem,
    as qemu's tls-creds-x509 lays them out.
    """
    directory = url.tls_certificates
    try:
        if directory is None:
            context = ssl.create_default_context()
        else:
            context = ssl.create_default_context(cafile=os.path.join(directory, "ca-cert.pem"))
            cert = os.path.join(directory, "client-cert.pem")
            if os.path.exists(cert):
                context.load_cert_chain(cert, os.path.join(directory, "client-key.pem"))
    except (OSError, ssl.SSLError) as e:
        raise NbdConnectionError(
            f"cannot load TLS certificates for {url} from {directory}: {e}"
        ) from e
    context.check_hostname = url.tls_verify_peer and server_hostname(url) is not None
    if not url.tls_verify_peer:
        context.verify_mode = ssl.CERT_NONE
    return context


def server_hostname(url: NbdUrl) -> str | None:
    """The name the server's certificate must carry: tls-hostname, else the URL's host."""
    return url.tls_hostname or url.host
