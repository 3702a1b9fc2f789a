"""TLS (NBD_OPT_STARTTLS) against qemu-nbd with x509 credentials made here."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from nbd_helpers import Server, free_port, make_image, pattern

from diskferry.nbd.client import NbdClient
from diskferry.nbd.errors import NbdConnectionError, NbdError
from diskferry.nbd.volume import NbdVolume


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


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Server and client certificate directories from one CA, and one from another CA."""
    root = tmp_path_factory.mktemp("pki")
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


def _tls_args(server_dir: Path) -> list[str]:
    return [
        "--object",
        f"tls-creds-x509,id=tls0,endpoint=server,dir={server_dir},verify-peer=on",
        "--tls-creds=tls0",
    ]


def test_tls_over_unix_socket(
    qemu_nbd: Callable[..., Server], pki: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    server_dir, client_dir, _ = pki
    data = pattern(1 << 20, 3)
    image = make_image(tmp_path / "tls.raw", 8 << 20, {4096: data})
    server = qemu_nbd(image, "raw", *_tls_args(server_dir))
    url = server.url.replace("nbd+unix", "nbds+unix")
    url += f"&tls-certificates={client_dir}&tls-hostname=localhost"
    blocks = {(i + 2) << 20: pattern(1 << 18, i) for i in range(4)}
    with NbdVolume.open(url, writable=True) as volume, ThreadPoolExecutor(8) as pool:
        assert volume.read(4096, len(data)) == data
        volume.write(0, b"over tls")
        assert [e.zero for e in volume.extents("zero")][:2] == [False, True]
        # one thread receives while the others send: reads and writes interleave
        reads = [pool.submit(volume.read, 4096 + i * 1000, 100_000) for i in range(64)]
        list(pool.map(lambda item: volume.write(*item), blocks.items()))
        assert all(r.result() == data[i * 1000 : i * 1000 + 100_000] for i, r in enumerate(reads))
    content = image.read_bytes()
    assert content[:8] == b"over tls"
    assert all(content[at : at + len(b)] == b for at, b in blocks.items())


def test_tls_over_tcp(
    serve: Callable[..., Server], pki: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    server_dir, client_dir, stranger_dir = pki
    image = make_image(tmp_path / "tcp.raw", 4 << 20, {0: b"tcp and tls"})
    port = free_port()
    argv = ["qemu-nbd", "--persistent", "-b", "127.0.0.1", "-p", str(port), "-f", "raw"]
    serve([*argv, *_tls_args(server_dir), str(image)], ("127.0.0.1", port), "")
    with NbdClient.connect(f"nbds://127.0.0.1:{port}/?tls-certificates={client_dir}") as client:
        assert client.read(0, 11) == b"tcp and tls"
    with pytest.raises(NbdError) as caught:
        NbdClient.connect(f"nbd://127.0.0.1:{port}/")
    assert "TLS required" in str(caught.value) and "nbds://" in str(caught.value)
    with pytest.raises(NbdConnectionError) as caught:
        NbdClient.connect(f"nbds://127.0.0.1:{port}/?tls-certificates={stranger_dir}")
    assert "TLS with NBD server" in str(caught.value)
