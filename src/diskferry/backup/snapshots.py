"""Snapshot manifests `snapshots/<vm>/<disk>/<id>`: a synthetic full of one disk at one point."""

from __future__ import annotations

import os
import re
import struct
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

from diskferry.backup.codec import ID_SIZE, Codec
from diskferry.backup.entries import Entry
from diskferry.backup.errors import CorruptObjectError, RepositoryError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_LEN = struct.Struct("<I")
_ROW = struct.Struct("<QQiQ")


class SnapshotInfo(BaseModel):
    """Everything a manifest says except its entries."""

    id: str
    vm: str
    disk: str
    backup: str
    disk_size: int = Field(ge=0)
    chunk_size: int = Field(gt=0)
    type: Literal["full", "incremental"]
    reason: str = ""
    parent: str | None = None
    checkpoint: str | None = None
    started: str
    finished: str
    stats: dict[str, int | float] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    job: str | None = None

    @property
    def path(self) -> str:
        """The object path of the manifest."""
        return snapshot_path(self.vm, self.disk, self.id)


@dataclass
class Snapshot:
    """A manifest: its description and the ordered entries covering the whole disk."""

    info: SnapshotInfo
    entries: list[Entry]

    def chunk_ids(self) -> set[bytes]:
        """The chunks the manifest names."""
        return {e.chunk for e in self.entries if e.chunk is not None}


def now_rfc3339() -> str:
    """The current UTC time in RFC 3339."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def new_snapshot_id() -> str:
    """A new snapshot id: the time in milliseconds then random bits, so ids sort by age."""
    return f"{time.time_ns() // 1_000_000:012x}{os.urandom(2).hex()}"


def check_name(kind: str, name: str) -> str:
    """`name` if it can be a path component of the repository; RepositoryError otherwise."""
    if not _NAME.match(name):
        raise RepositoryError(
            f"{kind} name {name!r} is not usable: use letters, digits, '.', '_' and '-'",
            reason="BadName",
        )
    return name


def snapshot_path(vm: str, disk: str, snapshot_id: str) -> str:
    """The object path of a manifest."""
    return f"snapshots/{check_name('VM', vm)}/{check_name('disk', disk)}/{snapshot_id}"


def encode_snapshot(snapshot: Snapshot, codec: Codec) -> bytes:
    """The stored form: the sealed description first, then the sealed chunk-id and entry tables.

    The description leads so that listing snapshots reads only the start of each object.
    """
    path = snapshot.info.path
    head = codec.encode_meta(snapshot.info.model_dump_json().encode(), path)
    numbers: dict[bytes, int] = {}
    rows = []
    for e in snapshot.entries:
        number = -1 if e.chunk is None else numbers.setdefault(e.chunk, len(numbers))
        rows.append(_ROW.pack(e.offset, e.length, number, e.chunk_offset))
    tables = b"".join([_LEN.pack(len(numbers)), *numbers, *rows])
    return b"".join([_LEN.pack(len(head)), head, codec.encode_meta(tables, _entries_name(path))])


def info_length(start: bytes) -> int:
    """How many leading bytes of a stored manifest hold its description (0 if unknown yet)."""
    if len(start) < _LEN.size:
        return 0
    return _LEN.size + _LEN.unpack_from(start)[0]


def decode_snapshot(path: str, blob: bytes, codec: Codec, *, entries: bool = True) -> Snapshot:
    """A stored manifest; with `entries=False` only its description, which `blob` may end after."""
    end = info_length(blob)
    if not end or len(blob) < end:
        raise CorruptObjectError(f"{path} is truncated", objects=(path,))
    try:
        info = SnapshotInfo.model_validate_json(codec.decode_meta(blob[_LEN.size : end], path))
        if info.path != path:
            raise ValueError("stored under another name")
        if not entries:
            return Snapshot(info, [])
        data = codec.decode_meta(blob[end:], _entries_name(path))
        (count,) = _LEN.unpack_from(data)
        ids = [data[_LEN.size + i * ID_SIZE : _LEN.size + (i + 1) * ID_SIZE] for i in range(count)]
        rows = _ROW.iter_unpack(memoryview(data)[_LEN.size + count * ID_SIZE :])
        return Snapshot(
            info,
            [Entry(off, n, None if k < 0 else ids[k], co) for off, n, k, co in rows],
        )
    except (ValueError, struct.error, IndexError) as e:
        raise CorruptObjectError(f"{path} is malformed ({e})", objects=(path,)) from None


def _entries_name(path: str) -> str:
    return f"{path}#entries"
