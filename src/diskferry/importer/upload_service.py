"""The upload engine's entry function: one upload server, run until its upload is in or stopped.

The CLI (`upload serve`) and the worker both run it; SIGTERM or SIGINT sets `stop`. The
listening port and URLs are published as details once known; an upload that fails is a
Warning event with its reason (ChecksumMismatch, ...) before the server waits for another.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from aiohttp import web

from diskferry.base.errors import DiskferryError
from diskferry.disk.decompress import Readable
from diskferry.disk.progress import Progress
from diskferry.importer.engine import done_before, run_import
from diskferry.importer.job import ImportJob, ImportResult
from diskferry.importer.upload_job import UploadJob, UploadPhase, UploadResult
from diskferry.importer.upload_resume import PartialFile, partial_path
from diskferry.importer.upload_server import UploadAccessLogger, UploadServer
from diskferry.importer.upload_token import UploadToken
from diskferry.serving.certs import default_sans
from diskferry.serving.run import run
from diskferry.serving.tls import ServerTls
from diskferry.worker.reporter import QUIET, EventType, Reporter

# how often the server looks at `stop` and at whether the upload is in
_POLL_SECONDS = 0.1


def serve_upload(
    job: UploadJob, progress: Progress, stop: threading.Event, reporter: Reporter = QUIET
) -> UploadResult:
    """Serve the upload paths until an upload succeeded (or, with `keepServing`, until `stop`);
    nothing is served when an earlier run of the job took its upload (its target carries the
    job's id)."""
    progress.set_phase(UploadPhase.STARTING)
    import_job = ImportJob(
        source="the upload",
        target=job.target,
        format=job.format,
        size=job.size,
        checksum=job.checksum,
        job_id=job.job_id,
        force=True,
    )
    done = None if job.keep_serving else done_before(import_job, progress)
    if done is not None:
        return UploadResult(listen_port=0, uploaded=done.to_json())
    token = UploadToken(job.token_file)

    def importer(body: Readable, size: int | None) -> ImportResult:
        progress.add(-progress.done)
        try:
            return run_import(import_job, progress, stop, reporter, body=body, body_size=size)
        except DiskferryError as e:
            reporter.event(EventType.WARNING, e.reason, e.message)
            raise
        finally:
            progress.set_phase(UploadPhase.DONE if server.done.is_set() else UploadPhase.WAITING)

    partial = PartialFile(partial_path(job.target))

    def receiving(on: bool) -> None:
        progress.set_phase(UploadPhase.RECEIVING if on else UploadPhase.WAITING)

    server = UploadServer(
        token, importer, stall_timeout=job.idle_timeout, partial=partial, receiving=receiving
    )
    app = server.app()
    ended = threading.Event()
    app.cleanup_ctx.append(_until(server, job, stop, ended))
    tls = ServerTls(job.cert_dir, job.sans or default_sans(), job.tls_settings)
    port = 0

    def announce(listening: int) -> None:
        nonlocal port
        port = listening
        url = f"https://{job.bind_address}:{port}"
        progress.set_phase(UploadPhase.WAITING)
        reporter.details(
            listenAddress=job.bind_address,
            listenPort=port,
            url=f"{url}/v1beta1/upload",
            secretUrl=f"{url}{UploadJob.UPLOAD_PREFIX}<token>",
        )
        reporter.event(EventType.NORMAL, "Listening", f"upload server listening on {url}")

    run(app, tls, job.serve_options(None, job.grace, UploadAccessLogger), ended, announce)
    if server.result is not None:
        progress.set_phase(UploadPhase.DONE)
        progress.finish()
        reporter.event(EventType.NORMAL, "UploadComplete", f"uploaded into {job.target}")
    uploaded = server.result.to_json() if server.result is not None else None
    return UploadResult(listen_port=port, uploaded=uploaded)


def _until(server: UploadServer, job: UploadJob, stop: threading.Event, ended: threading.Event):
    """A cleanup context that sets `ended` on `stop`, or once the upload is in and answered."""

    async def watch(app: web.Application):
        async def watching() -> None:
            while not stop.is_set() and (job.keep_serving or not server.done.is_set()):
                await asyncio.sleep(_POLL_SECONDS)
            ended.set()

        task = asyncio.ensure_future(watching())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return watch
