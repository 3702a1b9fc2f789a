"""The embedded host's server certificates (`host.certs`): short-lived, issued by the daemon's
CA in DATA_DIR/pki (the one its API's certificate comes from, see `pki`), and renewed at half
their life by replacing a worker's certificate files (its TLS context loads changed files for
each new connection, so downloads go on). The CA touches nothing but the data directory. The
certificates of a connection between two workers come from a CA of their own instead, made
for that connection and forgotten."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from cryptography import x509

from diskferry.control.clock import Clock
from diskferry.control.runtime.runner.base import JobFile, Runner
from diskferry.serving.certs import CA_CERT, CA_KEY, create_ca, issue_pair, issue_server_cert
from diskferry.serving.tls import TLS_CERT, TLS_KEY

CERT_LIFETIME = timedelta(hours=24)
PKI_DIR = "pki"
QEMU_CA = "ca-cert.pem"
CA_NAME = "diskferry CA"


def expiry(chain: bytes) -> datetime | None:
    """When the first certificate of a PEM chain expires, None when it cannot be read."""
    try:
        return x509.load_pem_x509_certificate(chain).not_valid_after_utc
    except ValueError:
        return None


class DaemonCa:
    """Issues certificates of `lifetime` from the CA in `pki_dir` (made there when missing)."""

    ca_file = CA_CERT

    def __init__(
        self, pki_dir: Path, lifetime: timedelta = CERT_LIFETIME, clock: Clock | None = None
    ) -> None:
        self.pki_dir = Path(pki_dir)
        self.lifetime = lifetime
        self.clock = clock or Clock()
        self._lock = threading.Lock()

    def ca_pem(self) -> bytes:
        """The CA certificate in PEM; the CA is made first when the directory has none."""
        with self._lock:
            if not (self.pki_dir / CA_CERT).exists() or not (self.pki_dir / CA_KEY).exists():
                self.pki_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
                create_ca(self.pki_dir, common_name=CA_NAME)
        return (self.pki_dir / CA_CERT).read_bytes()

    def files(self, sans: Sequence[str]) -> dict[str, bytes]:
        """A server's certificate directory: a fresh certificate for `sans`, its key, the CA."""
        ca = self.ca_pem()
        chain, key = issue_server_cert(self.pki_dir, list(sans), self.lifetime)
        return {TLS_CERT: chain, TLS_KEY: key, CA_CERT: ca}

    def job_files(self, sans: Sequence[str]) -> list[JobFile]:
        """The files of a server's certificate directory (see `files`), for its job."""
        return [JobFile(name, data) for name, data in self.files(sans).items()]

    def renew_at(self, chain: bytes | None) -> datetime | None:
        """When a certificate is due for renewal (half its life before it expires)."""
        expires = None if chain is None else expiry(chain)
        return None if expires is None else expires - self.lifetime / 2

    def seconds_to_renewal(self, runner: Runner, job_id: str) -> float:
        """Seconds until the job's certificate is due (0 when it is due or unreadable)."""
        due = self.renew_at(runner.read_file(job_id, TLS_CERT))
        return 0.0 if due is None else max((due - self.clock.now()).total_seconds(), 0.0)

    def renew(self, runner: Runner, job_id: str, sans: Sequence[str]) -> bool:
        """Replace the running job's certificate and key when due; whether it did."""
        if self.seconds_to_renewal(runner, job_id) > 0:
            return False
        fresh = self.files(sans)
        # the key first: a connection between the two writes finds a mismatched pair, which
        # the server refuses to load, keeping the previous one until the certificate lands
        runner.write_file(job_id, TLS_KEY, fresh[TLS_KEY])
        runner.write_file(job_id, TLS_CERT, fresh[TLS_CERT])
        return True

    def connection_files(self, server_name: str) -> tuple[list[JobFile], list[JobFile]]:
        """The server's and the client's files of one connection, from a CA of its own (see
        `host.certs.ServerCerts.connection_files`), valid as long as this CA's certificates."""
        pair = issue_pair(server_name, self.lifetime)
        server = [
            JobFile(QEMU_CA, pair.ca),
            JobFile("server-cert.pem", pair.server_cert),
            JobFile("server-key.pem", pair.server_key, credential=True),
        ]
        client = [
            JobFile(QEMU_CA, pair.ca),
            JobFile("client-cert.pem", pair.client_cert),
            JobFile("client-key.pem", pair.client_key, credential=True),
        ]
        return server, client
