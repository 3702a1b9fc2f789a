"""FileVolume: a regular file or a block device, read and written with pread/pwrite."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat
import struct
from collections.abc import Iterator

from diskferry.base.libc import LIBC
from diskferry.disk.errors import VolumeError
from diskferry.disk.extent import Extent
from diskferry.disk.volume import ExtentContext, Volume
from diskferry.disk.write_behind import WriteBehind

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_BLKGETSIZE64 = 0x80081272
_BLKZEROOUT = 0x127F
_ZERO_WRITE_BLOCK = 1 << 20
# what O_DIRECT asks of a write's offset, length and memory: a page (block sizes are at most)
DIRECT_ALIGN = 4096

LIBC.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def is_block_device(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names a block device."""
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


def takes_direct_io(path: str | os.PathLike[str]) -> bool:
    """Whether the file or block device at `path` opens for writing with O_DIRECT (a tmpfs
    file, for one, does not)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


class FileVolume(Volume):
    """A file or block device; files are sparse and report holes from SEEK_DATA/SEEK_HOLE.

    With `write_behind` (a target written once, in bulk) what is written goes to the disk
    as the writing goes on and leaves the page cache (`disk/write_behind.py`). With `direct`
    a write of whole pages from page-aligned memory (the copy engine's buffers) goes to the
    disk around the page cache (O_DIRECT), which saves copying it there; other writes, and
    all writes where the file system refuses O_DIRECT, go the buffered way.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        writable: bool = False,
        write_behind: bool = False,
        direct: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC
        try:
            self._fd = os.open(self.path, flags)
        except OSError as e:
            raise VolumeError(f"cannot open {self.path}: {e.strerror}") from e
        mode = os.fstat(self._fd).st_mode
        self.block_device = stat.S_ISBLK(mode)
        if not (self.block_device or stat.S_ISREG(mode)):
            os.close(self._fd)
            raise VolumeError(f"{self.path} is neither a regular file nor a block device")
        self.readonly = not writable
        self.sparse = not self.block_device
        self._size = self._read_size()
        self._behind = WriteBehind(self._fd, self.path) if writable and write_behind else None
        self._direct = self._open_direct() if writable and direct else -1
        self._direct_on = self._direct >= 0

    def _open_direct(self) -> int:
        """A second descriptor of the file, with O_DIRECT; -1 where it cannot have one."""
        try:
            return os.open(self.path, os.O_RDWR | os.O_DIRECT | os.O_CLOEXEC)
        except OSError:
            return -1

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        size: int,
        *,
        exclusive: bool = False,
        write_behind: bool = False,
        direct: bool = False,
    ) -> FileVolume:
        """Create (or truncate) a sparse file of `size` bytes and open it for writing.

        With `exclusive` a file that exists already is an error, never truncated.
        """
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else os.O_TRUNC)
        try:
            fd = os.open(path, flags, 0o644)
            os.ftruncate(fd, size)
            os.close(fd)
        except OSError as e:
            raise VolumeError(f"cannot create {os.fspath(path)}: {e.strerror}") from e
        return cls(path, writable=True, write_behind=write_behind, direct=direct)

    def _read_size(self) -> int:
        if self.block_device:
            buf = fcntl.ioctl(self._fd, _BLKGETSIZE64, b"\0" * 8)
            return struct.unpack("Q", buf)[0]
        return os.fstat(self._fd).st_size

    @property
    def size(self) -> int:
        """The size in bytes."""
        return self._size

    def __repr__(self) -> str:
        return f"FileVolume({self.path!r})"

    def fileno(self) -> int:
        """The open file descriptor."""
        return self._fd

    def read_into(self, offset: int, buf: memoryview | bytearray) -> None:
        """Fill `buf` from `offset`."""
        view = memoryview(buf).cast("B")
        done = 0
        while done < len(view):
            n = os.preadv(self._fd, [view[done:]], offset + done)
            if n == 0:
                raise VolumeError(f"{self.path}: short read at offset {offset + done}")
            done += n

    def write(self, offset: int, data: bytes | memoryview | bytearray) -> None:
        """Write `data` at `offset`."""
        if self.readonly:
            raise VolumeError(f"{self.path} is open read-only")
        view = memoryview(data).cast("B")
        direct = (
            self._write_direct(offset, view) if self._direct_on and _aligned(offset, view) else 0
        )
        done = direct
        try:
            while done < len(view):
                done += os.pwrite(self._fd, view[done:], offset + done)
        except OSError as e:
            raise VolumeError(f"{self.path}: write at offset {offset + done}: {e.strerror}") from e
        if self._behind is not None and done > direct:
            self._behind.written(offset + direct, done - direct)

    def _write_direct(self, offset: int, view: memoryview) -> int:
        """Write what of `view` O_DIRECT takes at `offset`; the bytes written. Where the file
        system refuses O_DIRECT, none, and no more O_DIRECT writes."""
        done = 0
        try:
            while done < len(view):
                done += os.pwrite(self._direct, view[done:], offset + done)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise VolumeError(
                    f"{self.path}: write at offset {offset + done}: {e.strerror}"
                ) from e
            if not done:
                self._direct_on = False
        return done

    def zero(self, offset: int, length: int) -> None:
        """Punch a hole (file), BLKZEROOUT (block device), or write zeros where neither works."""
        if self.readonly:
            raise VolumeError(f"{self.path} is open read-only")
        if length <= 0:
            return
        if self.block_device:
            try:
                fcntl.ioctl(self._fd, _BLKZEROOUT, struct.pack("QQ", offset, length))
                return
            except OSError:
                pass
        elif (
            LIBC.fallocate(self._fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length)
            == 0
        ):
            return
        self._write_zeros(offset, length)

    def _write_zeros(self, offset: int, length: int) -> None:
        block = bytes(min(length, _ZERO_WRITE_BLOCK))
        end = offset + length
        while offset < end:
            n = min(len(block), end - offset)
            self.write(offset, memoryview(block)[:n])
            offset += n

    def flush(self) -> None:
        """fsync the file or device."""
        try:
            os.fsync(self._fd)
        except OSError as e:
            raise VolumeError(f"{self.path}: fsync: {e.strerror}") from e

    def truncate(self, size: int) -> None:
        """Change the size of a file volume (block devices keep theirs)."""
        if self.block_device:
            raise VolumeError(f"{self.path}: a block device cannot be resized")
        os.ftruncate(self._fd, size)
        self._size = size

    def extents(
        self, context: ExtentContext = "zero", offset: int = 0, length: int | None = None
    ) -> Iterator[Extent]:
        """Data and holes from SEEK_DATA/SEEK_HOLE; a block device is all data."""
        end = self.size if length is None else min(self.size, offset + length)
        if self.block_device or context == "dirty":
            yield from super().extents(context, offset, end - offset)
            return
        pos = offset
        while pos < end:
            try:
                data = os.lseek(self._fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                data = end
            data = min(data, end)
            if data > pos:
                yield Extent(pos, data - pos, zero=True, hole=True)
            if data >= end:
                return
            hole = min(os.lseek(self._fd, data, os.SEEK_HOLE), end)
            yield Extent(data, hole - data, zero=False)
            pos = hole

    def allocated_bytes(self) -> int:
        """Bytes the file occupies on disk."""
        return os.fstat(self._fd).st_blocks * 512

    def close(self) -> None:
        """Close the file descriptors."""
        if self._direct >= 0:
            os.close(self._direct)
            self._direct = -1
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _aligned(offset: int, view: memoryview) -> bool:
    """Whether O_DIRECT can write `view` at `offset`: whole pages from page-aligned memory."""
    if offset % DIRECT_ALIGN or len(view) % DIRECT_ALIGN or not len(view) or view.readonly:
        return False
    return ctypes.addressof(ctypes.c_char.from_buffer(view)) % DIRECT_ALIGN == 0
