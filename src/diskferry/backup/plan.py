"""The plan of one disk's backup: where it is read from, and full or incremental, with why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from diskferry.backup.trackers import DiskChain
from diskferry.disk.urls import without_credentials

Source = Literal["cbt", "raw", "nbd"]


@dataclass(frozen=True)
class DiskPlan:
    """A disk of the backup: its name and path, how it is read, and the checkpoint to start from.

    `since` is None for a full backup; the session may still fall back to full when the
    checkpoint turns out to be missing or broken on the disk.
    """

    name: str
    path: str
    source: Source
    since: str | None
    parent: str | None
    reason: str


def cbt_off_reason(path: str, source: Source) -> str:
    """Why a disk without changed-block tracking is backed up in full, and what to do."""
    if source == "nbd":
        shown = without_credentials(path)
        return f"{shown} is an NBD export without a checkpoint: every backup reads all its data"
    return (
        f"CBT is off on {path}: every backup reads all its data; "
        f"enable it with 'diskferry cbt enable {path}' while the VM is stopped"
    )


def plan_disk(
    name: str,
    path: str,
    source: Source,
    chain: DiskChain | None,
    *,
    full: bool,
    max_incrementals: int,
    parent_exists: bool,
) -> DiskPlan:
    """Decide full or incremental from the tracker's chain and the options, saying why."""
    if source != "cbt":
        return DiskPlan(name, path, source, None, None, cbt_off_reason(path, source))
    last = chain.last if chain is not None else None
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
    elif not parent_exists:
        reason = (
            f"broken chain: snapshot {last.snapshot} of checkpoint {last.name} "
            "is missing from the repository"
        )
    else:
        return DiskPlan(name, path, source, last.name, last.snapshot, "")
    return DiskPlan(name, path, source, None, None, reason)
