"""The reconciler interface: one step towards the wanted state, what should happen next, and how
the log names the object reconciled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.model import Resource


def named(kind: str, namespace: str | None, name: str | None) -> str:
    """How the daemon's log names an object: `Kind namespace/name`, or `Kind name` when it is
    cluster-scoped."""
    where = f"{namespace}/" if namespace else ""
    return f"{kind} {where}{name}"


def tag(obj: Resource) -> str:
    """How the daemon's log names the object (see `named`)."""
    return named(obj.kind, obj.metadata.namespace, obj.metadata.name)


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for: nothing (done), another look after `requeue_after` seconds,
    or a retry with backoff because of `error`."""

    requeue_after: float | None = None
    error: Exception | None = None

    @classmethod
    def done(cls) -> Result:
        """Nothing more to do until the object or the world changes."""
        return cls()

    @classmethod
    def requeue(cls, after: float) -> Result:
        """Look again in `after` seconds (a job is running, a source is not ready)."""
        return cls(requeue_after=after)

    @classmethod
    def failed(cls, error: Exception) -> Result:
        """The step failed: retry with backoff, and show `error` on the object."""
        return cls(error=error)


class Reconciler(Protocol):
    """One kind's reconciler: a plain, idempotent step of (object, world)."""

    info: KindInfo
    """The kind it reconciles."""

    def reconcile(self, obj: Resource) -> Result:
        """Make one step for `obj` (re-read from the store just before) and say what next."""
        ...
