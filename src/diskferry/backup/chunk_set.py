"""ChunkSet: a set of chunk ids kept in a temporary SQLite file, so it may outgrow memory."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable


class ChunkSet:
    """Chunk ids, added in batches and tested one at a time; the file goes when it is closed."""

    def __init__(self) -> None:
        self._db = sqlite3.connect("", isolation_level=None)
        self._db.execute("PRAGMA cache_size=-8192")
        self._db.execute("CREATE TABLE ids (id BLOB PRIMARY KEY) WITHOUT ROWID")

    def update(self, ids: Iterable[bytes]) -> None:
        """Add chunk ids."""
        self._db.execute("BEGIN")
        self._db.executemany("INSERT OR IGNORE INTO ids VALUES (?)", ((i,) for i in ids))
        self._db.execute("COMMIT")

    def __contains__(self, chunk_id: object) -> bool:
        row = self._db.execute("SELECT 1 FROM ids WHERE id = ?", (chunk_id,)).fetchone()
        return row is not None

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM ids").fetchone()[0]

    def close(self) -> None:
        """Drop the set."""
        self._db.close()

    def __enter__(self) -> ChunkSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
