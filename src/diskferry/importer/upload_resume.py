"""A resumable upload's bytes so far: a partial file beside the target, continued at its end.

The protocol, on diskferry's own upload server only (CDI's and Deckhouse's clients never see
it): a HEAD of an upload path answers `Upload-Offset` (the bytes kept) and, once known,
`Upload-Length`; a PATCH with `Content-Range: bytes START-END/TOTAL` sends more, START being
that offset (or 0 to start again). The bytes go into the partial file, never the target; the
PATCH that brings the last byte imports the whole file into the target as any upload is.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from dataclasses import dataclass
from typing import BinaryIO

from diskferry.disk.file_volume import is_block_device

OFFSET_HEADER = "Upload-Offset"
LENGTH_HEADER = "Upload-Length"
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")
PARTIAL_SUFFIX = ".upload-partial"
# the upload's whole length, kept on the partial file so a restarted server still knows it
_TOTAL_XATTR = "user.diskferry.upload-length"


class ResumeConflictError(Exception):
    """A PATCH that does not continue the partial file where it ends."""


@dataclass(frozen=True)
class ContentRange:
    """The bytes START..END (inclusive) of a body of TOTAL bytes."""

    start: int
    end: int
    total: int

    @property
    def length(self) -> int:
        """How many bytes the range holds."""
        return self.end - self.start + 1


def parse_content_range(header: str | None) -> ContentRange:
    """`bytes START-END/TOTAL`, END below TOTAL and not below START; ValueError otherwise."""
    found = _CONTENT_RANGE.match((header or "").strip())
    if found is None:
        raise ValueError("give Content-Range: bytes START-END/TOTAL")
    start, end, total = (int(g) for g in found.groups())
    if not start <= end < total:
        raise ValueError(f"Content-Range bytes {start}-{end}/{total} is not a range of the body")
    return ContentRange(start, end, total)


def partial_path(target: str) -> str:
    """Where an upload into `target` keeps its bytes: beside a file, in TMPDIR for a device."""
    target = os.path.abspath(target)
    if not is_block_device(target):
        return target + PARTIAL_SUFFIX
    tag = hashlib.sha256(target.encode()).hexdigest()[:16]
    return os.path.join(os.environ.get("TMPDIR", "/var/tmp"), f"diskferry-upload-{tag}")


class PartialFile:
    """The partial file of one upload: how much it holds, of how much, and appending to it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._total: int | None = None
        self._file: BinaryIO | None = None

    @property
    def total(self) -> int | None:
        """The upload's whole length once a PATCH said it (a file left by an earlier server
        keeps it where the file system has extended attributes)."""
        if self._total is None:
            with contextlib.suppress(OSError, ValueError):
                self._total = int(os.getxattr(self.path, _TOTAL_XATTR))
        return self._total

    @property
    def offset(self) -> int:
        """The bytes kept so far (a file left by an earlier server counts)."""
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    def begin(self, span: ContentRange) -> None:
        """Open the file to take `span`: at its end, or afresh when it starts at 0."""
        if span.start not in (0, self.offset):
            raise ResumeConflictError(f"the upload continues at byte {self.offset}")
        if span.start and self.total not in (None, span.total):
            raise ResumeConflictError(
                f"the upload in progress is {self.total} bytes long, not {span.total}"
            )
        self._total = span.total
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.ftruncate(fd, span.start)
        with contextlib.suppress(OSError):
            os.setxattr(fd, _TOTAL_XATTR, str(span.total).encode())
        self._file = os.fdopen(fd, "wb", buffering=0)
        self._file.seek(span.start)

    def write(self, data: bytes) -> None:
        """Append `data`."""
        assert self._file is not None
        self._file.write(data)

    def end(self) -> None:
        """Flush what was written to disk and close: what the PATCH brought is kept."""
        if self._file is None:
            return
        try:
            os.fsync(self._file.fileno())
        finally:
            self._file.close()
            self._file = None

    @property
    def complete(self) -> bool:
        """Whether the file holds the whole upload."""
        return self.total is not None and self.offset == self.total

    def reader(self) -> BinaryIO:
        """The whole upload, to import."""
        return open(self.path, "rb")

    def discard(self) -> None:
        """Remove the file: its upload was imported or refused."""
        self._total = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
