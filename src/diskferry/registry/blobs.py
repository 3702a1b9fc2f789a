"""Blobs: verified streaming reads that resume with Range, and chunked uploads."""

from __future__ import annotations

import contextlib
import threading

from diskferry.base.errors import DiskferryError
from diskferry.disk.http import HttpError, HttpSource
from diskferry.disk.progress import Progress
from diskferry.registry.client import RegistryClient
from diskferry.registry.digests import BlobOpener, VerifiedReader
from diskferry.registry.errors import BlobUnknownError, RegistryError

CHUNK = 8 << 20


def pull_scope(repository: str) -> str:
    """The token scope to read `repository`."""
    return f"repository:{repository}:pull"


def push_scope(repository: str) -> str:
    """The token scope to write `repository`."""
    return f"repository:{repository}:pull,push"


def blob_path(repository: str, digest: str) -> str:
    """The API path of a blob."""
    return f"/v2/{repository}/blobs/{digest}"


class BlobReader(VerifiedReader):
    """A registry blob as it streams, verified, resuming with Range after a break."""

    def __init__(
        self,
        client: RegistryClient,
        repository: str,
        digest: str,
        size: int | None = None,
        *,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        what = f"{client.registry}/{repository}@{digest}"
        scope = pull_scope(repository)
        client.request("HEAD", blob_path(repository, digest), scope=scope, what=what).release_conn()
        source = HttpSource(
            client.url(blob_path(repository, digest)),
            ca_bundle=client.options.ca_bundle,
            headers=client.auth_headers(scope),
            retries=client.options.retries,
            backoff=client.options.backoff,
            timeout=client.options.timeout,
        )
        try:
            reader = source.open_stream(0, cancel)
        except HttpError as e:
            kind = BlobUnknownError if e.status == 404 else RegistryError
            raise kind(f"{what}: {e.message}", e.status) from e
        self._http = reader
        super().__init__(reader, digest, size, what, progress)

    @property
    def resumes(self) -> int:
        """How many times the transfer resumed after a break."""
        return self._http.resumes

    def _read_raw(self, n: int) -> bytes:
        try:
            return self._http.read(n)
        except DiskferryError as e:
            raise RegistryError(f"{self.what}: {e.message}", reason=e.reason) from e


def blob_opener(client: RegistryClient, repository: str) -> BlobOpener:
    """Opens the blobs of `repository` for a ContainerDiskStream."""

    def open_blob(
        digest: str, size: int | None, progress: Progress | None, cancel: threading.Event | None
    ) -> VerifiedReader:
        return BlobReader(client, repository, digest, size, progress=progress, cancel=cancel)

    return open_blob


def blob_exists(client: RegistryClient, repository: str, digest: str) -> bool:
    """Whether the registry already holds `digest` in `repository` (HEAD)."""
    what = f"{client.registry}/{repository}@{digest}"
    resp = client.request(
        "HEAD",
        blob_path(repository, digest),
        scope=push_scope(repository),
        what=what,
        ok=(200, 404),
    )
    resp.release_conn()
    return resp.status == 200


def mount_blob(client: RegistryClient, repository: str, digest: str, source: str) -> bool:
    """Mount `digest` from the repository `source` of the same registry; whether it took.

    A registry that cannot mount starts an upload instead, which is dropped.
    """
    resp = client.request(
        "POST",
        f"/v2/{repository}/blobs/uploads/?mount={digest}&from={source}",
        scope=f"{push_scope(repository)} {pull_scope(source)}",
        what=f"{client.registry}/{repository}@{digest} (from {source})",
        ok=(201, 202),
    )
    resp.release_conn()
    if resp.status == 201:
        return True
    location = resp.headers.get("Location")
    if location:
        with contextlib.suppress(DiskferryError):
            client.request(
                "DELETE",
                location,
                scope=push_scope(repository),
                what=client.registry,
                ok=(204, 404),
            ).release_conn()
    return False


class Upload:
    """A chunked blob upload: POST, one PATCH a chunk, PUT with the digest."""

    def __init__(self, client: RegistryClient, repository: str) -> None:
        self.client = client
        self.repository = repository
        self.scope = push_scope(repository)
        self.what = f"{client.registry}/{repository}: blob upload"
        self.offset = 0
        self._buffer = bytearray()
        resp = client.request(
            "POST",
            f"/v2/{repository}/blobs/uploads/",
            scope=self.scope,
            what=self.what,
            ok=(202,),
        )
        self._location = self._next_location(resp)

    def _next_location(self, resp) -> str:
        location = resp.headers.get("Location")
        resp.release_conn()
        if not location:
            raise RegistryError(f"{self.what}: the registry sent no upload Location")
        return self.client.url(location)

    def write(self, data: bytes) -> int:
        """Take `data`; a full chunk is sent."""
        self._buffer += data
        while len(self._buffer) >= CHUNK:
            self._send(bytes(self._buffer[:CHUNK]))
            del self._buffer[:CHUNK]
        return len(data)

    def _send(self, chunk: bytes) -> None:
        resp = self.client.request(
            "PATCH",
            self._location,
            scope=self.scope,
            what=self.what,
            ok=(202,),
            headers={
                "Content-Type": "application/octet-stream",
                "Content-Range": f"{self.offset}-{self.offset + len(chunk) - 1}",
                "Content-Length": str(len(chunk)),
            },
            body=chunk,
        )
        self._location = self._next_location(resp)
        self.offset += len(chunk)

    def finish(self, digest: str) -> None:
        """Send what is left and commit the blob as `digest`."""
        if self._buffer:
            self._send(bytes(self._buffer))
            self._buffer.clear()
        sep = "&" if "?" in self._location else "?"
        self.client.request(
            "PUT",
            f"{self._location}{sep}digest={digest}",
            scope=self.scope,
            what=self.what,
            ok=(201,),
            headers={"Content-Length": "0"},
            body=b"",
        ).release_conn()

    def cancel(self) -> None:
        """Drop the upload (best effort)."""
        with contextlib.suppress(DiskferryError):
            self.client.request(
                "DELETE", self._location, scope=self.scope, what=self.what, ok=(204, 404)
            ).release_conn()
