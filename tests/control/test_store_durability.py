"""The state file syncs each commit: synchronous FULL, on every thread's connection."""

from __future__ import annotations

import threading
from pathlib import Path

from diskferry.control.apiserver.store.db import Database

FULL = 2


def test_every_connection_syncs_each_commit(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    seen: list[int] = []

    def read() -> None:
        with db.read() as tx:
            seen.append(tx.conn.execute("PRAGMA synchronous").fetchone()[0])
            seen.append(tx.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal")

    try:
        read()
        thread = threading.Thread(target=read)
        thread.start()
        thread.join()
    finally:
        db.close()
    assert seen == [FULL, True, FULL, True]
