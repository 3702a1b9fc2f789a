"""Streaming decompression for gzip (multi-member), xz, zstd and bzip2, with bounded output."""

from __future__ import annotations

import bz2
import lzma
import zlib
from typing import Protocol

from diskferry.base.errors import DiskferryError

_INPUT_BLOCK = 256 * 1024
# Compressed data that is not hostile gives some output for every few bytes it takes; this
# much input without a byte of output (empty members, padding, skippable frames) without
# end is a stream that would keep an import busy for ever.
MAX_IDLE_INPUT = 4 << 20


class DecompressError(DiskferryError):
    """A compressed stream is corrupt or ends early."""

    reason = "BadCompression"


def idle_error(kind: str) -> DecompressError:
    """The error for a `kind` stream that runs past MAX_IDLE_INPUT without output."""
    return DecompressError(
        f"the {kind} stream goes on for more than {MAX_IDLE_INPUT >> 20} MiB without any data; "
        "refusing it"
    )


class Readable(Protocol):
    """Anything with read(n) -> bytes."""

    def read(self, n: int = ...) -> bytes: ...


def _new(kind: str):
    if kind == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if kind == "xz":
        return lzma.LZMADecompressor()
    if kind == "bzip2":
        return bz2.BZ2Decompressor()
    raise DecompressError(f"unknown compression {kind!r}")


class DecompressingReader:
    """read(n) gives at most n decompressed bytes of `raw`; concatenated members are read on."""

    def __init__(self, raw: Readable, kind: str) -> None:
        self.kind = kind
        self._raw = raw
        self._zstd = None
        if kind == "zstd":
            import zstandard

            self._frames = ZstdFrameTracker(raw)
            self._zstd = zstandard.ZstdDecompressor().stream_reader(
                self._frames, read_size=_INPUT_BLOCK, read_across_frames=True, closefd=False
            )
            return
        self._d = _new(kind)
        self._pending = b""
        self._in_member = False
        self._eof = False
        self._idle = 0

    def read(self, n: int = 1 << 20) -> bytes:
        """Up to `n` decompressed bytes; b'' at the end of the stream."""
        if self._zstd is not None:
            return self._read_zstd(n)
        try:
            while True:
                out = self._step(n)
                if out or self._eof:
                    self._idle = 0
                    return out
                if self._idle > MAX_IDLE_INPUT:
                    raise idle_error(self.kind)
        except (zlib.error, lzma.LZMAError, OSError, EOFError) as e:
            raise DecompressError(f"the {self.kind} stream is corrupt: {e}") from e

    def _read_zstd(self, n: int) -> bytes:
        import zstandard

        try:
            out = self._zstd.read(n)  # type: ignore[union-attr]
            self._frames.idle = 0
        except zstandard.ZstdError as e:
            raise DecompressError(f"the zstd stream is corrupt: {e}") from e
        if not out and not self._frames.between_frames:
            raise DecompressError("the zstd stream ends in the middle (truncated)")
        return out

    def _step(self, n: int) -> bytes:
        d = self._d
        zlib_like = self.kind == "gzip"
        if not self._pending and (zlib_like or d.needs_input):
            self._pending = self._raw.read(_INPUT_BLOCK)
            self._idle += len(self._pending)
            if not self._pending:
                if self._in_member:
                    raise DecompressError(f"the {self.kind} stream ends in the middle (truncated)")
                self._eof = True
                return b""
        if zlib_like and not self._in_member:
            # zeros may pad a gzip stream after a member, as gzip itself accepts
            self._pending = self._pending.lstrip(b"\0")
            if not self._pending:
                return b""
        if zlib_like:
            out = d.decompress(self._pending, n)
            self._pending = d.unconsumed_tail
        elif d.needs_input:
            out = d.decompress(self._pending, n)
            self._pending = b""
        else:
            out = d.decompress(b"", n)
        self._in_member = True
        if d.eof:
            self._pending = d.unused_data
            self._d = _new(self.kind)
            self._in_member = False
        return out


_ZSTD_MAGIC = 0xFD2FB528


class ZstdFrameTracker:
    """Passes a zstd stream through while following its frame and block headers.

    The zstandard library reads a stream cut inside a frame as a clean end; this tells
    whether the stream stopped between frames.
    """

    def __init__(self, raw: Readable) -> None:
        self._raw = raw
        self.idle = 0
        self._state = "magic"
        self._want = 4
        self._head = bytearray()
        self._skip = 0
        self._checksum = False

    @property
    def between_frames(self) -> bool:
        """Whether everything read so far ends on a frame boundary."""
        return self._state == "magic" and not self._head and not self._skip

    def read(self, n: int = _INPUT_BLOCK) -> bytes:
        """Read from the raw stream and follow the headers in what passed.

        Past MAX_IDLE_INPUT bytes since `idle` was last reset, it raises instead.
        """
        data = self._raw.read(n)
        self.idle += len(data)
        if self.idle > MAX_IDLE_INPUT:
            raise idle_error("zstd")
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            if self._skip:
                step = min(self._skip, len(view) - pos)
                self._skip -= step
                pos += step
                continue
            take = min(self._want - len(self._head), len(view) - pos)
            self._head += view[pos : pos + take]
            pos += take
            if len(self._head) == self._want:
                head = bytes(self._head)
                self._head.clear()
                self._advance(head)
        return data

    def _advance(self, head: bytes) -> None:
        state = self._state
        if state == "magic":
            magic = int.from_bytes(head, "little")
            if magic == _ZSTD_MAGIC:
                self._state, self._want = "descriptor", 1
            elif magic & 0xFFFFFFF0 == 0x184D2A50:
                self._state, self._want = "skippable", 4
            else:
                raise DecompressError("the zstd stream is corrupt: bad frame magic")
        elif state == "skippable":
            self._skip = int.from_bytes(head, "little")
            self._state, self._want = "magic", 4
        elif state == "descriptor":
            d = head[0]
            single = (d >> 5) & 1
            self._checksum = bool((d >> 2) & 1)
            fcs = (single, 2, 4, 8)[d >> 6]
            self._skip = (0 if single else 1) + (0, 1, 2, 4)[d & 3] + fcs
            self._state, self._want = "block", 3
        elif state == "block":
            h = int.from_bytes(head, "little")
            size = h >> 3
            self._skip = 1 if (h >> 1) & 3 == 1 else size
            if h & 1:
                self._skip += 4 if self._checksum else 0
                self._state, self._want = "magic", 4
