"""Cloning a volume: a reflink (FICLONE) where the file system shares extents, else a copy;
or a reflink alone, where only an instant copy will do."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from dataclasses import dataclass

from diskferry.base.errors import DiskferryError
from diskferry.disk.blocks import zero_range
from diskferry.disk.copy import copy
from diskferry.disk.errors import VolumeError
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.prime import Target, TargetError
from diskferry.disk.progress import Progress

_FICLONE = 0x40049409
# what FICLONE answers where the file systems cannot share extents between the two files
_NO_REFLINK = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS}


@dataclass
class CloneResult:
    """How a clone was made and what it moved."""

    method: str  # "reflink" or "copy"
    size: int
    bytes_read: int
    bytes_written: int


class CloneError(DiskferryError):
    """The clone cannot be made."""

    reason = "CloneFailed"


def clone_volume(
    source: str,
    destination: str,
    *,
    replace: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    job_id: str | None = None,
) -> CloneResult:
    """Make `destination` a copy of the volume `source`, replaced only on success.

    A file on a file system that shares extents (XFS with reflink, btrfs) is cloned
    at once with FICLONE; otherwise the copy engine copies what is allocated, holes
    kept. A block device destination is written in place, its size kept.
    """
    target = Target(destination)
    with FileVolume(source) as src:
        _refuse_same(src, target, replace)
        if target.block_device:
            target.check_fits(src.size)
        if progress is not None:
            progress.set_total(src.size)
        try:
            result = _reflink(src, target) or _copy(src, target, progress, cancel)
            target.commit(job_id)
        except DiskferryError as e:
            if target.block_device:
                e.args = (f"{e.message}; the block device {target.path} is partly written",)
            raise
        finally:
            target.discard()
    if progress is not None:
        if result.method == "reflink":
            progress.add(result.size)
        progress.finish()
    return result


def reflink_volume(
    source: str, destination: str, *, size: int | None = None, job_id: str | None = None
) -> bool:
    """Make the file `destination` share the extents of the file `source` at once (FICLONE),
    grown to `size` bytes when that is larger, replaced only once whole and committed with
    `job_id`; False, with nothing made, where the file systems cannot share extents or either
    is a block device."""
    target = Target(destination)
    with FileVolume(source) as src:
        _refuse_same(src, target, replace=True)
        try:
            if _reflink(src, target) is None:
                return False
            if size is not None and size > src.size:
                os.truncate(target.prime, size)
            target.commit(job_id)
        finally:
            target.discard()
    return True


def _refuse_same(src: FileVolume, target: Target, replace: bool) -> None:
    if not os.path.exists(target.path):
        return
    if os.path.samefile(src.path, target.path):
        raise CloneError(f"the clone {target.path} is its source: give another destination")
    if not target.block_device and not replace:
        raise TargetError(
            f"{target.path} exists: give --force to replace it with the clone",
            reason="TargetExists",
        )


def _reflink(src: FileVolume, target: Target) -> CloneResult | None:
    """Share the source's extents with a new prime file; None where the file system cannot."""
    if target.block_device or src.block_device:
        return None
    with target.open_prime() as dst:
        try:
            fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
        except OSError as e:
            if e.errno in _NO_REFLINK:
                return None
            raise VolumeError(f"cannot clone {src.path}: {e.strerror}") from e
    return CloneResult("reflink", src.size, 0, 0)


def _copy(
    src: FileVolume, target: Target, progress: Progress | None, cancel: threading.Event | None
) -> CloneResult:
    """Copy with the copy engine into a new sparse prime file, or into the device."""
    if not target.block_device:
        target.discard()  # the empty prime a refused reflink left
    with target.open_prime(src.size) as dst:
        done = copy(src, dst, progress=progress, dst_zeroed=not target.block_device, cancel=cancel)
        if target.block_device:
            zero_range(dst, src.size, dst.size - src.size, cancel)
        dst.flush()
    return CloneResult("copy", src.size, done.bytes_read, done.bytes_written)
