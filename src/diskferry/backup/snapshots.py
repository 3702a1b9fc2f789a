"""Snapshot manifests `snapshots/<vm>/<disk>/<id>`: a synthetic full of one disk at one point.

A stored manifest (format 2) is, in order:

    magic "DFMANIF2"
    u32 length, then the sealed description (SnapshotInfo as JSON)
    u32 length, then the sealed page table: per page, the disk offset of its first entry,
        the bytes of data (not zero) its entries name, its number of entries and its
        stored length
    the sealed pages, one after another

A page holds at most PAGE_ENTRIES entries in disk order with its own table of the chunk
ids they name. The description leads, so listing snapshots reads only the start of each
object; a reader fetches the page table with it and then one page at a time with ranged
reads. Each part is sealed to the manifest's path and its place in it, so none can be
moved to another manifest or another place. Integers are little-endian.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import BinaryIO, Literal, NamedTuple

from pydantic import BaseModel, Field

from diskferry.backup.codec import ID_SIZE, MAX_STORED, Codec
from diskferry.backup.entries import Entry, check_cover
from diskferry.backup.errors import CorruptObjectError, RepositoryError
from diskferry.backup.names import NAME

PAGE_ENTRIES = 16384
_NAME = re.compile(rf"^{NAME}$")
_MAGIC = b"DFMANIF2"
_LEN = struct.Struct("<I")
_ROW = struct.Struct("<QQiQ")
_PAGE = struct.Struct("<QQII")
_COPY_BLOCK = 1 << 20


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


class _Page(NamedTuple):
    """Where one page is stored and what the table says of it."""

    start: int
    length: int
    offset: int
    data_bytes: int
    entries: int


class ManifestWriter:
    """Writes a new manifest: entries a page at a time into a spool file, the description last.

    The spool lives in `spool_dir` without a name, so nothing is left behind however the
    process ends. Use as a context manager; `finish` gives the stored object.
    """

    def __init__(
        self, path: str, codec: Codec, spool_dir: Path, page_entries: int = PAGE_ENTRIES
    ) -> None:
        self.path = path
        self._codec = codec
        self._spool_dir = spool_dir
        self._page_entries = page_entries
        self._pages = tempfile.TemporaryFile(dir=spool_dir)  # noqa: SIM115 (closed on exit)
        self._table: list[bytes] = []

    def __enter__(self) -> ManifestWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pages.close()

    def write(self, entries: Iterable[Entry]) -> None:
        """Append entries, in disk order, after those written before."""
        it = iter(entries)
        while batch := list(islice(it, self._page_entries)):
            self._write_page(batch)

    def _write_page(self, batch: list[Entry]) -> None:
        numbers: dict[bytes, int] = {}
        rows = []
        data_bytes = 0
        for e in batch:
            if e.chunk is None:
                rows.append(_ROW.pack(e.offset, e.length, -1, 0))
                continue
            number = numbers.setdefault(e.chunk, len(numbers))
            rows.append(_ROW.pack(e.offset, e.length, number, e.chunk_offset))
            data_bytes += e.length
        plain = b"".join([_LEN.pack(len(numbers)), *numbers, *rows])
        blob = self._codec.encode_meta(plain, _page_name(self.path, len(self._table)))
        self._pages.write(blob)
        self._table.append(_PAGE.pack(batch[0].offset, data_bytes, len(batch), len(blob)))

    def finish(self, info: SnapshotInfo) -> BinaryIO:
        """The stored manifest in a spool file (the caller closes it), positioned at its start."""
        if info.path != self.path:
            raise ValueError(f"the description of {info.path} given to the writer of {self.path}")
        head = self._codec.encode_meta(info.model_dump_json().encode(), self.path)
        table = self._codec.encode_meta(b"".join(self._table), _table_name(self.path))
        out = tempfile.TemporaryFile(dir=self._spool_dir)  # noqa: SIM115 (the caller's)
        try:
            out.write(b"".join([_MAGIC, _LEN.pack(len(head)), head, _LEN.pack(len(table)), table]))
            self._pages.seek(0)
            shutil.copyfileobj(self._pages, out, _COPY_BLOCK)
            out.seek(0)
        except BaseException:
            out.close()
            raise
        return out


def lead_length(path: str, start: bytes, *, table: bool) -> int:
    """How many leading bytes hold the description (and the page table, with `table`).

    `start` is the first bytes of the object; while it is too short to tell, the answer
    is a length to read next, longer than `start`.
    """
    if len(start) < len(_MAGIC) + _LEN.size:
        return len(_MAGIC) + _LEN.size
    if not start.startswith(_MAGIC):
        raise CorruptObjectError(
            f"{path} is not a manifest of format 2: it is damaged, or was written by an "
            "older diskferry, whose repositories this version cannot read",
            objects=(path,),
        )
    info_end = len(_MAGIC) + _LEN.size + _part_length(path, start, len(_MAGIC), "description")
    if not table:
        return info_end
    if len(start) < info_end + _LEN.size:
        return info_end + _LEN.size
    return info_end + _LEN.size + _part_length(path, start, info_end, "page table")


def _part_length(path: str, start: bytes, at: int, what: str) -> int:
    """The length that prefixes a sealed part at `at`; CorruptObjectError past any part's."""
    (length,) = _LEN.unpack_from(start, at)
    if length > MAX_STORED:
        raise CorruptObjectError(
            f"{path} is malformed (its {what} is said to be {length} bytes long, more than any "
            f"sealed part: {MAX_STORED} bytes at most)",
            objects=(path,),
        )
    return length


def decode_info(path: str, start: bytes, codec: Codec) -> SnapshotInfo:
    """The description of the manifest at `path` from the first bytes of the object."""
    end = lead_length(path, start, table=False)
    if len(start) < end:
        raise CorruptObjectError(f"{path} is truncated", objects=(path,))
    info_start = len(_MAGIC) + _LEN.size
    try:
        info = SnapshotInfo.model_validate_json(codec.decode_meta(start[info_start:end], path))
    except ValueError as e:
        raise CorruptObjectError(f"{path} is malformed ({e})", objects=(path,)) from None
    if info.path != path:
        raise CorruptObjectError(
            f"{path} is malformed (stored under another name)", objects=(path,)
        )
    return info


class Manifest:
    """A stored manifest opened for reading: its description, and its entries a page at a time;
    `stored_length` is where its last page ends, the length of the object it is stored as.

    The page table is kept as it is stored and read a row at a time: no bigger in memory than
    the object it came from, however many pages it lists.
    """

    def __init__(
        self, path: str, lead: bytes, codec: Codec, read: Callable[[int, int], bytes]
    ) -> None:
        """Open the manifest from its lead (see `lead_length`); `read(start, length)` reads it.

        CorruptObjectError, before any page is read, when the table lists a page longer than
        any sealed part or of more entries than a page holds.
        """
        self.path = path
        self.info = decode_info(path, lead, codec)
        self._codec = codec
        self._read = read
        self._table, self._first_page = self._decode_table(lead)
        self.stored_length = self._first_page + sum(page.length for page in self._pages())

    def _decode_table(self, lead: bytes) -> tuple[bytes, int]:
        """The page table's plaintext, and where the first page starts."""
        end = lead_length(self.path, lead, table=True)
        if len(lead) < end:
            raise CorruptObjectError(f"{self.path} is truncated", objects=(self.path,))
        table_start = lead_length(self.path, lead, table=False) + _LEN.size
        table = self._codec.decode_meta(lead[table_start:end], _table_name(self.path))
        if len(table) % _PAGE.size:
            raise CorruptObjectError(
                f"{self.path} is malformed (its page table is not whole rows)",
                objects=(self.path,),
            )
        return table, end

    def _pages(self) -> Iterator[_Page]:
        """The pages the table lists, each with where it is stored."""
        start = self._first_page
        for offset, data_bytes, entries, length in _PAGE.iter_unpack(self._table):
            if length > MAX_STORED or entries > PAGE_ENTRIES:
                raise CorruptObjectError(
                    f"{self.path} is malformed (its page table lists a page of {entries} entries "
                    f"in {length} bytes, more than a page holds)",
                    objects=(self.path,),
                )
            yield _Page(start, length, offset, data_bytes, entries)
            start += length

    @property
    def data_bytes(self) -> int:
        """The bytes of the disk that entries naming chunks cover."""
        return sum(page.data_bytes for page in self._pages())

    def entries(self) -> Iterator[Entry]:
        """The entries in disk order, covering the disk; CorruptObjectError where they do not."""
        try:
            yield from check_cover(self._read_pages(), self.info.disk_size)
        except (ValueError, struct.error, IndexError) as e:
            raise CorruptObjectError(
                f"{self.path} is malformed ({e})", objects=(self.path,)
            ) from None

    def _read_pages(self) -> Iterator[Entry]:
        for number, page in enumerate(self._pages()):
            blob = self._read(page.start, page.length)
            yield from self._decode_page(number, page, blob)

    def _decode_page(self, number: int, page: _Page, blob: bytes) -> list[Entry]:
        data = self._codec.decode_meta(blob, _page_name(self.path, number))
        (count,) = _LEN.unpack_from(data)
        ids_end = _LEN.size + count * ID_SIZE
        if ids_end > len(data) or count > page.entries:
            raise ValueError(f"page {number} names more chunk ids than it holds")
        if len(data) - ids_end != page.entries * _ROW.size:
            raise ValueError(f"page {number} does not match the page table")
        ids = [data[i : i + ID_SIZE] for i in range(_LEN.size, ids_end, ID_SIZE)]
        entries = [
            Entry(off, n, None, 0) if k < 0 else Entry(off, n, ids[k], co)
            for off, n, k, co in _ROW.iter_unpack(memoryview(data)[ids_end:])
        ]
        named = sum(e.length for e in entries if e.chunk is not None)
        if not entries or entries[0].offset != page.offset or named != page.data_bytes:
            raise ValueError(f"page {number} does not match the page table")
        return entries


def _page_name(path: str, number: int) -> str:
    return f"{path}#page/{number}"


def _table_name(path: str) -> str:
    return f"{path}#pages"
