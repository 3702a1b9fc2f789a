"""Opening an import source (a local path, an HTTP(S) URL, a containerDisk, or a body
handed in) as a counted stream."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from diskferry.base.errors import CancelledError, DiskferryError
from diskferry.disk.checksums import Checksum
from diskferry.disk.decompress import Readable
from diskferry.disk.progress import Progress
from diskferry.disk.schemes import is_layout_reference, is_reference
from diskferry.disk.urls import http_url_for_message

if TYPE_CHECKING:
    from diskferry.disk.http import HttpSource, ResumingReader
    from diskferry.disk.http_volume import HttpVolume
    from diskferry.registry.client import RegistryOptions
    from diskferry.registry.containerdisk import ContainerDiskStream
    from diskferry.registry.digests import BlobOpener
    from diskferry.registry.images import Image

# a URL's scheme: what `scheme://` a source that no opener takes starts with
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class SourceError(DiskferryError):
    """The source cannot be opened."""

    reason = "SourceUnavailable"


def read_headers_file(path: str) -> dict[str, str]:
    """'Name: value' lines from a file (for headers that carry secrets)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or "not text"
        raise SourceError(
            f"cannot read the headers file {path}: {why}", reason="BadHeadersFile"
        ) from e
    headers = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip():
            headers[name.strip()] = value.strip()
    return headers


def is_url(source: str) -> bool:
    """Whether `source` is an http:// or https:// URL."""
    return source.startswith(("http://", "https://"))


class SourceStream:
    """The source's bytes as received: counted into progress and hashed for the checksum.

    A docker:// source is the disk file of a containerDisk: `size` and progress count
    the layer bytes, `content_size` the disk file's. With `body`, the bytes come from it
    (an upload, say), `source` only names them and `body_size` is their length when known.
    """

    def __init__(
        self,
        source: str,
        *,
        ca_bundle: str | None = None,
        headers: dict[str, str] | None = None,
        retries: int = 5,
        timeout: float = 30.0,
        checksum: Checksum | None = None,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        body: Readable | None = None,
        body_size: int | None = None,
        registry: RegistryOptions | None = None,
    ) -> None:
        self.name = http_url_for_message(source) if is_url(source) else source
        self.local_path: str | None = None
        self.bytes_read = 0
        self._checksum = checksum
        self._progress = progress
        self._cancel = cancel
        self._http: HttpSource | None = None
        self._reader: ResumingReader | None = None
        self._volume: HttpVolume | None = None
        self._body = body
        self._file = None
        self._disk: ContainerDiskStream | None = None
        self.digest: str | None = None
        self.content_type: str | None = None
        if body is not None:
            self.size: int | None = body_size
        elif is_reference(source):
            self._open_container_disk(source, registry, ca_bundle)
        elif is_layout_reference(source):
            self._open_layout(source)
        elif is_url(source):
            from diskferry.disk.http import HttpSource

            self._http = HttpSource(
                source,
                ca_bundle=ca_bundle,
                headers=headers or {},
                retries=retries,
                timeout=timeout,
                owned=True,
            )
            self._reader = self._http.open_stream(0, cancel)
            self.size = self._reader.length
            self.content_type = self._reader.content_type
        elif _SCHEME.match(source):
            raise SourceError(
                f"unsupported source scheme {_SCHEME.match(source)[1]}: give a local path, "
                "an http(s):// URL, a docker:// reference or an nbd[s]:// URL",
                reason="UnsupportedScheme",
            )
        else:
            try:
                self._file = open(source, "rb", buffering=0)  # noqa: SIM115
            except OSError as e:
                raise SourceError(f"cannot open {source}: {e.strerror}") from e
            self.local_path = source
            self.size = os.fstat(self._file.fileno()).st_size
        if self._disk is None:
            self.content_size = self.size

    def _open_container_disk(
        self, source: str, options: RegistryOptions | None, ca_bundle: str | None
    ) -> None:
        from diskferry.registry.blobs import blob_opener
        from diskferry.registry.client import RegistryClient, RegistryOptions
        from diskferry.registry.images import resolve
        from diskferry.registry.reference import parse_reference

        ref = parse_reference(source)
        client = RegistryClient.for_reference(ref, options or RegistryOptions(ca_bundle=ca_bundle))
        image = resolve(client, ref)
        self._use_image(image, blob_opener(client, ref.repository))

    def _open_layout(self, source: str) -> None:
        from diskferry.registry.layout import Layout, parse_layout_reference

        folder, tag = parse_layout_reference(source)
        layout = Layout(folder)
        self._use_image(layout.image(tag), layout.open_blob)

    def _use_image(self, image: Image, open_blob: BlobOpener) -> None:
        from diskferry.registry.containerdisk import ContainerDiskStream

        self._disk = ContainerDiskStream(image, open_blob, self._progress, self._cancel)
        self.name = image.name
        self.digest = image.manifest.digest
        self.size = self._disk.layer_size
        self.content_size: int | None = self._disk.size

    def ranged_volume(self) -> HttpVolume | None:
        """The source as a volume read with Range requests, several at once, in place of the
        stream: for an HTTP(S) source of known length whose server said it accepts Range and
        named its version (ETag or Last-Modified), and of that version only, so that runs of
        two versions are never mixed. The stream is closed then; None where it cannot be."""
        reader = self._reader
        if self._http is None or reader is None or reader.length is None:
            return None
        if not reader.ranges or reader.validator is None:
            return None
        from diskferry.disk.http_volume import HttpVolume

        self._volume = HttpVolume(
            self._http, size=reader.length, validator=reader.validator, cancel=self._cancel
        )
        reader.close()
        return self._volume

    @property
    def resumes(self) -> int:
        """How many times the transfer resumed after a break."""
        if self._disk is not None:
            return self._disk.resumes
        runs = self._volume.resumes if self._volume is not None else 0
        return runs + (self._reader.resumes if self._reader is not None else 0)

    def read(self, n: int = 1 << 20) -> bytes:
        """Up to `n` bytes of the source."""
        if self._cancel is not None and self._cancel.is_set():
            raise CancelledError("cancelled")
        if self._body is not None:
            data = self._body.read(n)
        elif self._disk is not None:
            data = self._disk.read(n)
        elif self._reader is not None:
            data = self._reader.read(n)
        else:
            data = self._read_file(n)
        self.bytes_read += len(data)
        if self._checksum is not None:
            self._checksum.update(data)
        if self._progress is not None and self._disk is None:
            self._progress.add(len(data))
        return data

    def _read_file(self, n: int) -> bytes:
        try:
            return self._file.read(n)
        except OSError as e:
            raise SourceError(
                f"cannot read {self.name} at byte {self.bytes_read}: {e.strerror or e}"
            ) from e

    def drain(self) -> None:
        """Read what is left (so the checksum covers the whole stream)."""
        while self.read(1 << 20):
            pass

    def close(self) -> None:
        """Close the file or connection."""
        if self._disk is not None:
            self._disk.close()
        if self._reader is not None:
            self._reader.close()
        if self._volume is not None:
            self._volume.close()
        if self._file is not None:
            self._file.close()
