"""The room a backup's CBT overlays and fleecing files need where they live (beside each
disk's volume), checked before the backup starts, so that it fails clearly and not on a full
filesystem."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from diskferry.control.resources.quantity import format_bytes

GRANULARITY = 64 * 1024
BITMAPS = 3
"""Bitmaps a disk holds during a backup: the previous checkpoint, the new one, the merge."""
METADATA = 1 << 20
FLEECE_SHARE = 0.1
"""Of a running VM's disk, what the fleecing file may take while the guest writes."""


@dataclass(frozen=True)
class DiskRoom:
    """A disk of the backup: its volume's path and size."""

    path: str
    size: int


def needed(size: int, running: bool) -> int:
    """Bytes one disk's overlays need: its bitmaps and metadata, and a share of it for the
    fleecing file while the guest writes."""
    bitmaps = BITMAPS * (size // GRANULARITY // 8 + 1)
    return METADATA + bitmaps + (int(size * FLEECE_SHARE) if running else 0)


def shortfall(disks: Sequence[DiskRoom], running: bool) -> str | None:
    """Why there is not room enough beside the disks, None when there is."""
    by_device: dict[int, tuple[str, int]] = {}
    for disk in disks:
        directory = os.path.dirname(os.path.abspath(disk.path))
        device = os.stat(directory).st_dev
        where, total = by_device.get(device, (directory, 0))
        by_device[device] = (where, total + needed(disk.size, running))
    for where, want in by_device.values():
        stat = os.statvfs(where)
        free = stat.f_bavail * stat.f_frsize
        if free < want:
            return (
                f"{where} has {format_bytes(free)} free; the backup's overlays need "
                f"{format_bytes(want)} there: free some space first"
            )
    return None
