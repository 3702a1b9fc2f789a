"""The daemon's CA, server certificate and token: made once, kept, reissued for a new address."""

from __future__ import annotations

from pathlib import Path

from cryptography import x509

from diskferry.control.apiserver.pki import ensure_pki, ensure_token


def _sans(path: Path) -> set[str]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    return ips | set(sans.get_values_for_type(x509.DNSName))


def test_pki_is_kept_and_reissued_only_for_new_names(tmp_path: Path) -> None:
    first = ensure_pki(tmp_path)
    ca, server = first.ca_cert.read_bytes(), first.server_cert.read_bytes()
    assert _sans(first.server_cert) == {"127.0.0.1", "localhost"}
    assert first.server_key.stat().st_mode & 0o777 == 0o600
    again = ensure_pki(tmp_path)
    assert again.server_cert.read_bytes() == server
    wider = ensure_pki(tmp_path, ["127.0.0.2"])
    assert wider.ca_cert.read_bytes() == ca
    assert _sans(wider.server_cert) == {"127.0.0.1", "127.0.0.2", "localhost"}


def test_token_is_kept_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "token"
    token = ensure_token(path)
    assert len(token) >= 32
    assert path.stat().st_mode & 0o777 == 0o600
    assert ensure_token(path) == token
