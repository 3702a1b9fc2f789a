"""Blank volumes: a new sparse file, or a block device made to read as zeros with BLKZEROOUT."""

from __future__ import annotations

import os
import threading

from diskferry.base.errors import DiskferryError, check_cancel
from diskferry.disk.blocks import ZERO_STEP
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.prime import Target, TargetError
from diskferry.disk.progress import Progress


def create_blank(
    path: str,
    size: int | None,
    *,
    replace: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    job_id: str | None = None,
) -> int:
    """Make `path` a blank volume; its size in bytes.

    A file is created sparse, `size` bytes, beside itself and renamed in place (one that
    exists is replaced only with `replace`). A block device keeps its size, which `size`
    may not exceed, and is zeroed whole (BLKZEROOUT, so thin storage frees the blocks).
    """
    target = Target(path)
    if not target.block_device:
        if size is None:
            raise TargetError(f"a blank file volume needs a size: give --size for {target.path}")
        if os.path.exists(target.path) and not replace:
            raise TargetError(
                f"{target.path} exists: give --force to replace it with a blank volume",
                reason="TargetExists",
            )
    elif size is not None:
        _check_device_size(target, size)
    try:
        with target.open_prime(size or 0) as volume:
            if target.block_device:
                _zero_device(volume, progress, cancel)
            created = volume.size
        target.commit(job_id)
    except DiskferryError as e:
        if target.block_device:
            e.args = (f"{e.message}; the block device {target.path} is partly zeroed",)
        raise
    finally:
        target.discard()
    return created


def _check_device_size(target: Target, size: int) -> None:
    room, _ = target.capacity()
    if size > room:
        raise TargetError(
            f"--size {size} is larger than the block device {target.path} ({room} bytes)",
            reason="TargetTooSmall",
        )


def _zero_device(
    device: FileVolume, progress: Progress | None, cancel: threading.Event | None
) -> None:
    if progress is not None:
        progress.set_total(device.size)
    for offset in range(0, device.size, ZERO_STEP):
        check_cancel(cancel)
        length = min(ZERO_STEP, device.size - offset)
        device.zero(offset, length)
        if progress is not None:
            progress.add(length)
    device.flush()
