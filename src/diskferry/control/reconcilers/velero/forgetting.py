"""What Backups hold in their repository, let go by a backup worker's chores: the snapshots
named (or those a keep policy picks of them) forgotten with the Backups' metadata, and what a
prune that follows freed."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from diskferry.backup import Forgetting, KeepPolicy, PruneResult
from diskferry.control.resources.backup import Backup
from diskferry.disk.sizes import format_size


def backup_snapshots(backup: Backup) -> list[str]:
    """The ids of the snapshots the Backup's volumes made."""
    return [v.snapshot_id for v in backup.status.volumes if v.snapshot_id]


def let_go(
    snapshots: Collection[str], metadata: Mapping[str, list[str]], keep: KeepPolicy | None = None
) -> Forgetting:
    """Those of `snapshots` the repository has forgotten (those `keep` lets go, when given),
    and each of `metadata` deleted once all the snapshots it names went now (at once when it
    names none)."""
    return Forgetting(snapshots=sorted(snapshots), keep=keep, metadata=dict(metadata))


def freed_text(pruned: PruneResult) -> str:
    """What a prune freed, as an Event says it."""
    return f"prune freed {format_size(pruned.bytes_freed)} ({pruned.packs_deleted} packs deleted)"
