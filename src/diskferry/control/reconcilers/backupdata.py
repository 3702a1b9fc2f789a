"""What Backups hold in their repository, let go: the snapshots a keep policy picks, snapshots
forgotten with the Backups' metadata under a shared lock, and a prune that frees their data.

No lock is waited for: a repository in use raises LockedError, and the reconciler looks again."""

from __future__ import annotations

from collections.abc import Collection

from diskferry.backup.metadata import delete_metadata
from diskferry.backup.policy import KeepPolicy
from diskferry.backup.prune import PruneStats, prune
from diskferry.backup.repository import Repository
from diskferry.control.reconcilers.location import Location
from diskferry.control.resources.backup import Backup
from diskferry.disk.sizes import format_size


def _open(location: Location) -> Repository:
    return Repository.open(location.url, location.password, s3=location.s3())


def backup_snapshots(backup: Backup) -> list[str]:
    """The ids of the snapshots the Backup's volumes made."""
    return [v.snapshot_id for v in backup.status.volumes if v.snapshot_id]


def let_go(location: Location, snapshot_ids: Collection[str], keep: KeepPolicy) -> list[str]:
    """Of `snapshot_ids` the repository has, those `keep` lets go (each disk judged alone)."""
    with _open(location) as repo:
        named = [s for s in repo.list_snapshots() if s.id in snapshot_ids]
    return [s.id for s in keep.to_forget(named)]


def forget(location: Location, snapshot_ids: Collection[str], metadata: Collection[str]) -> int:
    """Forget those of `snapshot_ids` the repository still has and remove the metadata named;
    how many snapshots went now."""
    with _open(location) as repo, repo.lock("shared", "forget"):
        present = {path.rsplit("/", 1)[1] for path in repo.snapshot_paths()}
        gone = repo.forget([i for i in snapshot_ids if i in present])
        for name in metadata:
            delete_metadata(repo, name)
    return len(gone)


def prune_location(location: Location) -> PruneStats:
    """Prune the location's repository: the data no snapshot names any more is deleted."""
    with _open(location) as repo:
        return prune(repo)


def freed_text(stats: PruneStats) -> str:
    """What a prune freed, as an Event says it."""
    return f"prune freed {format_size(stats.bytes_freed)} ({stats.packs_deleted} packs deleted)"
