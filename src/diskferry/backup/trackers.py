"""Trackers `trackers/<vm>`: per disk, the checkpoint chain and the snapshot of each checkpoint."""

from __future__ import annotations

from pydantic import BaseModel, Field

from diskferry.backup.codec import Codec
from diskferry.backup.errors import CorruptObjectError
from diskferry.backup.snapshots import check_name, now_rfc3339


class Checkpoint(BaseModel):
    """One checkpoint (a dirty bitmap's name) and the snapshot taken at it."""

    name: str
    snapshot: str
    created: str = Field(default_factory=now_rfc3339)


class DiskChain(BaseModel):
    """The checkpoints of one disk, oldest first, and the incrementals since the last full."""

    checkpoints: list[Checkpoint] = Field(default_factory=list)
    incrementals_since_full: int = 0

    @property
    def last(self) -> Checkpoint | None:
        """The newest checkpoint, if any."""
        return self.checkpoints[-1] if self.checkpoints else None


class Tracker(BaseModel):
    """The checkpoint chains of one VM's disks."""

    vm: str
    disks: dict[str, DiskChain] = Field(default_factory=dict)
    updated: str = Field(default_factory=now_rfc3339)


def tracker_path(vm: str) -> str:
    """The object path of a VM's tracker."""
    return f"trackers/{check_name('VM', vm)}"


def encode_tracker(tracker: Tracker, codec: Codec) -> bytes:
    """The stored form of a tracker, sealed to its path."""
    return codec.encode_meta(tracker.model_dump_json().encode(), tracker_path(tracker.vm))


def decode_tracker(vm: str, blob: bytes, codec: Codec) -> Tracker:
    """A stored tracker."""
    path = tracker_path(vm)
    try:
        tracker = Tracker.model_validate_json(codec.decode_meta(blob, path))
    except ValueError as e:
        raise CorruptObjectError(f"{path} is malformed ({e})", objects=(path,)) from None
    if tracker.vm != vm:
        raise CorruptObjectError(f"{path} names another VM", objects=(path,))
    return tracker
