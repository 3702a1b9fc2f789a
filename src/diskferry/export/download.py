"""The download client: a volume from an export (direct or through the proxy) into a raw file.

Raw downloads read the sibling `extents` when the server offers it and fetch only the
allocated ranges over several connections; every read resumes with Range after a break.
Compressed downloads fetch the sibling `.gz` or `.zst` and decompress as they go.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from diskferry.base.errors import CancelledError
from diskferry.disk.copy import copy
from diskferry.disk.decompress import DecompressingReader
from diskferry.disk.extent import Extent
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.http import HttpError, HttpSource, RangeNotSupportedError
from diskferry.disk.http_volume import HttpVolume
from diskferry.disk.prime import Target
from diskferry.disk.progress import Progress
from diskferry.disk.sparse_writer import SparseWriter
from diskferry.export.errors import DownloadError
from diskferry.export.extent_pages import parse_page
from diskferry.export.token import TOKEN_HEADER

Encoding = Literal["raw", "gzip", "zstd"]
_SIBLING = {"raw": "disk.img", "gzip": "disk.img.gz", "zstd": "disk.img.zst"}
_READ = 4 << 20  # a block: a whole run of most disks, one read and one write
_ADVICE = {
    401: "give the export's token with --token or --token-file",
    403: "the token or headers given do not allow this download",
    404: "check the URL: it should end in /volumes/<volume>/disk.img",
    410: "the export has expired",
    503: "the export is not ready yet",
}


@dataclass
class DownloadRequest:
    """What to download, from where, and how."""

    url: str
    target: Path
    force: bool = False  # replace a target that exists
    token: str | None = None
    ca_bundle: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    encoding: Encoding = "raw"
    connections: int = 4
    retries: int = 5
    backoff: float = 0.5
    timeout: float = 30.0


@dataclass
class DownloadResult:
    """What a download did."""

    target: str
    size: int
    encoding: str
    sparse_map: bool
    bytes_fetched: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """The result as one JSON object."""
        return {
            "target": self.target,
            "size": self.size,
            "encoding": self.encoding,
            "extents": self.sparse_map,
            "bytesFetched": self.bytes_fetched,
            "seconds": round(self.seconds, 3),
        }


def sibling(url: str, name: str) -> str:
    """`url` with its last path segment replaced by `name`, query kept."""
    parts = urlsplit(url)
    base = parts.path.rsplit("/", 1)[0]
    return urlunsplit(parts._replace(path=f"{base}/{name}"))


def _source(req: DownloadRequest, url: str) -> HttpSource:
    headers = dict(req.headers)
    if req.token is not None:
        headers[TOKEN_HEADER] = req.token
    return HttpSource(
        url,
        ca_bundle=req.ca_bundle,
        headers=headers,
        retries=req.retries,
        backoff=req.backoff,
        timeout=req.timeout,
        owned=True,
    )


def fetch_extents(req: DownloadRequest, size: int) -> list[Extent] | None:
    """The volume's extents from the sibling `extents`, or None when the server has none."""
    if not urlsplit(req.url).path.endswith("/" + _SIBLING["raw"]):
        return None
    base = sibling(req.url, "extents")
    extents: list[Extent] = []
    offset: int | None = 0
    while offset is not None:
        sep = "&" if urlsplit(base).query else "?"
        source = _source(req, f"{base}{sep}offset={offset}")
        try:
            resp = source.request("GET", stream=False)
        except HttpError as e:
            if e.status in (404, 405, 501):
                return None
            raise
        finally:
            source.close()
        page, next_offset = parse_page(resp.data)
        if next_offset is not None and next_offset <= offset:
            raise DownloadError(f"the server's extents do not advance past offset {offset}")
        extents += page
        offset = next_offset
    covered = sum(e.length for e in extents)
    if covered != size or any(a.end != b.start for a, b in itertools.pairwise(extents)):
        raise DownloadError(f"the server's extents cover {covered} bytes of a {size}-byte disk")
    return extents


@contextlib.contextmanager
def _target(path: Path, size: int, force: bool) -> Iterator[tuple[FileVolume, bool]]:
    """The volume to write and whether it reads as zeros already; one that exists is
    replaced only with `force`.

    A file is written as a prime file beside it, renamed over it at the end (see `Target`),
    so a failed or cancelled download leaves the old file as it was; a block device is
    written in place.
    """
    target = Target(str(path))
    if os.path.exists(target.path) and not force:
        raise DownloadError(
            f"{target.path} exists: give --force to replace it", reason="TargetExists"
        )
    try:
        with target.open_prime(size, direct=True) as vol:
            if vol.size < size:
                raise DownloadError(f"{path} holds {vol.size} bytes, the disk needs {size}")
            yield vol, not target.block_device
        target.commit()
    finally:
        target.discard()


def _size(source: HttpSource) -> int:
    size, _ = source.head()
    if size is None:
        raise DownloadError("the server did not say how large the disk is (no Content-Length)")
    return size


def _raw(
    req: DownloadRequest, progress: Progress, cancel: threading.Event | None
) -> tuple[int, bool, int]:
    source = _source(req, req.url)
    try:
        try:
            volume = HttpVolume(source)
        except RangeNotSupportedError:
            return _stream(req, source, None, _size(source), progress, cancel)
        size = volume.size
        extents = fetch_extents(req, size)
        progress.set_total(size)
        before = progress.done
        with _target(req.target, size, req.force) as (dst, zeroed):
            result = copy(
                volume,
                dst,
                extents=extents,
                progress=progress,
                dst_zeroed=zeroed,
                block_size=_READ,
                workers=max(1, req.connections),
                max_memory=max(1, req.connections) * _READ,
                cancel=cancel,
            )
            if cancel is not None and cancel.is_set():
                raise CancelledError("download cancelled")
            if progress.done - before != size:
                raise DownloadError(f"copied {progress.done - before} of {size} bytes")
        return size, extents is not None, result.bytes_read
    finally:
        source.close()


def _stream(
    req: DownloadRequest,
    source: HttpSource,
    kind: str | None,
    size: int,
    progress: Progress,
    cancel: threading.Event | None,
) -> tuple[int, bool, int]:
    """One GET of `source`, decompressed when `kind` says so, written sparse; `size` bytes."""
    progress.set_total(size)
    reader = source.open_stream(0, cancel)
    fetched = 0
    try:
        body = DecompressingReader(reader, kind) if kind else reader
        with _target(req.target, size, req.force) as (dst, zeroed):
            writer = SparseWriter(
                dst,
                dst_zeroed=zeroed,
                limit=size,
                limit_message=f"the stream is larger than the disk's {size} bytes",
                progress=progress,
                cancel=cancel,
            )
            written = writer.write_from(body, _READ)
            if written != size:
                raise DownloadError(f"the stream ended after {written} of {size} bytes")
        fetched = reader.position
    finally:
        reader.close()
    return size, False, fetched


def download(
    req: DownloadRequest, progress: Progress | None = None, cancel: threading.Event | None = None
) -> DownloadResult:
    """Download `req.url` (a volume's disk.img URL) into `req.target` and verify its size."""
    progress = progress or Progress()
    started = time.monotonic()
    if req.ca_bundle is not None and not os.access(req.ca_bundle, os.R_OK):
        raise DownloadError(f"cannot read the CA bundle {req.ca_bundle}: give a PEM file")
    try:
        size, used_map, fetched = _fetch(req, progress, cancel)
    except HttpError as e:
        if e.said or e.status not in _ADVICE:
            raise
        advice = _ADVICE[e.status]
        if e.status == 401 and req.token is not None:
            advice = "the token given was refused"
        raise DownloadError(f"{e}: {advice}", reason=e.reason) from e
    progress.finish()
    return DownloadResult(
        target=str(req.target),
        size=size,
        encoding=req.encoding,
        sparse_map=used_map,
        bytes_fetched=fetched,
        seconds=time.monotonic() - started,
    )


def _fetch(
    req: DownloadRequest, progress: Progress, cancel: threading.Event | None
) -> tuple[int, bool, int]:
    if req.encoding == "raw":
        return _raw(req, progress, cancel)
    disk, source = _source(req, req.url), _source(req, sibling(req.url, _SIBLING[req.encoding]))
    try:
        return _stream(req, source, req.encoding, _size(disk), progress, cancel)
    finally:
        disk.close()
        source.close()
