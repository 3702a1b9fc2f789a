"""A clone's source served over NBD by a worker beside its claim, for the import that writes the
clone to read from wherever it runs: in a cluster, a claim is reachable only from a Pod on the
node its volume is attached to, and the clone's may be on another.

The serve job (`serve-<import job's id>`) mounts the source's claim read-only and serves it with
TLS where the runner says (its Pod's address, in a cluster); the two ends trust only each other,
through a CA made for this one clone whose key is forgotten once it issued the server's and the
client's certificates (see `host.certs.ServerCerts.connection_files`). The client's files are
kept among the serve job's own (its key a credential, removed once the job ends) until the
import is started with them, once the server listens: its address and port are in its /progress.
The serve job works for the clone's target, as its import does (in a cluster, the target owns
its Pod, which goes with it), and is stopped and removed however the clone ends (a failed one's
log tail emitted first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from diskferry.control.host.certs import ServerCerts
from diskferry.control.runtime.runner.base import JobFile, Runner
from diskferry.control.runtime.runner.jobs import Failed, Jobs, Running, Succeeded
from diskferry.importer import ServeJob, ServeResult

SERVER_NAME = "diskferry-clone-source"
"""The name the source's certificate carries, which the import checks."""
KEY = "client-key.pem"
CLIENT_FILES = ("ca-cert.pem", "client-cert.pem", KEY)
"""The client's files, as the NBD client reads them from the URL's tls-certificates folder."""
CLONE_SOURCE_STOPPED = "CloneSourceStopped"


def serve_job_id(job_id: str) -> str:
    """The id of the job serving the source of the import `job_id`."""
    return f"serve-{job_id}"


@dataclass(frozen=True)
class Served:
    """The source as the import reads it: its nbds:// URL, and the client's files the URL
    names."""

    url: str
    files: Sequence[JobFile]


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


class CloneSources:
    """Serves clones' sources through `runner`, each with the certificates `certs` make."""

    def __init__(self, runner: Runner, certs: ServerCerts) -> None:
        self.runner = runner
        self.certs = certs
        self.jobs = Jobs(runner)

    def reach(
        self, job_id: str, location: str, namespace: str, target: tuple[str, str]
    ) -> Served | Failed | None:
        """The source of the import `job_id`, the disk at `location` in a worker that mounts
        its claim (of `namespace`), as the import reads it once its server listens (where the
        runner says); None while the server is started or starts; Failed when it could not
        serve it. The server works for the object of the claim `target` (namespace, name) that
        the import writes, as the import does."""
        serve_id = serve_job_id(job_id)
        polled = self.jobs.poll(serve_id, ServeResult)
        if polled is None:
            server, client = self.certs.connection_files(SERVER_NAME)
            given = {f.name for f in server}
            where = self.runner.server_address(serve_id, namespace)
            job = ServeJob(
                source=location,
                tls_certificates=".",
                listen_address=where.address,
                listen_port=where.port,
            )
            files = [*server, *(f for f in client if f.name not in given)]
            self.jobs.start(serve_id, job, files, for_claim=target)
            return None
        if isinstance(polled, Succeeded):
            return Failed(
                CLONE_SOURCE_STOPPED, "the worker serving the source stopped before the copy"
            )
        if isinstance(polled, Failed):
            return polled
        assert isinstance(polled, Running)
        details = (polled.progress or {}).get("details") or {}
        address, port = details.get("listenAddress"), details.get("listenPort")
        files = [(name, self.runner.read_file(serve_id, name)) for name in CLIENT_FILES]
        if not address or not isinstance(port, int) or any(data is None for _, data in files):
            return None
        url = (
            f"nbds://{_host(str(address))}:{port}/{ServeJob.EXPORT}"
            f"?tls-certificates=.&tls-hostname={SERVER_NAME}"
        )
        client = [JobFile(name, data or b"", credential=name == KEY) for name, data in files]
        return Served(url, client)

    def stop(self, job_id: str) -> bool:
        """Stop the server of the import `job_id` and remove it, its log tail emitted when it
        ended by itself; False while it still runs (it was asked to stop)."""
        serve_id = serve_job_id(job_id)
        return self.jobs.settle(serve_id, serve_id, keep=False) and self.jobs.stop(serve_id)
