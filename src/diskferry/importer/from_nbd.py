"""Import from an NBD export (a volume another host serves): the copy engine, by extents.

The export is a disk already, so nothing is sniffed or converted: holes and zero runs
that block status reports are never read, all-zero blocks are not written, and several
requests are in flight on the one connection. The target is a prime file swapped in on
success, or a block device written in place.
"""

from __future__ import annotations

import threading
import time

from diskferry.base.errors import DiskferryError
from diskferry.disk.blocks import zero_range
from diskferry.disk.copy import copy
from diskferry.disk.progress import Progress
from diskferry.importer.job import ImportJob, ImportPhase, ImportResult
from diskferry.importer.source import SourceError
from diskferry.importer.target import check_size, commit_target, open_target, partly_written
from diskferry.nbd import open_volume
from diskferry.worker.reporter import Reporter


def import_from_nbd(
    job: ImportJob, progress: Progress, cancel: threading.Event | None, reporter: Reporter
) -> ImportResult:
    """Copy the NBD export `job.source` into `job.target`, replaced only on success."""
    _refuse_stream_options(job)
    started = time.monotonic()
    progress.set_phase(ImportPhase.OPENING)
    src = open_volume(job.source, cancel=cancel)
    try:
        target, tracked = open_target(job, reporter)
    except BaseException:
        src.close()
        raise
    writing = False
    try:
        with src:
            virtual = src.size
            check_size(job, target, virtual)
            final = max(virtual, job.size or 0)
            progress.set_total(virtual)
            progress.set_phase(ImportPhase.IMPORTING)
            writing = True
            with target.open_prime(final) as dst:
                result = copy(
                    src, dst, progress=progress, dst_zeroed=not target.block_device, cancel=cancel
                )
                if target.block_device:
                    zero_range(dst, virtual, dst.size - virtual, cancel)
                dst.flush()
        commit_target(job, target, tracked, reporter)
    except DiskferryError as e:
        if writing:
            partly_written(e, target)
        raise
    finally:
        target.discard()
    progress.finish()
    seconds = time.monotonic() - started
    return ImportResult(
        target=target.path,
        source_format="raw",
        compression=None,
        format=job.format,
        virtual_size=final,
        bytes_read=result.bytes_read,
        bytes_written=result.bytes_written,
        seconds=round(seconds, 3),
        average_speed=round(result.bytes_read / max(seconds, 1e-9)),
        checksum=None,
    )


def _refuse_stream_options(job: ImportJob) -> None:
    """Refuse what only a byte stream has: a qcow2 result, a stream checksum, HTTP headers."""
    if job.format != "raw":
        raise SourceError(
            f"an NBD export is copied as it is: --format {job.format} is for file and URL "
            "imports; import it as raw",
            reason="UnsupportedOption",
        )
    if job.checksum is not None:
        raise SourceError(
            "--checksum hashes a source stream; an NBD export is copied by extents, "
            "out of order: leave --checksum out",
            reason="UnsupportedOption",
        )
    if job.headers or job.headers_file or job.ca_bundle:
        raise SourceError(
            "HTTP headers and --ca-bundle are for http(s) URLs; an nbds:// URL takes its "
            "certificates as ?tls-certificates=DIR",
            reason="UnsupportedOption",
        )
