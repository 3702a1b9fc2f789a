"""Checkpoint bitmaps: their names (`diskferry-<repo-id>-<n>`) and what QEMU reports of them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from diskferry.base.errors import DiskferryError

PREFIX = "diskferry-"
# Tracks every write since CBT was enabled or the chain was last reset; no repository's.
BASE = "diskferry-base"
_NAME = re.compile(r"^diskferry-([A-Za-z0-9]+)-(\d+)$")
_REPO_ID = re.compile(r"^[A-Za-z0-9]{1,64}$")


class CheckpointNameError(DiskferryError):
    """A repository id cannot be part of a bitmap name."""

    reason = "BadRepositoryId"


def check_repo_id(repo_id: str) -> str:
    """`repo_id` if it may be part of a bitmap name: 1 to 64 letters and digits."""
    if not _REPO_ID.match(repo_id):
        raise CheckpointNameError(
            f"repository id {repo_id!r} cannot name a checkpoint: use 1 to 64 letters and digits"
        )
    return repo_id


def checkpoint_name(repo_id: str, seq: int) -> str:
    """The bitmap name of checkpoint number `seq` of repository `repo_id`."""
    return f"{PREFIX}{check_repo_id(repo_id)}-{seq}"


@dataclass(frozen=True)
class Checkpoint:
    """A dirty bitmap on a disk; `repo_id` and `seq` are set for a repository's checkpoint.

    `inconsistent` is what a running QEMU reports of a bitmap a killed process left in
    use; `in_use` is what the image says (also true while a QEMU has the disk open).
    """

    name: str
    granularity: int
    enabled: bool
    in_use: bool = False
    inconsistent: bool = False
    dirty_bytes: int | None = None

    @property
    def repo_id(self) -> str | None:
        """The repository this checkpoint belongs to, if any."""
        match = _NAME.match(self.name)
        return match.group(1) if match else None

    @property
    def seq(self) -> int | None:
        """The checkpoint's number within its repository, if any."""
        match = _NAME.match(self.name)
        return int(match.group(2)) if match else None

    @classmethod
    def from_image(cls, entry: dict[str, Any]) -> Checkpoint:
        """From a bitmap entry of `qemu-img info --output=json`."""
        flags = entry.get("flags", [])
        return cls(
            name=entry["name"],
            granularity=int(entry["granularity"]),
            enabled="auto" in flags,
            in_use="in-use" in flags,
        )

    @classmethod
    def from_qmp(cls, entry: dict[str, Any]) -> Checkpoint:
        """From a `dirty-bitmaps` entry of QMP `query-named-block-nodes`."""
        return cls(
            name=entry["name"],
            granularity=int(entry["granularity"]),
            enabled=bool(entry.get("recording", False)),
            in_use=bool(entry.get("busy", False)),
            inconsistent=bool(entry.get("inconsistent", False)),
            dirty_bytes=int(entry.get("count", 0)),
        )

    def to_json(self) -> dict[str, Any]:
        """The checkpoint as JSON."""
        return {
            "name": self.name,
            "repository": self.repo_id,
            "seq": self.seq,
            "granularity": self.granularity,
            "enabled": self.enabled,
            "inUse": self.in_use,
            "inconsistent": self.inconsistent,
            "dirtyBytes": self.dirty_bytes,
        }


def of_repository(checkpoints: list[Checkpoint], repo_id: str) -> list[Checkpoint]:
    """The checkpoints of `repo_id`, oldest first."""
    mine = [c for c in checkpoints if c.repo_id == repo_id]
    return sorted(mine, key=lambda c: c.seq or 0)
