"""The import pipeline: sniff, decompress as a stream, convert when needed, swap in on success.

An NBD source is a disk already, read by extents (see `from_nbd`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from diskferry.base.cpus import usable_cpus
from diskferry.base.errors import DiskferryError
from diskferry.disk.checksums import Checksum
from diskferry.disk.copy import copy
from diskferry.disk.decompress import DecompressingReader, Readable
from diskferry.disk.errors import RangeNotSupportedError
from diskferry.disk.file_volume import FileVolume, takes_direct_io
from diskferry.disk.formats import (
    PROBE_BYTES,
    is_vmdk_descriptor,
    parse_qcow2_header,
    probe_compression,
    read_fixed_vhd_size,
)
from diskferry.disk.formats import probe_format as probe_image_format
from diskferry.disk.peek import PeekReader
from diskferry.disk.prime import Target, recorded_job
from diskferry.disk.progress import Progress
from diskferry.disk.schemes import is_nbd_url, is_reference
from diskferry.disk.sparse_writer import SparseWriter
from diskferry.disk.xz_blocks import XzBlockReader
from diskferry.importer.job import ImportJob, ImportPhase, ImportResult, registry_options
from diskferry.importer.source import SourceStream, read_headers_file
from diskferry.importer.target import check_size, commit_target, open_target, partly_written
from diskferry.qemu import img
from diskferry.worker.reporter import QUIET, Reporter

# qcow2 metadata on top of the data it describes, at most: tables and refcounts
_QCOW2_SLACK_DIVISOR = 64
_QCOW2_SLACK_FIXED = 16 << 20
# a raw disk is whole sectors
SECTOR = 512
CONTENT_CHECK_HINT = "give --no-content-check to import it all the same"
# the formats whose conversion writes the target faster around the page cache (-t none): the
# benchmark's qcow2 and vhdx by 10-30 %; its vmdk, read in 64 KiB grains, 6 % slower
DIRECT_FROM = frozenset({"qcow2", "vhdx"})


class ImageRefusedError(DiskferryError):
    """The image names something diskferry does not trust or cannot read."""

    reason = "ImageRefused"


@dataclass
class _Sniffed:
    compression: str | None
    format: str
    declared_size: int | None
    stream: Readable


def _sniff(stream: SourceStream) -> _Sniffed:
    raw = PeekReader(stream)
    compression = probe_compression(raw.peek(8))
    body: PeekReader = raw
    if compression == "xz":
        body = PeekReader(XzBlockReader(raw, usable_cpus()))
    elif compression:
        body = PeekReader(DecompressingReader(raw, compression))
    head = body.peek(PROBE_BYTES)
    fmt = probe_image_format(head)
    if is_vmdk_descriptor(head):
        raise ImageRefusedError(
            "the image is a VMDK descriptor that keeps its data in other files; refusing it"
        )
    declared = None
    if fmt == "qcow2":
        header = parse_qcow2_header(head)
        _refuse_untrusted(header.backing_file, header.data_file, header.encrypted)
        declared = header.virtual_size
    elif fmt == "raw" and not compression:
        declared = stream.content_size
        if stream.local_path:
            with FileVolume(stream.local_path) as image:
                if read_fixed_vhd_size(image, image.size) is not None:
                    fmt, declared = "vhd", None
    return _Sniffed(compression, fmt, declared, body)


def _check_content(stream: SourceStream, sniffed: _Sniffed) -> None:
    """Refuse an HTML page, and a raw image whose size is not whole 512-byte sectors."""
    kind = (stream.content_type or "").partition(";")[0].strip().lower()
    if kind == "text/html":
        raise ImageRefusedError(
            f"{stream.name} is an HTML page (Content-Type: text/html), not a disk image; "
            "refusing it",
            reason="NotADiskImage",
            hint=CONTENT_CHECK_HINT,
        )
    if sniffed.format == "raw" and sniffed.declared_size is not None:
        _check_raw_size(stream.name, sniffed.declared_size)


def _check_raw_size(name: str, size: int) -> None:
    """Refuse a raw image of `size` bytes that is not whole 512-byte sectors."""
    if size % SECTOR:
        raise ImageRefusedError(
            f"{name} is {size} bytes, not a multiple of {SECTOR}: not a raw disk image; "
            "refusing it",
            reason="NotADiskImage",
            hint=CONTENT_CHECK_HINT,
        )


def _refuse_untrusted(backing: str | None, data_file: str | None, encrypted: bool) -> None:
    if backing:
        raise ImageRefusedError(f"the image names a backing file ({backing}); refusing it")
    if data_file:
        raise ImageRefusedError(f"the image names an external data file ({data_file}); refusing it")
    if encrypted:
        raise ImageRefusedError("the image is encrypted; diskferry imports unencrypted images")


def _open_source(
    job: ImportJob,
    headers: dict[str, str],
    progress: Progress,
    cancel: threading.Event | None,
    body: Readable | None,
    body_size: int | None,
) -> tuple[SourceStream, Checksum | None, _Sniffed]:
    """Open and sniff the source; one that broke without Range is read again from zero.

    Nothing has been written while sniffing, so starting over loses nothing; a `body` handed
    in cannot be read again.
    """
    restarts = 0
    while True:
        checksum = Checksum(job.checksum) if job.checksum else None
        stream = SourceStream(
            job.source,
            ca_bundle=job.ca_bundle,
            headers=headers,
            retries=job.retries,
            timeout=job.timeout,
            checksum=checksum,
            progress=progress,
            cancel=cancel,
            body=body,
            body_size=body_size,
            registry=registry_options(job) if is_reference(job.source) else None,
        )
        # the sniff's reads count: against the source's size until a phase sets its own total
        progress.set_total(stream.size or 0)
        try:
            return stream, checksum, _sniff(stream)
        except RangeNotSupportedError:
            stream.close()
            if body is not None or restarts >= job.retries:
                raise
            restarts += 1
            progress.uncount(stream.bytes_read)
        except BaseException:
            stream.close()
            raise


def run_import(
    job: ImportJob,
    progress: Progress,
    cancel: threading.Event | None = None,
    reporter: Reporter = QUIET,
    body: Readable | None = None,
    body_size: int | None = None,
) -> ImportResult:
    """Import `job.source` (or the `body_size` bytes of `body`, which it names) into
    `job.target`; the target is replaced only on success.

    A file target committed carries the job's id (see `Target.commit`): a job started again
    whose target carries its id (an earlier run of it committed the target) is done, and
    reads nothing.
    """
    done = done_before(job, progress)
    if done is not None:
        return done
    if is_nbd_url(job.source):
        from diskferry.importer.from_nbd import import_from_nbd

        return import_from_nbd(job, progress, cancel, reporter)
    started = time.monotonic()
    progress.set_phase(ImportPhase.OPENING)
    headers = dict(job.headers)
    if job.headers_file:
        headers.update(read_headers_file(job.headers_file))
    # the source first: a bad one is reported as such, whatever the target is
    stream, checksum, sniffed = _open_source(job, headers, progress, cancel, body, body_size)
    try:
        if job.content_check:
            _check_content(stream, sniffed)
        target, tracked = open_target(job, reporter, stream.local_path)
    except BaseException:
        stream.close()
        raise
    writing = False
    try:
        target.claim()
        if sniffed.declared_size is not None:
            check_size(job, target, sniffed.declared_size)
        writing = True
        progress.set_phase(ImportPhase.IMPORTING)
        if sniffed.format == "raw" and job.format == "raw":
            virtual, read, written = _raw_to_raw(
                job, target, stream, sniffed, checksum, progress, cancel
            )
        else:
            virtual, read, written = _through_qemu_img(
                job, target, stream, sniffed, progress, cancel
            )
        if checksum is not None:
            stream.drain()
            checksum.verify(stream.name)
        commit_target(job, target, tracked, reporter)
    except DiskferryError as e:
        if writing:
            partly_written(e, target)
        raise
    finally:
        stream.close()
        target.discard()
    progress.finish()
    seconds = time.monotonic() - started
    return ImportResult(
        target=target.path,
        source_format=sniffed.format,
        compression=sniffed.compression,
        format=job.format,
        virtual_size=virtual,
        bytes_read=max(read, stream.bytes_read),
        bytes_written=written,
        seconds=round(seconds, 3),
        average_speed=round(max(read, stream.bytes_read) / max(seconds, 1e-9)),
        checksum=None if checksum is None else f"{checksum.algorithm}:{checksum.actual}",
        resumes=stream.resumes,
        digest=stream.digest,
    )


def done_before(job: ImportJob, progress: Progress) -> ImportResult | None:
    """The result of the job when an earlier run of it committed its target (the target
    carries its id): the target as it is; None otherwise."""
    if job.job_id is None or recorded_job(job.target) != job.job_id:
        return None
    path = os.path.abspath(job.target)
    size = os.stat(path).st_size
    progress.finish()
    return ImportResult(
        target=path,
        source_format=job.format,
        compression=None,
        format=job.format,
        virtual_size=size,
        bytes_read=0,
        bytes_written=0,
        seconds=0.0,
        average_speed=0,
        checksum=None,
    )


def _raw_to_raw(
    job: ImportJob,
    target: Target,
    stream: SourceStream,
    sniffed: _Sniffed,
    checksum: Checksum | None,
    progress: Progress,
    cancel: threading.Event | None,
) -> tuple[int, int, int]:
    """Copy a local plain file extent by extent, or a plain HTTP(S) source whose server
    accepts Range in several runs at once, else stream the source, straight into the target.

    A checksum is over the bytes in order, so a source to be checked is streamed.
    """
    plain = not sniffed.compression and checksum is None
    local = bool(stream.local_path) and plain
    ranged = stream.ranged_volume() if plain and not local else None
    by_offsets = local or ranged is not None
    if by_offsets:
        # the copy reads the source again from its start: the sniffed head counts once
        progress.uncount(stream.bytes_read)
    progress.set_total(stream.size or 0)
    with target.open_prime() as dst:
        if by_offsets:
            with ranged or FileVolume(stream.local_path) as src:
                result = copy(
                    src, dst, progress=progress, dst_zeroed=not target.block_device, cancel=cancel
                )
            length, read, written = src.size, result.bytes_read, result.bytes_written
        else:
            room, what = target.capacity()
            limit = job.size or sniffed.declared_size or room
            writer = SparseWriter(
                dst,
                dst_zeroed=not target.block_device,
                limit=limit,
                limit_message=_bomb_message(limit, job.size, sniffed.declared_size, what),
                cancel=cancel,
            )
            length = writer.write_from(sniffed.stream)
            read, written = stream.bytes_read, writer.bytes_written
            if sniffed.declared_size is not None and length < sniffed.declared_size:
                raise ImageRefusedError(
                    f"the stream ended after {length} of {sniffed.declared_size} bytes (truncated)"
                )
        if not local:
            if not target.block_device:
                dst.truncate(length)  # a trailing run of zeros was left unwritten
            disk = read_fixed_vhd_size(dst, length)
            if disk is not None:
                dst.zero(disk, length - disk)
                length, sniffed.format = disk, "vhd"
            elif job.content_check:
                _check_raw_size(stream.name, length)
        final = max(length, job.size or 0)
        if target.block_device:
            dst.zero(length, dst.size - length)
        else:
            dst.truncate(final)
        dst.flush()
    return final, read, written


def _bomb_message(limit: int, size: int | None, declared: int | None, room_what: str) -> str:
    if size:
        bound = f"the requested --size, {size} bytes"
    elif declared:
        bound = f"its declared virtual size, {declared} bytes"
    else:
        bound = f"the {room_what}, {limit} bytes"
    return f"the decompressed image grows past {bound}; refusing it (a decompression bomb?)"


def _through_qemu_img(
    job: ImportJob,
    target: Target,
    stream: SourceStream,
    sniffed: _Sniffed,
    progress: Progress,
    cancel: threading.Event | None,
) -> tuple[int, int, int]:
    """Land the image in a scratch file (unless it is a local plain file), then qemu-img it."""
    local = stream.local_path if not sniffed.compression else None
    if local:
        image = local
        share = stream.size or 1
        # qemu-img reads the file; the stream is read whole only to hash it
        streamed = share if job.checksum else stream.bytes_read
        progress.set_total(streamed + share)
    else:
        share = stream.size or 1
        progress.set_total(2 * share)
        image = target.scratch
        _stream_to_scratch(target, sniffed, cancel)
        if sniffed.format == "raw":
            with FileVolume(image) as scratch:
                if read_fixed_vhd_size(scratch, scratch.size) is not None:
                    sniffed.format = "vhd"
    try:
        info = img.info(image, sniffed.format, untrusted=True)
    except img.QemuImgError as e:
        raise ImageRefusedError(
            f"{stream.name} is not a readable {sniffed.format} image ({e.detail}); refusing it"
        ) from e
    _refuse_untrusted(info.backing_file, info.data_file, info.encrypted)
    if sniffed.format == "raw" and job.content_check:
        _check_raw_size(stream.name, info.virtual_size)
    damage = img.check(image, sniffed.format)
    if damage:
        raise ImageRefusedError(f"the image is damaged or truncated ({damage}); refusing it")
    check_size(job, target, info.virtual_size)
    progress.set_phase(ImportPhase.CONVERTING)
    img.convert(
        image,
        target.prime,
        src_format=sniffed.format,
        dst_format=job.format,
        progress=progress,
        progress_share=share,
        target_exists=target.block_device,
        direct=sniffed.format in DIRECT_FROM and takes_direct_io(target.prime),
        cancel=cancel,
    )
    final = max(info.virtual_size, job.size or 0)
    if target.block_device:
        # the device keeps its size; past the image it reads as zeros, as after a raw import
        with FileVolume(target.path, writable=True) as device:
            device.zero(info.virtual_size, device.size - info.virtual_size)
    elif final > info.virtual_size:
        img.resize(target.prime, final, job.format)
    with FileVolume(target.prime) as out:
        written = out.size if target.block_device else out.allocated_bytes()
    return final, info.actual_size if local else stream.bytes_read, written


def _stream_to_scratch(target: Target, sniffed: _Sniffed, cancel: threading.Event | None) -> None:
    room, what = target.capacity()
    if sniffed.declared_size is not None:
        limit = sniffed.declared_size + sniffed.declared_size // _QCOW2_SLACK_DIVISOR
        limit += _QCOW2_SLACK_FIXED
    else:
        limit = room
    with FileVolume.create(target.scratch, 0) as scratch:
        writer = SparseWriter(
            scratch,
            limit=limit,
            limit_message=_bomb_message(limit, None, sniffed.declared_size, what),
            cancel=cancel,
        )
        scratch.truncate(writer.write_from(sniffed.stream))
