"""The certificates of the servers the daemon starts (export, upload, backup point and proxy
workers) as reconcilers see them: a CA that issues each its own, short-lived, and renews it in
the running job (the embedded host's CA is in its data directory; a cluster's, cert-manager's
or a Secret's); and the certificates of one connection between two workers (a clone's source
and its reader) that trust only each other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from diskferry.control.runtime.runner.base import JobFile, Runner


class ServerCerts(Protocol):
    """Issues servers' certificates from one CA."""

    @property
    def ca_file(self) -> str:
        """The name of the CA certificate's file among a server's files (see `job_files`)."""

    def ca_pem(self) -> bytes:
        """The CA certificate in PEM."""

    def job_files(self, sans: Sequence[str]) -> list[JobFile]:
        """A server's certificate directory for its job: a fresh certificate for `sans`, its
        key, and the CA certificate (`ca_file`)."""

    def seconds_to_renewal(self, runner: Runner, job_id: str) -> float:
        """Seconds until the running job's certificate is due for renewal (0 when it is)."""

    def renew(self, runner: Runner, job_id: str, sans: Sequence[str]) -> bool:
        """Replace the running job's certificate and key when due; whether it did."""

    def connection_files(self, server_name: str) -> tuple[list[JobFile], list[JobFile]]:
        """The files of one TLS connection whose two ends trust only each other, through a CA
        made for it alone (its key forgotten once it issued them), in qemu's layout: the
        server's (ca-cert.pem, server-cert.pem for `server_name`, server-key.pem) and the
        client's (ca-cert.pem, client-cert.pem, client-key.pem); the keys are credentials."""
