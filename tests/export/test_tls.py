"""TLS of the export server: the CA command, self-issued certificates, rotation mid-download."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from export_support import TOKEN, curl

from diskferry.serving.certs import create_ca, issue_server_cert
from diskferry.serving.errors import TlsSetupError
from diskferry.serving.tls import ServerTls

AUTH = f"x-kubevirt-export-token: {TOKEN}"


def _peer_cert(port: int, ca: Path, name: str = "127.0.0.1") -> x509.Certificate:
    ctx = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
        ctx.wrap_socket(sock, server_hostname=name) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _serve(disk: Path, token: Path, certs: Path, port: int) -> subprocess.CompletedProcess[str]:
    """`diskferry export serve` of `disk` on 127.0.0.1, run to its end."""
    return _cli(
        *("export", "serve", "--name", "x", "--volume", f"d={disk}", "--token-file", str(token)),
        *("--cert-dir", str(certs), "--port", str(port), "--address", "127.0.0.1"),
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "diskferry.cli.main", *args], capture_output=True, text=True
    )


def test_ca_create_writes_a_private_key_and_refuses_to_overwrite(tmp_path: Path) -> None:
    d = tmp_path / "ca"
    assert _cli("export", "ca", "create", "--dir", str(d)).returncode == 0
    cert = x509.load_pem_x509_certificate((d / "ca.crt").read_bytes())
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert (d / "ca.key").stat().st_mode & 0o077 == 0
    again = _cli("export", "ca", "create", "--dir", str(d))
    assert again.returncode == 1
    assert again.stderr.startswith("diskferry: error: ") and "already holds a CA" in again.stderr


def test_serve_without_certificate_or_ca_fails_clearly(
    tmp_path: Path, disk: Path, token_file: Path
) -> None:
    p = _serve(disk, token_file, tmp_path / "empty", 0)
    assert p.returncode == 1
    assert "export ca create" in p.stderr


def test_self_issued_certificate_covers_the_sans(export, ca_dir: Path) -> None:
    cert = _peer_cert(export.port, ca_dir / "ca.crt", "localhost")
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_rotation_mid_download(tmp_path: Path, export_factory, disk: Path) -> None:
    served = tmp_path / "served"
    create_ca(served)
    chain, key = issue_server_cert(served, ["127.0.0.1"])
    (served / "tls.crt").write_bytes(chain)
    (served / "tls.key").write_bytes(key)
    other = tmp_path / "other-ca"
    create_ca(other)
    r = export_factory({"disk": disk}, "--cert-dir", str(served))
    first = _peer_cert(r.port, served / "ca.crt")
    out = tmp_path / "out.img"
    slow = subprocess.Popen(
        [
            "curl",
            "-sS",
            "--cacert",
            str(served / "ca.crt"),
            "-H",
            AUTH,
            "--limit-rate",
            "6M",
            "-o",
            str(out),
            r.url + "/volumes/disk/disk.img",
        ]
    )
    time.sleep(1)
    chain2, key2 = issue_server_cert(other, ["127.0.0.1"])
    tmp_key = served / "tls.key.new"
    tmp_key.write_bytes(key2)
    (served / "tls.crt.new").write_bytes(chain2)
    os.replace(served / "tls.crt.new", served / "tls.crt")
    os.replace(tmp_key, served / "tls.key")
    second = _peer_cert(r.port, other / "ca.crt")
    assert second.serial_number != first.serial_number
    refused = curl("-o", "/dev/null", r.url + "/exportready", ca=served / "ca.crt")
    assert refused.returncode != 0, "the old CA still verifies new connections"
    assert slow.wait(60) == 0, "the download in flight was cut by the rotation"
    assert out.read_bytes() == disk.read_bytes()


def test_port_in_use_fails_clearly(export, disk: Path, token_file: Path, ca_dir: Path) -> None:
    p = _serve(disk, token_file, ca_dir, export.port)
    assert p.returncode == 1
    assert p.stderr.splitlines()[-1].startswith("diskferry: error: cannot listen on 127.0.0.1:")


def test_a_half_rotated_pair_keeps_the_previous_certificate(tmp_path: Path) -> None:
    d = tmp_path / "certs"
    create_ca(d)
    chain, key = issue_server_cert(d, ["127.0.0.1"])
    (d / "tls.crt").write_bytes(chain)
    (d / "tls.key").write_bytes(key)
    tls = ServerTls(d, ["127.0.0.1"])
    try:
        chain2, key2 = issue_server_cert(d, ["127.0.0.1"])
        (d / "tls.crt").write_bytes(chain2)
        tls.refresh()
        assert tls.served_chain == chain
        (d / "tls.key").write_bytes(key2)
        tls.refresh()
        assert tls.served_chain == chain2
    finally:
        tls.close()


def test_bad_tls_settings_are_refused_at_start(tmp_path: Path, ca_dir: Path) -> None:
    settings = tmp_path / "tls.yaml"
    for text in ('minVersion: "1.1"\n', 'ciphers: "NOSUCHCIPHER"\n', "color: blue\n"):
        settings.write_text(text)
        with pytest.raises(TlsSetupError):
            ServerTls(ca_dir, ["127.0.0.1"], settings)
    settings.write_text("minVersion: 1.3\n")
    tls = ServerTls(ca_dir, ["127.0.0.1"], settings)
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_3
    tls.close()
