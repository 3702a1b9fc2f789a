"""The upload client: sends one image file to an upload server, CDI's paths or Deckhouse's.

A server that answers a HEAD of the upload path with `Upload-Offset` (diskferry's own) takes
the file resumably: the client sends what the server lacks with PATCH and Content-Range, and
after a broken connection asks again and goes on from there. Any other server gets one POST.
"""

from __future__ import annotations

import os
import threading
from urllib.parse import urlsplit

from diskferry.base.errors import CancelledError, DiskferryError
from diskferry.base.retry import pause
from diskferry.disk.http import HttpError, HttpSource
from diskferry.disk.progress import Progress
from diskferry.importer.upload_job import UploadJob
from diskferry.importer.upload_resume import LENGTH_HEADER, OFFSET_HEADER
from diskferry.importer.upload_token import UploadToken

DEFAULT_PATH = "/v1beta1/upload"
# the sync paths answer once the import is done, conversion included
_ANSWER_TIMEOUT = 24 * 3600.0
_BACKOFF = 0.5


class UploadClientError(DiskferryError):
    """The file cannot be read or the server refused the upload."""

    reason = "UploadFailed"


class _CountingFile:
    """A file read for a request body, counted into progress, stopping on `cancel`."""

    def __init__(self, path: str, progress: Progress, cancel: threading.Event | None) -> None:
        try:
            self._file = open(path, "rb", buffering=0)  # noqa: SIM115
        except OSError as e:
            raise UploadClientError(f"cannot open {path}: {e.strerror}") from e
        self.size = os.fstat(self._file.fileno()).st_size
        self._progress = progress
        self._cancel = cancel
        self._start = 0

    def rewind_to(self, offset: int) -> None:
        """Send from `offset` on: the file is read from there, progress counts from there."""
        self._file.seek(offset)
        self._start = offset
        self._progress.add(offset - self._progress.done)

    def read(self, n: int = 1 << 20) -> bytes:
        """Up to `n` more bytes of the file."""
        if self._cancel is not None and self._cancel.is_set():
            raise CancelledError("cancelled")
        data = self._file.read(max(n, 1 << 20))
        self._progress.add(len(data))
        return data

    def tell(self) -> int:
        """How much of the file has been read for this request."""
        return self._file.tell() - self._start

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def upload_url(url: str) -> str:
    """`url`, with CDI's sync upload path when it names only the server."""
    return url.rstrip("/") + DEFAULT_PATH if urlsplit(url).path in ("", "/") else url


def upload_file(
    path: str,
    url: str,
    *,
    token_file: str | None = None,
    ca_bundle: str | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    retries: int = 5,
    connect_timeout: float = 30.0,
    resume: bool = True,
) -> str:
    """Send `path` as the raw body of a POST to `url`; the server's answer on success.

    With `resume`, a server that keeps partial uploads is sent only what it lacks, and a
    connection that breaks while sending is followed by up to `retries` more tries, each
    going on from where the server says it got.

    A connection that cannot be made is tried again `retries` times, each waiting up to
    `connect_timeout`; the answer, which comes once the server has imported the file, may
    take long.

    A bearer token is sent when `token_file` is given (CDI's paths); Deckhouse's paths,
    `/upload/<secret>`, carry their secret in the URL, which messages never show.
    """
    progress = progress or Progress()
    full = upload_url(url)
    parts = urlsplit(full)
    shown = f"{parts.scheme}://{parts.netloc}{parts.path}"
    prefix = UploadJob.UPLOAD_PREFIX
    if prefix in parts.path:  # also behind a proxy's prefix
        before = parts.path[: parts.path.index(prefix)]
        shown = f"{parts.scheme}://{parts.netloc}{before}{prefix}REDACTED"
    headers = {"Content-Type": "application/octet-stream"}
    if token_file is not None:
        token, _ = UploadToken(token_file).read()
        headers["Authorization"] = f"Bearer {token}"
    body = _CountingFile(path, progress, cancel)
    progress.set_total(body.size)
    server = HttpSource(
        full,
        ca_bundle=ca_bundle,
        timeout=_ANSWER_TIMEOUT,
        shown=shown,
        retries=retries,
        connect_timeout=connect_timeout,
    )
    try:
        offset = server_offset(server, headers, body.size) if resume and body.size else None
        if offset is None:
            headers["Content-Length"] = str(body.size)
            resp = server.request("POST", headers, stream=False, body=body, cancel=cancel)
        else:
            resp = _send_resumably(server, headers, body, offset, retries, cancel)
    finally:
        body.close()
        server.close()
    progress.finish()
    return resp.data.decode(errors="replace").strip()


def server_offset(server: HttpSource, headers: dict[str, str], size: int) -> int | None:
    """Where a resumable upload of `size` bytes goes on (0: from the start), or None when the
    server keeps no partial uploads."""
    try:
        resp = server.request("HEAD", headers, stream=False)
    except HttpError as e:
        if e.status is None:
            raise
        return None
    offset = resp.headers.get(OFFSET_HEADER)
    if offset is None or not offset.isdigit():
        return None
    length = resp.headers.get(LENGTH_HEADER)
    if int(offset) > size or (length is not None and length != str(size)):
        return 0
    return int(offset)


def _send_resumably(
    server: HttpSource,
    headers: dict[str, str],
    body: _CountingFile,
    offset: int,
    retries: int,
    cancel: threading.Event | None,
):
    """PATCH the file from `offset` on; after a break (or a server that holds another part),
    ask the offset again and go on, `retries` times."""
    attempt = 0
    while True:
        body.rewind_to(offset)
        ranged = {
            **headers,
            "Content-Range": f"bytes {offset}-{body.size - 1}/{body.size}",
            "Content-Length": str(body.size - offset),
        }
        try:
            return server.request("PATCH", ranged, stream=False, body=body, cancel=cancel)
        except HttpError as e:
            if attempt >= retries or e.status not in (None, 409):
                raise
            attempt += 1
            pause(attempt, _BACKOFF, e.fault, cancel)
        offset = server_offset(server, headers, body.size) or 0
