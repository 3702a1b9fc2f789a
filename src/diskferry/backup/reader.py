"""Reading a disk into chunks: aligned windows of its data (full) or its dirty runs (incremental).

A piece is a run of the disk stored as one chunk; only its `reads` are read, the rest of
it is known to be zeros. Pieces are read in parallel threads and handed to the pack
writer, which dedups, compresses, seals and uploads them; an all-zero piece becomes a
zero entry. Memory stays bounded by the threads and the writer's memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from diskferry.backup.entries import Entry
from diskferry.backup.pack_writer import PackWriter
from diskferry.disk.blocks import packed, split
from diskferry.disk.parallel import parallel_map
from diskferry.disk.progress import Progress
from diskferry.disk.volume import Volume
from diskferry.disk.zeros import is_zero

READ_THREADS = 8
# a task reads pieces of up to this many bytes in all together, every request in flight
BATCH_BYTES = 1 << 20
# pieces a disk's walk is remembered for, to be replayed rather than asked of the disk again
REMEMBERED_PIECES = 16384


@dataclass(frozen=True)
class Piece:
    """[start, start + length) of the disk, of which only `reads` may hold data."""

    start: int
    length: int
    reads: tuple[tuple[int, int], ...]

    @property
    def read_bytes(self) -> int:
        """How many bytes reading the piece reads."""
        return sum(n for _, n in self.reads)


def full_pieces(volume: Volume, chunk_size: int) -> Iterator[Piece]:
    """The chunk-aligned windows of the disk that hold data, each with its data runs."""
    window = -1
    reads: list[tuple[int, int]] = []

    def piece() -> Piece:
        start = window * chunk_size
        return Piece(start, min(chunk_size, volume.size - start), tuple(reads))

    for ext in split((e for e in volume.extents("zero") if not e.zero), chunk_size):
        if ext.start // chunk_size != window:
            if reads:
                yield piece()
            window, reads = ext.start // chunk_size, []
        reads.append((ext.start, ext.length))
    if reads:
        yield piece()


def dirty_pieces(volume: Volume, chunk_size: int) -> Iterator[Piece]:
    """The dirty runs of the disk, split at chunk boundaries, each read whole."""
    dirty = (e for e in volume.extents("dirty") if e.dirty)
    for ext in split(dirty, chunk_size, chunk_size):
        yield Piece(ext.start, ext.length, ((ext.start, ext.length),))


class WalkOnce:
    """The pieces of `walk()`, remembered on the first walk through and replayed after it.

    A walk of more than `limit` pieces is not remembered, so memory stays bounded: each
    call then walks the disk again.
    """

    def __init__(self, walk: Callable[[], Iterator[Piece]], limit: int = REMEMBERED_PIECES):
        self._walk = walk
        self._limit = limit
        self._kept: list[Piece] | None = None

    def __call__(self) -> Iterator[Piece]:
        """The pieces, in disk order."""
        if self._kept is not None:
            yield from self._kept
            return
        kept: list[Piece] | None = []
        for piece in self._walk():
            if kept is not None:
                kept.append(piece)
                if len(kept) > self._limit:
                    kept = None
            yield piece
        self._kept = kept


def store_pieces(
    volume: Volume,
    pieces: Iterator[Piece],
    writer: PackWriter,
    progress: Progress,
    cancel: threading.Event | None = None,
    threads: int = READ_THREADS,
) -> Iterator[tuple[Entry, int]]:
    """Read the pieces in parallel into the writer; each one's entry in disk order, and bytes read.

    Small pieces are read a batch at a time (`BATCH_BYTES`), every request of a batch in
    flight at once. Pieces are read as the entries are taken, so the caller's pace bounds
    what is in flight.
    """

    def store(batch: list[Piece]) -> list[tuple[Entry, int]]:
        bufs = [bytearray(piece.length) for piece in batch]
        reads = []
        for piece, buf in zip(batch, bufs, strict=True):
            view = memoryview(buf)
            for offset, length in piece.reads:
                rel = offset - piece.start
                reads.append((offset, view[rel : rel + length]))
        volume.read_into_many(reads)
        progress.add(sum(piece.read_bytes for piece in batch))
        data = [i for i, buf in enumerate(bufs) if not is_zero(buf)]
        # the writer keeps each buffer itself until it is sealed: nothing here touches it again
        chunks: list[bytes | None] = [None] * len(batch)
        for i, chunk in zip(data, writer.add_many([bufs[i] for i in data]), strict=True):
            chunks[i] = chunk
        return [
            (Entry(piece.start, piece.length, chunk), piece.read_bytes)
            for piece, chunk in zip(batch, chunks, strict=True)
        ]

    for stored in parallel_map(store, packed(pieces, BATCH_BYTES), threads=threads, cancel=cancel):
        yield from stored
