"""What `diskferry info` tells of an image, reading only its head (or qemu-img for a local file);
and the same of an import's source, as a probe job asks it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from diskferry.disk.decompress import DecompressingReader
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.formats import (
    PROBE_BYTES,
    parse_qcow2_header,
    probe_compression,
    probe_format,
    read_fixed_vhd_size,
)
from diskferry.disk.peek import PeekReader
from diskferry.importer.job import ImportJob, registry_options
from diskferry.importer.probe_job import ProbeJob, ProbeResult, SizeUnknownError
from diskferry.importer.source import SourceStream
from diskferry.qemu import img

if TYPE_CHECKING:
    from diskferry.registry.client import RegistryOptions


def probe_image(
    image: str,
    *,
    ca_bundle: str | None = None,
    headers: dict[str, str] | None = None,
    registry: RegistryOptions | None = None,
    retries: int = 5,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Format, compression, virtual size, allocated size and backing file of `image`."""
    stream = SourceStream(
        image,
        ca_bundle=ca_bundle,
        headers=headers,
        registry=registry,
        retries=retries,
        timeout=timeout,
    )
    try:
        raw = PeekReader(stream)
        compression = probe_compression(raw.peek(8))
        body = PeekReader(DecompressingReader(raw, compression)) if compression else raw
        head = body.peek(PROBE_BYTES)
    finally:
        stream.close()
    fmt = probe_format(head)
    if fmt == "raw" and stream.local_path and not compression:
        with FileVolume(stream.local_path) as image:
            if read_fixed_vhd_size(image, image.size) is not None:
                fmt = "vhd"
    found: dict[str, Any] = {
        "format": fmt,
        "compression": compression,
        "virtualSize": None,
        "allocatedSize": None,
        "backingFile": None,
        "dataFile": None,
        "encrypted": False,
    }
    if stream.local_path and not compression:
        info = img.info(stream.local_path, fmt, untrusted=True)
        found.update(
            virtualSize=info.virtual_size,
            allocatedSize=info.actual_size,
            backingFile=info.backing_file,
            dataFile=info.data_file,
            encrypted=info.encrypted,
        )
        return found
    if stream.local_path:
        found["allocatedSize"] = os.stat(stream.local_path).st_blocks * 512
    if fmt == "qcow2":
        header = parse_qcow2_header(head)
        found.update(
            virtualSize=header.virtual_size,
            backingFile=header.backing_file,
            dataFile=header.data_file,
            encrypted=header.encrypted,
        )
    elif fmt == "raw" and not compression:
        found["virtualSize"] = stream.content_size
    return found


def probe_job_source(job: ImportJob) -> dict[str, Any]:
    """`probe_image` of the job's source, reached as the job reaches it."""
    return probe_image(
        job.source,
        ca_bundle=job.ca_bundle,
        headers=job.headers,
        registry=registry_options(job),
        retries=job.retries,
        timeout=job.timeout,
    )


def probe_size(job: ProbeJob) -> ProbeResult:
    """The format and virtual size of the job's source; SizeUnknownError when its head does not
    tell its size."""
    found = probe_job_source(job)
    if found["virtualSize"] is None:
        what = (
            f"{found['compression']}-compressed {found['format']}"
            if found["compression"]
            else found["format"]
        )
        raise SizeUnknownError(
            f"the virtual size of a {what} image is not told by its head: give the claim's "
            "size (persistentVolumeClaim.size), or import it as qcow2 (compressed or not) or "
            "uncompressed raw"
        )
    return ProbeResult(
        format=found["format"], compression=found["compression"], virtual_size=found["virtualSize"]
    )
