"""The data movers' scheduler: Prepared movers of one kind admitted to InProgress, oldest first,
as many at once as the cap leaves room for; uploads and downloads counted apart."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from diskferry.control.resources.datamover import MoverPhase
from diskferry.control.runtime.client import Client

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def age_order(obj: Any) -> tuple[datetime, str]:
    """Oldest first; the uid breaks a tie."""
    return (obj.metadata.creation_timestamp or EPOCH, obj.metadata.uid or "")


def holds_slot(obj: Any) -> bool:
    """Whether the mover's worker holds a slot: it is InProgress, or Canceling after it started."""
    phase = obj.status.phase
    started = obj.status.start_timestamp is not None
    return phase == MoverPhase.IN_PROGRESS or (phase == MoverPhase.CANCELING and started)


class Scheduler:
    """Admits movers under one lock, so two reconciles never both take the last slot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def admit(
        self, client: Client, model: type[Any], obj: Any, cap: int, start: Callable[[], None]
    ) -> str | None:
        """Run `start` (which moves `obj` to InProgress) when a slot is free for it; else the
        message saying what it waits for."""
        with self._lock:
            everyone = client.list(model)
            running = sum(1 for o in everyone if holds_slot(o))
            waiting = sorted(
                (
                    o
                    for o in everyone
                    if o.status.phase == MoverPhase.PREPARED and not o.spec.cancel
                ),
                key=age_order,
            )
            ids = [o.metadata.uid for o in waiting]
            rank = ids.index(obj.metadata.uid) if obj.metadata.uid in ids else len(ids)
            if rank < cap - running:
                start()
                return None
        return (
            f"waiting for a data mover: {running} of {cap} in progress, "
            f"{rank} older waiting before this one"
        )
