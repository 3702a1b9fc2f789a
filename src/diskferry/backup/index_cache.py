"""A local SQLite cache of the chunk index: lookups without holding the whole index in memory."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from diskferry.backup.bounds import read_whole
from diskferry.backup.codec import MAX_STORED, Codec
from diskferry.backup.errors import CorruptObjectError, RepositoryError
from diskferry.backup.index import IndexEntry, decode_index, index_path
from diskferry.backup.names import listing
from diskferry.objstore.errors import ObjectNotFoundError
from diskferry.objstore.store import ObjectStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS indexes (no INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS packs (no INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    id BLOB PRIMARY KEY, pack INTEGER NOT NULL, offset INTEGER NOT NULL,
    length INTEGER NOT NULL, plain INTEGER NOT NULL, idx INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS chunks_by_pack ON chunks (pack, offset, length, plain);
CREATE TABLE IF NOT EXISTS index_packs (
    idx INTEGER NOT NULL, pack INTEGER NOT NULL, PRIMARY KEY (idx, pack)
) WITHOUT ROWID;
"""
# 2: chunks_by_pack covers what in_pack reads, so a pack's chunks come in one index scan
_VERSION = 2
PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600
# chunk ids looked up by one query (SQLite allows 999 parameters at the least)
_LOOKUP_BATCH = 500
_SELECT = (
    "SELECT c.id, p.name, c.offset, c.length, c.plain FROM chunks c JOIN packs p ON p.no = c.pack"
)


def cache_root() -> Path:
    """Where caches live: $DISKFERRY_CACHE_DIR, else ~/.cache/diskferry (or $XDG_CACHE_HOME)."""
    if os.environ.get("DISKFERRY_CACHE_DIR"):
        return Path(os.environ["DISKFERRY_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "diskferry"


def cache_folder(repo_id: str, root: Path | None = None) -> Path:
    """The cache folder of one repository under `root` (or `cache_root()`), made if missing;
    both are 0700 when made here, and the repository's folder always."""
    base = root or cache_root()
    folder = base / repo_id
    try:
        if not folder.is_dir():
            for level in (base, folder):
                if not level.is_dir():
                    level.mkdir(PRIVATE_FOLDER, parents=True, exist_ok=True)
                    level.chmod(PRIVATE_FOLDER)
        folder.chmod(PRIVATE_FOLDER)
    except OSError as e:
        raise RepositoryError(
            f"cannot make the cache folder {folder}: {e.strerror}; set DISKFERRY_CACHE_DIR"
        ) from e
    return folder


def private_file(path: Path) -> None:
    """Make the file at `path` 0600 (and empty, if missing), without following a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)


class IndexCache:
    """has/locate for chunk ids, filled from the repository's `index/` objects it has not seen.

    Only a cache: deleting the file loses nothing, the next refresh rebuilds it.
    """

    def __init__(self, path: Path) -> None:
        """The cache in the SQLite database at `path` (made 0600, with its journal, if missing)."""
        self.path = path
        self._lock = threading.Lock()
        try:
            try:
                self._db = self._connect()
            except sqlite3.DatabaseError:
                self.path.unlink(missing_ok=True)
                self._db = self._connect()
        except OSError as e:
            raise RepositoryError(f"cannot open the index cache {path}: {e.strerror}") from e

    def _connect(self) -> sqlite3.Connection:
        private_file(self.path)
        db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA cache_size=-16384")
        if db.execute("PRAGMA user_version").fetchone()[0] != _VERSION:
            for table in ("chunks", "packs", "indexes", "index_packs"):
                db.execute(f"DROP TABLE IF EXISTS {table}")
        db.executescript(_SCHEMA)
        db.execute(f"PRAGMA user_version={_VERSION}")
        return db

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    def refresh(
        self, store: ObjectStore, codec: Codec, *, foreign_too: bool = False
    ) -> list[CorruptObjectError]:
        """Load the index objects not seen yet; start over if one seen before is gone.

        Returns the errors of index objects that could not be read (they stay unseen); with
        `foreign_too`, those of the names under `index/` the repository never writes too, which
        are skipped rather than refused.
        """
        problems: list[CorruptObjectError] = []
        found = listing(store, "index", problems.append if foreign_too else None)
        present = {info.path.removeprefix("index/") for info in found}
        with self._lock:
            known = {row[0] for row in self._db.execute("SELECT name FROM indexes")}
        if known - present:
            self._clear()
            known = set()
        for name in sorted(present - known):
            path = index_path(name)
            try:
                entries = decode_index(name, read_whole(store, path, MAX_STORED), codec)
            except ObjectNotFoundError:
                continue  # deleted since it was listed (by a prune): it names nothing now
            except CorruptObjectError as e:
                problems.append(e)
                continue
            self.add(name, entries)
        return problems

    def _clear(self) -> None:
        with self._lock, self._transaction():
            for table in ("chunks", "packs", "indexes", "index_packs"):
                self._db.execute(f"DELETE FROM {table}")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def add(self, index_name: str, entries: Iterable[IndexEntry]) -> None:
        """Record an index object and its entries (a chunk already known keeps its first place)."""
        with self._lock, self._transaction():
            cur = self._db.execute("INSERT OR IGNORE INTO indexes (name) VALUES (?)", (index_name,))
            if cur.rowcount == 0:
                return
            idx = cur.lastrowid
            pack_numbers: dict[str, int] = {}
            rows = []
            for e in entries:
                number = pack_numbers.get(e.pack)
                if number is None:
                    number = self._pack_number(e.pack)
                    pack_numbers[e.pack] = number
                rows.append((e.chunk_id, number, e.offset, e.length, e.plain_length, idx))
            rows.sort(key=lambda row: row[0])  # in key order SQLite inserts far faster; stable
            self._db.executemany("INSERT OR IGNORE INTO chunks VALUES (?, ?, ?, ?, ?, ?)", rows)
            self._db.executemany(
                "INSERT INTO index_packs VALUES (?, ?)", ((idx, n) for n in pack_numbers.values())
            )

    def _pack_number(self, name: str) -> int:
        self._db.execute("INSERT OR IGNORE INTO packs (name) VALUES (?)", (name,))
        return self._db.execute("SELECT no FROM packs WHERE name = ?", (name,)).fetchone()[0]

    def has(self, chunk_id: bytes) -> bool:
        """Whether the index names the chunk."""
        return bool(self.known([chunk_id]))

    def known(self, chunk_ids: Sequence[bytes]) -> set[bytes]:
        """Those of the chunks that the index names."""
        found: set[bytes] = set()
        for start in range(0, len(chunk_ids), _LOOKUP_BATCH):
            batch = chunk_ids[start : start + _LOOKUP_BATCH]
            marks = ", ".join("?" * len(batch))
            with self._lock:
                rows = self._db.execute(f"SELECT id FROM chunks WHERE id IN ({marks})", batch)
                found.update(row[0] for row in rows)
        return found

    def locate(self, chunk_id: bytes) -> IndexEntry | None:
        """Where the chunk is stored, or None."""
        with self._lock:
            row = self._db.execute(f"{_SELECT} WHERE c.id = ?", (chunk_id,)).fetchone()
        return None if row is None else IndexEntry(*row)

    def locate_many(self, chunk_ids: Sequence[bytes]) -> dict[bytes, IndexEntry]:
        """Where each of the chunks is stored; those the index does not name are left out."""
        found: dict[bytes, IndexEntry] = {}
        for start in range(0, len(chunk_ids), _LOOKUP_BATCH):
            batch = chunk_ids[start : start + _LOOKUP_BATCH]
            marks = ", ".join("?" * len(batch))
            with self._lock:
                rows = self._db.execute(f"{_SELECT} WHERE c.id IN ({marks})", batch).fetchall()
            found.update((row[0], IndexEntry(*row)) for row in rows)
        return found

    def entries(self) -> Iterator[IndexEntry]:
        """Every indexed chunk, one pack at a time."""
        for pack in self.pack_names():
            yield from self.in_pack(pack)

    def in_pack(self, pack: str) -> list[IndexEntry]:
        """The indexed chunks of one pack."""
        with self._lock:
            rows = self._db.execute(f"{_SELECT} WHERE p.name = ?", (pack,)).fetchall()
        return [IndexEntry(*row) for row in rows]

    def named_packs(self) -> list[str]:
        """Every pack some index object names, even where the cache places its chunks elsewhere."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT p.name FROM index_packs ip JOIN packs p ON p.no = ip.pack"
            ).fetchall()
        return sorted(row[0] for row in rows)

    def pack_names(self) -> list[str]:
        """The packs that indexed chunks live in."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT p.name FROM chunks c JOIN packs p ON p.no = c.pack"
            ).fetchall()
        return sorted(row[0] for row in rows)

    def index_names(self) -> list[str]:
        """The index objects the cache holds."""
        with self._lock:
            return sorted(row[0] for row in self._db.execute("SELECT name FROM indexes"))

    def totals(self) -> tuple[int, int, int]:
        """Number of chunks, their plaintext bytes and their stored bytes."""
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(plain), 0), COALESCE(SUM(length), 0) FROM chunks"
            ).fetchone()
        return row[0], row[1], row[2]
