"""Which snapshots a keep policy (last N, daily N, weekly N) lets go, per VM and disk."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from diskferry.backup.snapshots import SnapshotInfo


class KeepPolicy(BaseModel):
    """Which snapshots of each disk are kept: those any rule keeps (the newest N, the newest of
    N days, of N weeks); all zeros keeps everything."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    keep_last: int = Field(
        default=0,
        ge=0,
        alias="keepLast",
        description="Keep each disk's newest N snapshots. Default 0: this rule keeps none.",
    )
    keep_daily: int = Field(
        default=0,
        ge=0,
        alias="keepDaily",
        description="Keep each disk's newest snapshot of each of the last N days (UTC) that "
        "have one. Default 0: this rule keeps none.",
    )
    keep_weekly: int = Field(
        default=0,
        ge=0,
        alias="keepWeekly",
        description="Keep each disk's newest snapshot of each of the last N ISO weeks that "
        "have one. Default 0: this rule keeps none.",
    )

    @property
    def has_policy(self) -> bool:
        """Whether any rule is given (a policy of all zeros keeps everything)."""
        return bool(self.keep_last or self.keep_daily or self.keep_weekly)

    def to_forget(self, snapshots: list[SnapshotInfo]) -> list[SnapshotInfo]:
        """The snapshots of `snapshots` this policy lets go."""
        return to_forget(snapshots, self.keep_last, self.keep_daily, self.keep_weekly)


def _day(s: SnapshotInfo) -> str:
    return _when(s).strftime("%Y-%m-%d")


def _week(s: SnapshotInfo) -> str:
    year, week, _ = _when(s).isocalendar()
    return f"{year}-W{week:02d}"


def _when(s: SnapshotInfo) -> datetime:
    return datetime.fromisoformat(s.finished.replace("Z", "+00:00"))


def to_forget(
    snapshots: list[SnapshotInfo], keep_last: int = 0, keep_daily: int = 0, keep_weekly: int = 0
) -> list[SnapshotInfo]:
    """The snapshots no rule keeps; each disk of each VM is judged on its own.

    keep_last keeps the newest N; keep_daily the newest of each of the last N days that
    have one; keep_weekly likewise per ISO week. A policy of all zeros keeps everything.
    """
    if not (keep_last or keep_daily or keep_weekly):
        return []
    groups: dict[tuple[str, str], list[SnapshotInfo]] = {}
    for s in snapshots:
        groups.setdefault((s.vm, s.disk), []).append(s)
    forget = []
    for group in groups.values():
        newest_first = sorted(group, key=lambda s: (s.finished, s.id), reverse=True)
        kept = {s.id for s in newest_first[:keep_last]}
        kept |= _newest_per(newest_first, _day, keep_daily)
        kept |= _newest_per(newest_first, _week, keep_weekly)
        forget.extend(s for s in newest_first if s.id not in kept)
    return sorted(forget, key=lambda s: (s.finished, s.id))


def _newest_per(
    newest_first: list[SnapshotInfo], bucket: Callable[[SnapshotInfo], str], count: int
) -> set[str]:
    kept: dict[str, str] = {}
    for s in newest_first:
        if len(kept) >= count:
            break
        kept.setdefault(bucket(s), s.id)
    return set(kept.values())
