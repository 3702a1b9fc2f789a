"""The import's target: opened with its CBT and block-device checks, committed with its chain."""

from __future__ import annotations

import os

from diskferry.base.errors import DiskferryError
from diskferry.disk.prime import Target, TargetError
from diskferry.importer.job import ImportJob
from diskferry.qemu import cbt
from diskferry.worker.reporter import EventType, Reporter


def open_target(
    job: ImportJob, reporter: Reporter, source_path: str | None = None
) -> tuple[Target, bool]:
    """The target `job` writes, and whether it has CBT; a block device to overwrite is told.

    A target that is the source (`source_path`: the same file, through links, or the source's
    CBT overlay) is refused; one that exists is replaced only with `force`.
    """
    path, tracked = cbt.overwrite_target(job.target, job.format)
    target = Target(path)
    if source_path is not None and _is_source(source_path, target.path):
        raise TargetError(
            f"the target {job.target} is the source {source_path}: refusing to overwrite it",
            reason="TargetIsSource",
        )
    if os.path.exists(target.path) and not job.force:
        raise TargetError(
            f"{target.path} exists: give --force to replace it", reason="TargetExists"
        )
    if target.block_device and job.format != "raw":
        raise TargetError(f"{target.path} is a block device: it can only hold a raw image")
    if target.block_device:
        reporter.warn(
            "BlockDeviceInPlace", f"this import overwrites the block device {target.path}"
        )
    return target, tracked


def _is_source(source: str, volume: str) -> bool:
    """Whether `source` is the file of `volume` or of its CBT overlay."""
    names = (volume, cbt.overlay_path(volume))
    return any(os.path.exists(n) and os.path.samefile(source, n) for n in names)


def commit_target(job: ImportJob, target: Target, tracked: bool, reporter: Reporter) -> None:
    """Reset the CBT chain of a tracked target, then swap the prime in."""
    # before the swap: a crash after it must not leave checkpoints that miss the import
    if tracked and cbt.reset_chain(target.path):
        reporter.event(
            EventType.NORMAL,
            "ChainReset",
            f"{target.path} has CBT: its chain was reset, so its next backup is full",
        )
    target.commit(job.job_id)


def partly_written(error: DiskferryError, target: Target) -> None:
    """Say in `error` that the block device `target` was partly written."""
    if target.block_device:
        error.args = (f"{error.message}; the block device {target.path} is partly written",)


def check_size(job: ImportJob, target: Target, virtual: int) -> None:
    """Refuse a --size below the image's virtual size, and an image the target cannot hold."""
    if job.size is not None and job.size < virtual:
        raise TargetError(
            f"--size {job.size} is smaller than the image's virtual size ({virtual} bytes)",
            reason="SizeTooSmall",
        )
    target.check_fits(max(virtual, job.size or 0))
