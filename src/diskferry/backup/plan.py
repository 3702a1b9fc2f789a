"""Full or incremental, decided in one place from the tracker's chain and the disk's checkpoints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from diskferry.backup.trackers import Checkpoint as TrackedCheckpoint
from diskferry.backup.trackers import DiskChain
from diskferry.disk.urls import without_credentials
from diskferry.qemu.bitmaps import Checkpoint

Source = Literal["cbt", "raw", "nbd", "point"]
INCONSISTENT = "checkpoint bitmap inconsistent"


@dataclass(frozen=True)
class DiskPlan:
    """A disk of the backup: its name and path, how it is read, and what the tracker knows of it.

    `parent_exists` says whether the snapshot of the chain's last checkpoint is still in
    the repository; `overlay` is the CBT overlay of a "cbt" disk.
    """

    name: str
    path: str
    source: Source
    chain: DiskChain | None
    parent_exists: bool
    overlay: str | None = None


@dataclass(frozen=True)
class Decision:
    """Full or incremental and why; an incremental reads the changes since `since`."""

    mode: Literal["full", "incremental"]
    reason: str
    since: str | None = None
    parent: str | None = None


def cbt_off_reason(path: str, source: Source) -> str:
    """Why a disk without changed-block tracking is backed up in full, and what to do."""
    if source == "nbd":
        shown = without_credentials(path)
        return f"{shown} is an NBD export without a checkpoint: every backup reads all its data"
    return (
        f"CBT is off on {path}: every backup reads all its data; "
        f"enable it with 'diskferry cbt enable {path}' while the VM is stopped"
    )


def _usable_last(plan: DiskPlan, *, full: bool, max_incrementals: int) -> TrackedCheckpoint | str:
    """The chain's last checkpoint, when the chain, the options and the repository let an
    incremental start from it; otherwise why the backup is full."""
    chain = plan.chain
    last = chain.last if chain is not None else None
    if chain is None:
        return "no earlier backup of this disk"
    if last is None:
        return "no checkpoint to start from: the chain was reset, or CBT was off last time"
    if full:
        return "a full backup was asked for (--full)"
    if max_incrementals and chain.incrementals_since_full >= max_incrementals:
        return (
            f"{chain.incrementals_since_full} incrementals since the last full "
            f"reached the limit of {max_incrementals}"
        )
    if not plan.parent_exists:
        return (
            f"broken chain: snapshot {last.snapshot} of checkpoint {last.name} "
            "is missing from the repository"
        )
    return last


def _incremental(last: TrackedCheckpoint) -> Decision:
    """An incremental of the changes since `last`, on its snapshot."""
    reason = f"changes since checkpoint {last.name}"
    return Decision("incremental", reason, last.name, last.snapshot)


def decide(
    plan: DiskPlan, on_disk: Sequence[Checkpoint], *, full: bool, max_incrementals: int
) -> Decision:
    """Full or incremental, saying why, from the tracker's chain, the options and `on_disk`.

    `on_disk` is the repository's checkpoints that the disk has, as its QEMU reports them
    (nothing for a disk without CBT). An incremental reads the changes since the chain's
    last checkpoint, which must be on the disk and, with every newer one, consistent.
    """
    if plan.source != "cbt":
        return Decision("full", cbt_off_reason(plan.path, plan.source))
    last = _usable_last(plan, full=full, max_incrementals=max_incrementals)
    if isinstance(last, str):
        return Decision("full", last)
    since = next((c for c in on_disk if c.name == last.name), None)
    if since is None:
        return Decision("full", f"checkpoint {last.name} missing on the disk")
    if any(c.inconsistent for c in on_disk if (c.seq or 0) >= (since.seq or 0)):
        return Decision("full", INCONSISTENT)
    return _incremental(last)


def decide_point(
    plan: DiskPlan, point_since: str | None, *, full: bool, max_incrementals: int
) -> Decision:
    """Full or incremental for a disk of a backup point whose maps show the changes since
    `point_since` (None: a full point): incremental only when that is the chain's last
    checkpoint; otherwise the point is read whole."""
    last = _usable_last(plan, full=full, max_incrementals=max_incrementals)
    if isinstance(last, str):
        return Decision("full", last)
    if point_since is None:
        return Decision("full", "the backup point is a full one: its maps show no changes")
    if point_since != last.name:
        return Decision(
            "full",
            f"the backup point shows the changes since checkpoint {point_since}, not since "
            f"{last.name}, the repository's last",
        )
    return _incremental(last)
