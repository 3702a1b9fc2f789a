"""Certificates for NBD over TLS: a CA, server and client certificates, and a stranger's."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(
    subject: str,
    key: rsa.RSAPrivateKey,
    issuer: tuple[x509.Name, rsa.RSAPrivateKey] | None,
    usage: x509.ObjectIdentifier | None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=usage is None, path_length=None), critical=True)
    )
    if usage is None:
        key_usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(key_usage, critical=True)
    else:
        key_usage = x509.KeyUsage(True, False, True, False, False, False, False, False, False)
        builder = builder.add_extension(key_usage, critical=True)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(directory: Path, stem: str, cert: x509.Certificate, key: rsa.RSAPrivateKey) -> None:
    (directory / f"{stem}-cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / f"{stem}-key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )


def make_pki(root: Path) -> tuple[Path, Path, Path]:
    """Server and client certificate directories from one CA, and one from another CA."""
    keys = [rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(4)]
    ca = _certificate("diskferry test CA", keys[0], None, None)
    other_ca = _certificate("another CA", keys[3], None, None)
    server = _certificate(
        "localhost", keys[1], (ca.subject, keys[0]), ExtendedKeyUsageOID.SERVER_AUTH
    )
    client = _certificate("client", keys[2], (ca.subject, keys[0]), ExtendedKeyUsageOID.CLIENT_AUTH)
    dirs = []
    for name, stem, cert, key, authority in (
        ("server", "server", server, keys[1], ca),
        ("client", "client", client, keys[2], ca),
        ("stranger", "client", client, keys[2], other_ca),
    ):
        directory = root / name
        directory.mkdir()
        _write(directory, stem, cert, key)
        (directory / "ca-cert.pem").write_bytes(authority.public_bytes(serialization.Encoding.PEM))
        dirs.append(directory)
    return dirs[0], dirs[1], dirs[2]


def tls_args(server_dir: Path) -> list[str]:
    """qemu-nbd's options to require TLS with the certificates in `server_dir`."""
    return [
        "--object",
        f"tls-creds-x509,id=tls0,endpoint=server,dir={server_dir},verify-peer=on",
        "--tls-creds=tls0",
    ]
