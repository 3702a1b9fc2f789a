"""The serve engine's entry function: a volume served read-only over NBD by qemu-nbd, with
block status (holes and zeros) so that a clone reads only data, until `stop`.

The CLI's `volume serve` serves a volume the same way from a terminal; this is the worker's,
which publishes where it listens in its /progress details and ends when stopped, or fails
(NbdServerFailed) when qemu-nbd ends by itself.
"""

from __future__ import annotations

import os
import threading

from diskferry.disk.progress import Progress
from diskferry.importer.serve_job import ServeJob, ServePhase, ServeResult
from diskferry.qemu import NbdServeOptions, NbdServer, NbdServerError
from diskferry.worker.pod import server_address
from diskferry.worker.reporter import QUIET, EventType, Reporter

POLL_SECONDS = 0.2


def serve_volume(
    job: ServeJob, progress: Progress, stop: threading.Event, reporter: Reporter = QUIET
) -> ServeResult:
    """Serve the job's source until `stop` is set."""
    progress.set_phase(ServePhase.STARTING)
    address = server_address(job.listen_address)
    tls = os.path.abspath(job.tls_certificates) if job.tls_certificates else None
    options = NbdServeOptions(name=job.export, tls_dir=tls)
    with NbdServer(job.source, address, job.listen_port, options) as server:
        process = server.process
        assert process is not None
        progress.set_phase(ServePhase.SERVING)
        reporter.details(listenAddress=address, listenPort=server.port, url=server.url)
        reporter.event(EventType.NORMAL, "Serving", f"serving {job.source} read-only")
        while not stop.wait(POLL_SECONDS):
            if process.poll() is not None:
                server.wait()  # its failure, in qemu-nbd's words
                raise NbdServerError(f"qemu-nbd stopped serving {job.source}")
    return ServeResult(listen_address=address, listen_port=server.port)
