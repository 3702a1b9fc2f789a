"""The export CA and its server certificates, as the export engine's callers name them."""

from diskferry.serving.certs import (
    CA_CERT,
    CA_KEY,
    SERVER_LIFETIME,
    create_ca,
    default_sans,
    issue_server_cert,
)

__all__ = ["CA_CERT", "CA_KEY", "SERVER_LIFETIME", "create_ca", "default_sans", "issue_server_cert"]
