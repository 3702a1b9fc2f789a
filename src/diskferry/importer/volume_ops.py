"""The import engine's volume jobs run: a blank volume, a volume grown, and an instant copy
with the guests that write its source frozen through their agents for that instant only."""

from __future__ import annotations

import contextlib
import logging

from diskferry.base.errors import DiskferryError
from diskferry.disk.blank import create_blank
from diskferry.disk.clone import reflink_volume
from diskferry.disk.grow import grow_volume
from diskferry.disk.progress import Progress
from diskferry.importer.volume_job import (
    BlankJob,
    GrowJob,
    ReflinkJob,
    ReflinkResult,
    VolumePhase,
    VolumeResult,
)
from diskferry.qemu.freeze import frozen
from diskferry.qemu.qmp import QmpError

log = logging.getLogger("diskferry.importer")


class GuestNotFrozenError(DiskferryError):
    """A guest agent did not freeze its guest: no instant copy was made."""

    reason = "GuestNotFrozen"


def blank(job: BlankJob, progress: Progress) -> VolumeResult:
    """Make the job's target a blank volume of its size."""
    progress.set_phase(VolumePhase.BLANKING)
    size = create_blank(job.target, job.size, progress=progress, job_id=job.job_id)
    return VolumeResult(size=size)


def grow(job: GrowJob, progress: Progress) -> VolumeResult:
    """Grow the job's target (and its loop device) to its size."""
    progress.set_phase(VolumePhase.GROWING)
    return VolumeResult(size=grow_volume(job.target, job.size, job.device))


def reflink(job: ReflinkJob, progress: Progress) -> ReflinkResult:
    """Clone the job's source into its target at an instant, its guests frozen around it."""
    with contextlib.ExitStack() as thaw:
        if job.freeze:
            progress.set_phase(VolumePhase.FREEZING)
        for agent in job.freeze:
            try:
                thaw.enter_context(frozen(agent, job.freeze_timeout))
            except QmpError as e:
                raise GuestNotFrozenError(
                    f"the guest agent at {agent} did not freeze its guest: {e.message}"
                ) from e
            log.info("froze the guest of the agent at %s", agent)
        progress.set_phase(VolumePhase.CLONING)
        cloned = reflink_volume(job.source, job.target, size=job.size, job_id=job.job_id)
    if job.freeze:
        log.info("thawed %d guest(s) after the clone", len(job.freeze))
    return ReflinkResult(cloned=cloned, frozen=len(job.freeze))
