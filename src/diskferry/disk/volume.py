"""Volume: something with a size that bytes are read from and written to at offsets."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
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

    @property
    @abstractmethod
    def size(self) -> int:
        """The size in bytes."""

    @abstractmethod
    def read_into(self, offset: int, buf: memoryview | bytearray) -> None:
        """Fill `buf` with the bytes at `offset`; short reads raise VolumeError."""

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
