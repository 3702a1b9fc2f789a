"""Server TLS: a context whose certificate and settings reload when their files change.

Python's ssl module cannot restrict TLS 1.3 cipher suites; `ciphers` applies to TLS 1.2.
"""

from __future__ import annotations

import logging
import os
import shutil
import ssl
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from diskferry.serving.certs import CA_CERT, CA_KEY, issue_server_cert
from diskferry.serving.errors import TlsSetupError
from diskferry.serving.watch import FileWatch
from diskferry.serving.yaml_file import read_yaml_model

log = logging.getLogger(__name__)

TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
DEFAULT_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS"
_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


class TlsSettings(BaseModel):
    """The TLS settings file: minimum version and the TLS 1.2 cipher list."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    min_version: Literal["1.2", "1.3"] = Field("1.2", alias="minVersion")
    ciphers: str = DEFAULT_CIPHERS

    @field_validator("min_version", mode="before")
    @classmethod
    def _version_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, float | int) else value


def load_tls_settings(path: str | os.PathLike[str] | None) -> TlsSettings:
    """The settings in `path` (YAML), or the defaults when there is no path or file."""
    if path is None or not Path(path).exists():
        return TlsSettings()
    return read_yaml_model(Path(path), TlsSettings, TlsSetupError, "TLS settings")


def apply_tls_settings(context: ssl.SSLContext, settings: TlsSettings) -> None:
    """Set the minimum version and TLS 1.2 ciphers of `context`."""
    try:
        context.set_ciphers(settings.ciphers)
    except (ssl.SSLError, ValueError) as e:
        raise TlsSetupError(f"no usable cipher in {settings.ciphers!r}: fix 'ciphers'") from e
    context.minimum_version = _VERSIONS[settings.min_version]


class ServerTls:
    """The TLS context of a server in `cert_dir`: tls.crt/tls.key, or a certificate from the CA.

    `refresh()` (called for each new connection) reloads the certificate and the settings
    when their files changed; connections already open keep what they negotiated.
    """

    def __init__(
        self,
        cert_dir: str | os.PathLike[str],
        sans: list[str],
        settings_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.cert_dir = Path(cert_dir)
        self.sans = sans
        self.settings_path = settings_path
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.served_chain = b""
        self._issued: tuple[bytes, bytes] | None = None
        self._private = Path(tempfile.mkdtemp(prefix="diskferry-tls-"))
        self._cert_watch = FileWatch([self.cert_dir / TLS_CERT, self.cert_dir / TLS_KEY])
        self._settings_watch = FileWatch([settings_path] if settings_path else [])
        try:
            self._reload_cert()
            self._reload_settings()
        except BaseException:
            self.close()
            raise

    def _cert_pair(self) -> tuple[bytes, bytes]:
        cert, key = self.cert_dir / TLS_CERT, self.cert_dir / TLS_KEY
        if cert.exists() and key.exists():
            try:
                return cert.read_bytes(), key.read_bytes()
            except OSError as e:
                raise TlsSetupError(f"cannot read {cert} and {key}: {e.strerror}") from e
        if not (self.cert_dir / CA_CERT).exists() or not (self.cert_dir / CA_KEY).exists():
            raise TlsSetupError(
                f"{self.cert_dir} holds neither {TLS_CERT}/{TLS_KEY} nor a CA: "
                f"run 'diskferry export ca create --dir {self.cert_dir}'"
            )
        if self._issued is None:
            self._issued = issue_server_cert(self.cert_dir, self.sans)
        return self._issued

    def _reload_cert(self) -> None:
        if not self._cert_watch.changed():
            return
        chain, key = self._cert_pair()
        # Private copies, so the pair cannot change between the check and the live load; the
        # check loads into a scratch context, so a mismatched pair never reaches the live one.
        cert_path, key_path = self._private / TLS_CERT, self._private / TLS_KEY
        cert_path.write_bytes(chain)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
            self.context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as e:
            raise TlsSetupError(f"tls.crt and tls.key in {self.cert_dir} do not load: {e}") from e
        self.served_chain = chain

    def _reload_settings(self) -> None:
        if self._settings_watch.changed():
            apply_tls_settings(self.context, load_tls_settings(self.settings_path))

    def refresh(self) -> None:
        """Reload what changed; on a bad file keep the previous state and log why."""
        for reload in (self._reload_cert, self._reload_settings):
            try:
                reload()
            except TlsSetupError as e:
                log.warning("keeping the previous TLS setup: %s", e)

    def ca_pem(self) -> str:
        """The certificate clients should trust: the CA, or the served chain without one."""
        ca = self.cert_dir / CA_CERT
        return ca.read_text() if ca.exists() else self.served_chain.decode()

    def close(self) -> None:
        """Remove the private copies of certificate and key."""
        shutil.rmtree(self._private, ignore_errors=True)
