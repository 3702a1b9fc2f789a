"""The daemon's CA, its server certificate and its bearer token, kept in the data directory."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from diskferry.serving.certs import CA_CERT, CA_KEY, create_ca, issue_server_cert

SERVER_CERT = "server.crt"
SERVER_KEY = "server.key"
SERVER_NAMES = ["127.0.0.1", "localhost"]


@dataclass(frozen=True)
class Pki:
    """Paths of the CA certificate and of the server's certificate chain and key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` with mode 0600, under a temporary name first."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _names(cert: Path) -> set[str]:
    """The names a certificate covers; none when it is missing or unreadable."""
    try:
        loaded = x509.load_pem_x509_certificate(cert.read_bytes())
        sans = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return set()
    ips = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    return ips | set(sans.get_values_for_type(x509.DNSName))


def ensure_pki(directory: Path, names: list[str] | None = None) -> Pki:
    """The CA and server certificate in `directory`, made once and reused after.

    The server certificate covers 127.0.0.1, localhost and `names`; one that does not is
    issued again from the same CA, so that kubeconfigs stay valid.
    """
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not (directory / CA_CERT).exists() or not (directory / CA_KEY).exists():
        create_ca(directory, common_name="diskferry API CA")
    cert, key = directory / SERVER_CERT, directory / SERVER_KEY
    wanted = list(dict.fromkeys([*SERVER_NAMES, *(names or [])]))
    if not key.exists() or not set(wanted) <= _names(cert):
        chain, key_pem = issue_server_cert(directory, wanted)
        write_private(key, key_pem)
        cert.write_bytes(chain)
    return Pki(directory / CA_CERT, cert, key)


def ensure_token(path: Path) -> str:
    """The bearer token kept in `path` (mode 0600), made once and reused after."""
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token
    token = secrets.token_urlsafe(32)
    write_private(path, token.encode())
    return token
