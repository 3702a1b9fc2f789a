"""Growing a volume in place: a file made longer (its new bytes a hole, read as zeros), and a
loop device over it told its backing file grew (LOOP_SET_CAPACITY)."""

from __future__ import annotations

import fcntl
import os
import stat

from diskferry.disk.errors import VolumeError

_LOOP_SET_CAPACITY = 0x4C07


def grow_volume(path: str, size: int, device: str | None = None) -> int:
    """Grow the regular file at `path` to `size` bytes (never shrink it), then the loop device
    `device` over it, when given, to the file's new size; the file's size after."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise VolumeError(f"cannot open {path} to grow it: {e.strerror}") from e
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise VolumeError(f"{path} is not a regular file: only a file is grown")
        if size > found.st_size:
            os.ftruncate(fd, size)
            os.fsync(fd)
        grown = max(size, found.st_size)
    finally:
        os.close(fd)
    if device is not None:
        _set_capacity(device)
    return grown


def _set_capacity(device: str) -> None:
    """Make the loop device `device` read its backing file's size anew."""
    try:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise VolumeError(f"cannot open {device}: {e.strerror}") from e
    try:
        if not stat.S_ISBLK(os.fstat(fd).st_mode):
            raise VolumeError(f"{device} is not a block device")
        fcntl.ioctl(fd, _LOOP_SET_CAPACITY, 0)
    except OSError as e:
        raise VolumeError(f"cannot grow the loop device {device}: {e.strerror}") from e
    finally:
        os.close(fd)
