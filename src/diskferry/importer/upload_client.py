"""The upload client: sends one image file to an upload server, CDI's paths or Deckhouse's."""

from __future__ import annotations

import os
import threading
from urllib.parse import urlsplit

from diskferry.disk.errors import CancelledError, DiskferryError
from diskferry.disk.http import HttpSource
from diskferry.disk.progress import Progress
from diskferry.importer.upload_server import UPLOAD_PREFIX
from diskferry.importer.upload_token import UploadToken

DEFAULT_PATH = "/v1beta1/upload"
# the sync paths answer once the import is done, conversion included
_ANSWER_TIMEOUT = 24 * 3600.0


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

    def read(self, n: int = 1 << 20) -> bytes:
        """Up to `n` more bytes of the file."""
        if self._cancel is not None and self._cancel.is_set():
            raise CancelledError("cancelled")
        data = self._file.read(max(n, 1 << 20))
        self._progress.add(len(data))
        return data

    def tell(self) -> int:
        """How much of the file has been read."""
        return self._file.tell()

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
) -> str:
    """Send `path` as the raw body of a POST to `url`; the server's answer on success.

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
    if parts.path.startswith(UPLOAD_PREFIX):
        shown = f"{parts.scheme}://{parts.netloc}{UPLOAD_PREFIX}REDACTED"
    headers = {"Content-Type": "application/octet-stream"}
    if token_file is not None:
        token, _ = UploadToken(token_file).read()
        headers["Authorization"] = f"Bearer {token}"
    body = _CountingFile(path, progress, cancel)
    headers["Content-Length"] = str(body.size)
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
        resp = server.request("POST", headers, stream=False, body=body, cancel=cancel)
    finally:
        body.close()
        server.close()
    progress.finish()
    return resp.data.decode(errors="replace").strip()
