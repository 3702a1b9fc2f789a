"""The import engine's volume jobs and their results: a blank volume, a volume grown, and an
instant copy (a reflink) with the guests that write its source frozen around it."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from diskferry.worker.job import WorkerJob

FREEZE_SECONDS = 60.0


class VolumePhase(StrEnum):
    """What a volume job is doing."""

    BLANKING = "Blanking"
    GROWING = "Growing"
    FREEZING = "Freezing"
    CLONING = "Cloning"


class BlankJob(WorkerJob):
    """Make `target` a blank volume of `size` bytes: a sparse file, committed whole with the
    job's id (a block device is zeroed and keeps its size)."""

    WORKER = "diskferry.importer.worker"
    kind: Literal["blank"] = "blank"
    target: str
    size: int = Field(ge=0, description="bytes")


class GrowJob(WorkerJob):
    """Grow the file `target` to `size` bytes, never shrink it; the new bytes read as zeros.
    A loop device over the file (`device`) is told its new size."""

    WORKER = "diskferry.importer.worker"
    kind: Literal["grow"] = "grow"
    target: str
    size: int = Field(ge=0, description="bytes")
    device: str | None = Field(default=None, description="the loop device over `target`")


class ReflinkJob(WorkerJob):
    """Make `target` share the extents of `source` at once, grown to `size` when larger, with
    the guests whose agents listen at `freeze` frozen for that instant and thawed after."""

    WORKER = "diskferry.importer.worker"
    kind: Literal["reflink"] = "reflink"
    source: str
    target: str
    size: int | None = Field(default=None, ge=0, description="bytes; unset: the source's")
    freeze: list[str] = Field(
        default_factory=list, description="the guest agents' sockets of the guests to freeze"
    )
    freeze_timeout: float = Field(
        default=FREEZE_SECONDS, gt=0, alias="freezeTimeout", description="seconds"
    )


class _Result(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    def to_json(self) -> dict:
        """The result as JSON-ready values, camelCase keys."""
        return self.model_dump(by_alias=True)


class VolumeResult(_Result):
    """What a blank or grow job left: the volume's size."""

    size: int


class ReflinkResult(_Result):
    """What a reflink job did: `cloned` False where the file systems cannot share extents
    (nothing was made then), and how many guests were frozen around the clone."""

    cloned: bool
    frozen: int = 0
