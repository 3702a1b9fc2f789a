"""Volume: something with a size that bytes are read from and written to at offsets."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Literal

from diskferry.disk.errors import VolumeError
from diskferry.disk.extent import Extent

ExtentContext = Literal["zero", "dirty"]


class Volume(ABC):
    """A synchronous, thread-safe disk: many threads may read and write at different offsets.

    `sparse` says that zeroing is cheap and leaves holes, so a copy skips zero blocks
    instead of writing them. `readonly` volumes refuse writes.
    """

    readonly: bool = False
    sparse: bool = False
    # the most a copy asks for in one `open_run`; None: one block (each read stands alone)
    run_size: int | None = None

    @property
    @abstractmethod
    def size(self) -> int:
        """The size in bytes."""

    @abstractmethod
    def read_into(self, offset: int, buf: memoryview | bytearray) -> None:
        """Fill `buf` with the bytes at `offset`; short reads raise VolumeError."""

    def read_into_many(self, pieces: Sequence[tuple[int, memoryview]]) -> None:
        """Fill each `(offset, buf)` of `pieces` with the bytes at its offset; this one reads
        them in turn, a volume that can keep many requests in flight sends them all at once."""
        for offset, buf in pieces:
            self.read_into(offset, buf)

    def open_run(self, offset: int, length: int) -> RunReader:
        """A reader of the `length` bytes at `offset`, in order; this one reads each piece
        with `read_into`, a volume that pays for each request reads them from one."""
        return RunReader(self, offset, length)

    def read(self, offset: int, length: int) -> bytes:
        """The `length` bytes at `offset`."""
        buf = bytearray(length)
        self.read_into(offset, buf)
        return bytes(buf)

    def write(self, offset: int, data: bytes | memoryview | bytearray) -> None:
        """Write `data` at `offset`."""
        raise VolumeError(f"{self} is read-only")

    def zero(self, offset: int, length: int) -> None:
        """Make [offset, offset+length) read as zeros, as a hole where the volume can."""
        raise VolumeError(f"{self} is read-only")

    def flush(self) -> None:
        """Make what was written durable."""

    def extents(
        self, context: ExtentContext = "zero", offset: int = 0, length: int | None = None
    ) -> Iterator[Extent]:
        """The extents covering [offset, offset+length): what reads as zeros, or dirty runs.

        A volume that knows nothing of its allocation reports one data extent.
        """
        end = self.size if length is None else min(self.size, offset + length)
        if offset < end:
            yield Extent(
                offset, end - offset, zero=False, dirty=True if context == "dirty" else None
            )

    def close(self) -> None:
        """Release what the volume holds."""

    def __enter__(self) -> Volume:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RunReader:
    """The bytes of one run of a volume, read in order into the caller's buffers."""

    def __init__(self, volume: Volume, offset: int, length: int) -> None:
        self.volume = volume
        self.position = offset
        self.end = offset + length

    def read_into(self, buf: memoryview | bytearray) -> None:
        """Fill `buf` with the run's next bytes; past the run's end raises VolumeError."""
        if self.position + len(buf) > self.end:
            raise VolumeError(f"read past the end of a run of {self.volume}")
        self._fill(buf)
        self.position += len(buf)

    def _fill(self, buf: memoryview | bytearray) -> None:
        self.volume.read_into(self.position, buf)

    def close(self) -> None:
        """Release what the reader holds."""

    def __enter__(self) -> RunReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
