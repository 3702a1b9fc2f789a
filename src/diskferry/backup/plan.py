"""Full or incremental, decided in one place from the tracker's chain and the disk's checkpoints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from diskferry.backup.trackers import DiskChain
from diskferry.disk.urls import without_credentials
from diskferry.qemu.bitmaps import Checkpoint

Source = Literal["cbt", "raw", "nbd"]
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
    chain = plan.chain
    last = chain.last if chain is not None else None
    since = next((c for c in on_disk if last is not None and c.name == last.name), None)
    if chain is None:
        reason = "no earlier backup of this disk"
    elif last is None:
        reason = "no checkpoint to start from: the chain was reset, or CBT was off last time"
    elif full:
        reason = "a full backup was asked for (--full)"
    elif max_incrementals and chain.incrementals_since_full >= max_incrementals:
        reason = (
            f"{chain.incrementals_since_full} incrementals since the last full "
            f"reached the limit of {max_incrementals}"
        )
    elif not plan.parent_exists:
        reason = (
            f"broken chain: snapshot {last.snapshot} of checkpoint {last.name} "
            "is missing from the repository"
        )
    elif since is None:
        reason = f"checkpoint {last.name} missing on the disk"
    elif any(c.inconsistent for c in on_disk if (c.seq or 0) >= (since.seq or 0)):
        reason = INCONSISTENT
    else:
        return Decision(
            "incremental", f"changes since checkpoint {last.name}", last.name, last.snapshot
        )
    return Decision("full", reason)
