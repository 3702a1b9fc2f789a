"""Certificates: a private CA for exports, and server certificates it issues; and the
certificates of one connection whose two ends trust only each other."""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from diskferry.serving.errors import TlsSetupError

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
CA_DAYS = 3650
SERVER_DAYS = 365
SERVER_LIFETIME = datetime.timedelta(days=SERVER_DAYS)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _new_ca(common_name: str, days: int) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A fresh CA's key and self-signed certificate, valid for `days`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def create_ca(directory: str | os.PathLike[str], common_name: str = "diskferry export CA") -> Path:
    """Write `ca.crt` and `ca.key` (mode 0600) in `directory`; refuse to overwrite a CA."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if (d / CA_CERT).exists() or (d / CA_KEY).exists():
        raise TlsSetupError(f"{d} already holds a CA: remove {CA_CERT} and {CA_KEY} first")
    key, cert = _new_ca(common_name, CA_DAYS)
    _write_private(d / CA_KEY, _key_pem(key))
    (d / CA_CERT).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return d / CA_CERT


def default_sans() -> list[str]:
    """The names a server certificate covers when none are given."""
    names = ["localhost", "127.0.0.1", socket.gethostname()]
    return list(dict.fromkeys(n for n in names if n))


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _issue(
    ca_key: CertificateIssuerPrivateKeyTypes,
    ca_cert: x509.Certificate,
    sans: list[str],
    usage: x509.ObjectIdentifier,
    lifetime: datetime.timedelta,
) -> tuple[x509.Certificate, bytes]:
    """A certificate for `sans` (the first its common name) of the extended key usage `usage`,
    signed by the CA, valid for `lifetime` from now; and its key in PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, sans[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + lifetime)
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in sans]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, _key_pem(key)


def issue_server_cert(
    ca_dir: str | os.PathLike[str],
    sans: list[str],
    lifetime: datetime.timedelta = SERVER_LIFETIME,
) -> tuple[bytes, bytes]:
    """A server certificate and key (PEM) for `sans`, signed by the CA in `ca_dir`, valid for
    `lifetime` from now."""
    d = Path(ca_dir)
    try:
        ca_cert = x509.load_pem_x509_certificate((d / CA_CERT).read_bytes())
        ca_key = serialization.load_pem_private_key((d / CA_KEY).read_bytes(), password=None)
    except (OSError, ValueError) as e:
        raise TlsSetupError(
            f"cannot load the CA in {d}: {e}; run 'diskferry export ca create --dir {d}'"
        ) from e
    if not sans:
        raise TlsSetupError("a server certificate needs at least one name: give --san")
    cert, key = _issue(
        ca_key,  # type: ignore[arg-type]
        ca_cert,
        sans,
        ExtendedKeyUsageOID.SERVER_AUTH,
        lifetime,
    )
    chain = cert.public_bytes(serialization.Encoding.PEM) + (d / CA_CERT).read_bytes()
    return chain, key


@dataclass(frozen=True)
class PairedCerts:
    """The certificates of one connection whose two ends trust only each other: a CA made for
    it alone, whose key is forgotten once it issued the server's certificate (for the name the
    client checks) and the client's; PEM, as qemu's tls-creds-x509 reads them."""

    ca: bytes
    server_cert: bytes
    server_key: bytes = field(repr=False)
    client_cert: bytes
    client_key: bytes = field(repr=False)


def issue_pair(server_name: str, lifetime: datetime.timedelta = SERVER_LIFETIME) -> PairedCerts:
    """The certificates of one connection to the server named `server_name`, valid for
    `lifetime`."""
    ca_key, ca_cert = _new_ca(f"diskferry {server_name}", lifetime.days + 1)
    server, server_key = _issue(
        ca_key, ca_cert, [server_name], ExtendedKeyUsageOID.SERVER_AUTH, lifetime
    )
    client, client_key = _issue(
        ca_key, ca_cert, [f"{server_name}-client"], ExtendedKeyUsageOID.CLIENT_AUTH, lifetime
    )
    pem = serialization.Encoding.PEM
    return PairedCerts(
        ca=ca_cert.public_bytes(pem),
        server_cert=server.public_bytes(pem),
        server_key=server_key,
        client_cert=client.public_bytes(pem),
        client_key=client_key,
    )
