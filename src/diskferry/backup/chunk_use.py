"""ChunkUse: the chunks manifests name and how far into each they read, kept in SQLite on disk."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path

from diskferry.backup.entries import Entry

# rows added, read or tested at a time
BATCH = 500
_ADD_BATCH = 65536
_UPSERT = (
    "INSERT INTO used VALUES (?, ?) "
    "ON CONFLICT (id) DO UPDATE SET reach = max(reach, excluded.reach)"
)


class ChunkUse:
    """Chunk ids with the furthest byte of each that entries read; memory stays flat however many.

    The database is a file in `folder` unlinked once open, so it goes with the process
    however that ends.
    """

    def __init__(self, folder: Path) -> None:
        fd, name = tempfile.mkstemp(dir=folder, prefix="chunk-use-", suffix=".sqlite")
        try:
            self._db = sqlite3.connect(name, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=OFF")
            self._db.execute("PRAGMA synchronous=OFF")
            self._db.execute("PRAGMA cache_size=-8192")
            self._db.execute(
                "CREATE TABLE used (id BLOB PRIMARY KEY, reach INTEGER NOT NULL) WITHOUT ROWID"
            )
        finally:
            os.unlink(name)
            os.close(fd)

    def add(self, entries: Iterable[Entry]) -> None:
        """Record the chunks the entries name and how far into each they read."""
        rows = ((e.chunk, e.chunk_offset + e.length) for e in entries if e.chunk is not None)
        while batch := list(islice(rows, _ADD_BATCH)):
            batch.sort()  # in key order SQLite inserts far faster
            self._db.execute("BEGIN")
            self._db.executemany(_UPSERT, batch)
            self._db.execute("COMMIT")

    def batches(self) -> Iterator[list[tuple[bytes, int]]]:
        """Every chunk recorded with its furthest byte, sorted by id, BATCH at a time."""
        cursor = self._db.execute("SELECT id, reach FROM used ORDER BY id")
        while batch := cursor.fetchmany(BATCH):
            yield batch

    def among(self, chunk_ids: Sequence[bytes]) -> set[bytes]:
        """Those of `chunk_ids` that are recorded."""
        found: set[bytes] = set()
        for start in range(0, len(chunk_ids), BATCH):
            batch = chunk_ids[start : start + BATCH]
            marks = ", ".join("?" * len(batch))
            rows = self._db.execute(f"SELECT id FROM used WHERE id IN ({marks})", batch)
            found.update(row[0] for row in rows)
        return found

    def close(self) -> None:
        """Drop the records."""
        self._db.close()

    def __enter__(self) -> ChunkUse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
