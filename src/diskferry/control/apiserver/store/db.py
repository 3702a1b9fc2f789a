"""SQLite tables of the object store: objects, their owners, and the change feed, in WAL mode.

Each commit is synced (synchronous FULL: in WAL mode, the log at every commit): a write the
API acknowledged survives a power cut.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diskferry.base.errors import DiskferryError
from diskferry.control.apiserver.store.document import Document
from diskferry.control.errors import RequestEntityTooLargeError

SCHEMA_VERSION = 1
TRIM_EVERY = 64
# what one object may take encoded, as etcd's request limit: no write makes one larger
MAX_OBJECT_BYTES = 3 << 19

SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    uid TEXT NOT NULL, rv INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (kind, namespace, name)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS objects_uid ON objects (uid);
CREATE INDEX IF NOT EXISTS objects_namespace ON objects (namespace, kind, name);
CREATE TABLE IF NOT EXISTS owners (
    owner_uid TEXT NOT NULL, kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    PRIMARY KEY (owner_uid, kind, namespace, name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS owners_dependent ON owners (kind, namespace, name);
CREATE TABLE IF NOT EXISTS changes (
    rv INTEGER PRIMARY KEY, type TEXT NOT NULL,
    kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    data TEXT NOT NULL, old TEXT
);
CREATE INDEX IF NOT EXISTS changes_key ON changes (kind, namespace, name, rv);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters VALUES ('rv', 0), ('trimmed', 0);
"""

Key = tuple[str, str]


class StoreError(DiskferryError):
    """The state file cannot be used: made by another schema version, or unreadable."""


@dataclass(frozen=True)
class Change:
    """One row of the change feed: what happened to which object at which resourceVersion,
    the object as written and as it was before (None when it did not exist)."""

    rv: int
    type: str
    kind: str
    namespace: str
    name: str
    data: Document
    old: Document | None

    @property
    def size(self) -> int:
        """The bytes of its encoded objects."""
        return len(self.data.text) + (len(self.old.text) if self.old else 0)


# what a listener is given of each commit: its changes, and where the feed now starts after
Listener = Callable[[list[Change], int], None]


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _change(row: tuple[Any, ...]) -> Change:
    rv, type_, kind, namespace, name, data, old = row
    before = None if old is None else Document(old.encode())
    return Change(rv, type_, kind, namespace, name, Document(data.encode()), before)


class Tx:
    """The store's rows as seen inside one transaction.

    In a dry run the writes are made (later reads in the transaction see them) and rolled
    back, and an object written keeps the resourceVersion it had (none, for a new one), as
    the answer to a dry run shows it.
    """

    def __init__(self, conn: sqlite3.Connection, keep_changes: int, dry_run: bool = False) -> None:
        self.conn = conn
        self.keep_changes = keep_changes
        self.dry_run = dry_run
        self.rv = self.current_rv()
        self.written: list[Change] = []

    def _counter(self, name: str) -> int:
        row = self.conn.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        return int(row[0])

    def current_rv(self) -> int:
        """The store's resourceVersion: that of its last write."""
        return self._counter("rv")

    def trimmed(self) -> int:
        """Changes up to this resourceVersion may have been trimmed from the feed."""
        return self._counter("trimmed")

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object under that key, None when absent."""
        row = self.conn.execute(
            "SELECT data FROM objects WHERE kind = ? AND namespace = ? AND name = ?",
            (kind, namespace, name),
        ).fetchone()
        return None if row is None else json.loads(row[0])

    def by_uid(self, uid: str) -> tuple[str, dict[str, Any]] | None:
        """The kind and object with that uid, None when absent."""
        row = self.conn.execute("SELECT kind, data FROM objects WHERE uid = ?", (uid,)).fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def dependents(self, owner_uid: str) -> list[tuple[str, str, str]]:
        """The (kind, namespace, name) of every object naming `owner_uid` as an owner."""
        rows = self.conn.execute(
            "SELECT kind, namespace, name FROM owners WHERE owner_uid = ? ORDER BY 1, 2, 3",
            (owner_uid,),
        )
        return [tuple(row) for row in rows]

    def in_namespace(self, namespace: str) -> list[tuple[str, str]]:
        """The (kind, name) of every object in `namespace`."""
        rows = self.conn.execute(
            "SELECT kind, name FROM objects WHERE namespace = ? ORDER BY 1, 2", (namespace,)
        )
        return [tuple(row) for row in rows]

    def count(self, kind: str, namespace: str | None, after: Key | None) -> int:
        """How many objects of `kind` (in `namespace`) sort after `after`."""
        where, args = _where(kind, namespace, after)
        return int(
            self.conn.execute(f"SELECT count(*) FROM objects WHERE {where}", args).fetchone()[0]
        )

    def texts_at(
        self, kind: str, namespace: str | None, after: Key | None, snapshot: int
    ) -> Iterator[tuple[Key, str]]:
        """The encoded objects of `kind` as they were at resourceVersion `snapshot`, in key
        order, each read when the iterator comes to it.

        Objects written since are taken back to their state before the first change after
        `snapshot`, which the feed keeps as long as `snapshot` is not older than `trimmed()`.
        """
        where, args = _where(kind, namespace, after)
        changed: dict[Key, int | None] = {}  # the change that holds the object as it was
        if snapshot < self.current_rv():
            rows = self.conn.execute(
                "SELECT namespace, name, min(rv), old IS NOT NULL FROM changes"
                f" WHERE rv > ? AND {where} GROUP BY namespace, name",
                (snapshot, *args),
            )
            changed = {(ns, name): rv if existed else None for ns, name, rv, existed in rows}
        then = sorted((key, rv) for key, rv in changed.items() if rv is not None)
        cursor = self.conn.execute(
            f"SELECT namespace, name, data FROM objects WHERE {where} ORDER BY namespace, name",
            args,
        )
        current = (((ns, name), data) for ns, name, data in cursor if (ns, name) not in changed)
        older = ((key, self._old_text(rv)) for key, rv in then)
        yield from _merge(current, older)

    def _old_text(self, rv: int) -> str:
        row = self.conn.execute("SELECT old FROM changes WHERE rv = ?", (rv,)).fetchone()
        return str(row[0])

    def rows_at(
        self, kind: str, namespace: str | None, after: Key | None, snapshot: int
    ) -> Iterator[tuple[Key, dict[str, Any]]]:
        """The objects of `kind` as they were at resourceVersion `snapshot`, in key order (see
        `texts_at`)."""
        for key, text in self.texts_at(kind, namespace, after, snapshot):
            yield key, json.loads(text)

    def changes_between(self, after: int, upto: int) -> list[Change]:
        """The changes kept after resourceVersion `after` up to `upto`, oldest first."""
        rows = self.conn.execute(
            "SELECT rv, type, kind, namespace, name, data, old FROM changes"
            " WHERE rv > ? AND rv <= ? ORDER BY rv",
            (after, upto),
        )
        return [_change(row) for row in rows]

    def latest_changes(self) -> Iterator[Change]:
        """The changes the feed keeps, newest first, each read when the iterator comes to it."""
        rows = self.conn.execute(
            "SELECT rv, type, kind, namespace, name, data, old FROM changes ORDER BY rv DESC"
        )
        return map(_change, rows)

    def write(self, kind: str, obj: dict[str, Any], type_: str) -> dict[str, Any]:
        """Store `obj` (remove it, for DELETED) at the next resourceVersion; returns it so.

        The change feed keeps the object as it was before, for watches filtering on it and
        for continued lists reading an older snapshot. RequestEntityTooLargeError when the
        object would be larger than MAX_OBJECT_BYTES encoded, and larger than it was.
        """
        self.rv += 1
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        key = (kind, namespace, name)
        row = self.conn.execute(
            "SELECT data FROM objects WHERE kind = ? AND namespace = ? AND name = ?", key
        ).fetchone()
        version = _version_of(row) if self.dry_run else str(self.rv)
        if version is None:
            meta.pop("resourceVersion", None)
        else:
            meta["resourceVersion"] = version
        data = _dumps(obj)
        grown = row is None or len(data) > len(row[0])
        if type_ != "DELETED" and len(data) > MAX_OBJECT_BYTES and grown:
            raise RequestEntityTooLargeError(
                f"{kind} {namespace}/{name}: the object would take {len(data)} bytes encoded,"
                f" more than the {MAX_OBJECT_BYTES} an object may take"
            )
        self.conn.execute("UPDATE counters SET value = ? WHERE name = 'rv'", (self.rv,))
        if row is not None:
            self.conn.execute(
                "DELETE FROM owners WHERE kind = ? AND namespace = ? AND name = ?", key
            )
        if type_ == "DELETED":
            self.conn.execute(
                "DELETE FROM objects WHERE kind = ? AND namespace = ? AND name = ?", key
            )
        else:
            self.conn.execute(
                "INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?, ?)",
                (*key, meta["uid"], self.rv, data),
            )
            self.conn.executemany(
                "INSERT OR IGNORE INTO owners VALUES (?, ?, ?, ?)",
                [(ref["uid"], *key) for ref in meta.get("ownerReferences", [])],
            )
        old = None if row is None else row[0]
        self.conn.execute(
            "INSERT INTO changes VALUES (?, ?, ?, ?, ?, ?, ?)", (self.rv, type_, *key, data, old)
        )
        if not self.dry_run:
            self.written.append(_change((self.rv, type_, *key, data, old)))
        if self.rv % TRIM_EVERY == 0 and self.rv > self.keep_changes:
            self.trim(self.rv - self.keep_changes)
        return obj

    def trim(self, upto: int) -> None:
        """Drop the feed's changes up to resourceVersion `upto`."""
        self.conn.execute("DELETE FROM changes WHERE rv <= ?", (upto,))
        self.conn.execute(
            "UPDATE counters SET value = max(value, ?) WHERE name = 'trimmed'", (upto,)
        )


def _version_of(row: tuple[str] | None) -> str | None:
    """The resourceVersion of a stored row, None for no row."""
    return None if row is None else json.loads(row[0])["metadata"].get("resourceVersion")


def _where(kind: str, namespace: str | None, after: Key | None) -> tuple[str, list[Any]]:
    where, args = "kind = ?", [kind]
    if namespace is not None:
        where += " AND namespace = ?"
        args.append(namespace)
    if after is not None and after[0] == namespace:
        where += " AND name > ?"
        args.append(after[1])
    elif after is not None:
        where += " AND (namespace, name) > (?, ?)"
        args.extend(after)
    return where, args


def _merge(
    first: Iterator[tuple[Key, str]], second: Iterator[tuple[Key, str]]
) -> Iterator[tuple[Key, str]]:
    """Two streams sorted by key, as one."""
    a, b = next(first, None), next(second, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a[0] < b[0]):
            yield a  # type: ignore[misc]
            a = next(first, None)
        else:
            yield b
            b = next(second, None)


class Database:
    """The state file: one SQLite connection per thread, one writer at a time.

    A connection is closed when the store is, or once its thread has ended and another
    thread opens one.
    """

    def __init__(self, path: Path, *, keep_changes: int = 10_000) -> None:
        self.path = path
        self.keep_changes = keep_changes
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self._connections: dict[threading.Thread, sqlite3.Connection] = {}
        self._connections_lock = threading.Lock()
        self._listeners: list[Listener] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        os.chmod(path, 0o600)
        self._migrate(self._connection())
        with self.read() as tx:
            self._delivered = tx.current_rv()  # the listeners have every change up to here

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=30
                )
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
            except sqlite3.DatabaseError as error:
                raise StoreError(f"{self.path}: {error}") from None
            self._local.conn = conn
            with self._connections_lock:
                for thread in [t for t in self._connections if not t.is_alive()]:
                    self._connections.pop(thread).close()
                self._connections[threading.current_thread()] = conn
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            conn.executescript(
                f"BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            )
        elif version != SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {version}, this diskferry reads {SCHEMA_VERSION}"
            )

    @contextmanager
    def write(self, *, commit: bool = True) -> Iterator[Tx]:
        """A write transaction; kept only when `commit` (a dry run rolls it back). Once it
        is committed, the listeners get its changes."""
        conn = self._connection()
        with self._write_lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                tx = Tx(conn, self.keep_changes, dry_run=not commit)
                foreign = tx.changes_between(self._delivered, tx.rv)
                yield tx
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT" if commit else "ROLLBACK")
            self._deliver(foreign, tx.trimmed())
            if commit:
                self._deliver(tx.written, tx.trimmed())

    def catch_up(self) -> None:
        """Give the listeners the changes another process committed since the last one they
        got (this process's own reach them as they commit)."""
        with self._write_lock, self.read() as tx:
            self._deliver(tx.changes_between(self._delivered, tx.current_rv()), tx.trimmed())

    def _deliver(self, changes: list[Change], trimmed: int) -> None:
        """Hand `changes` to every listener, in order; the write lock is held."""
        if not changes:
            return
        for listener in self._listeners:
            listener(changes, trimmed)
        self._delivered = changes[-1].rv

    def subscribe(self, listener: Listener) -> int:
        """Give `listener` the changes of every transaction committed from now on, in their
        order, each before the next transaction begins; the resourceVersion it starts after."""
        with self._write_lock:
            self._listeners.append(listener)
            return self._delivered

    @contextmanager
    def read(self) -> Iterator[Tx]:
        """A read transaction: one consistent snapshot of the store."""
        conn = self._connection()
        conn.execute("BEGIN")
        try:
            yield Tx(conn, self.keep_changes)
        finally:
            conn.execute("COMMIT")

    @property
    def open_connections(self) -> int:
        """How many connections are open."""
        with self._connections_lock:
            return len(self._connections)

    def close(self) -> None:
        """Close every connection the threads opened."""
        with self._connections_lock:
            for conn in self._connections.values():
                conn.close()
            self._connections.clear()
        self._local = threading.local()
