"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does: of the
operators that share the Lease's name, one holds it and reconciles, the others wait.

A candidate takes the Lease when nobody holds it, or when its record has not changed for its
leaseDurationSeconds as the candidate's own monotonic clock measures it (no clocks of two hosts
are compared). The holder renews it every `retry` seconds; one that cannot for `renew_deadline`
(shorter than the duration), or that finds another holder in it, has lost it and must stop
before anybody else may take it. A holder stopping cleanly releases it, so that another takes
over at once. Every write carries the resourceVersion it read: of candidates that race, one
wins.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diskferry.base.errors import BAD_USAGE, DiskferryError
from diskferry.control.clock import Clock
from diskferry.control.errors import AlreadyExistsError, ConflictError
from diskferry.kube.api import KubeApi

log = logging.getLogger("diskferry.kube")
LEASE = ("coordination.k8s.io/v1", "Lease")
MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"  # metav1.MicroTime, as a Lease's times are written


class LeaseTimesError(DiskferryError):
    """The lease's times cannot keep one holder at a time."""

    reason = BAD_USAGE


@dataclass(frozen=True)
class LeaseTimes:
    """client-go's defaults: a Lease is held for `duration` seconds unless renewed; its holder
    gives up after `renew_deadline` seconds without a renewal; everyone tries every `retry`."""

    duration: float = 15.0
    renew_deadline: float = 10.0
    retry: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry < self.renew_deadline < self.duration:
            raise LeaseTimesError(
                "the lease's times must be 0 < retry < renew deadline < duration: a holder must "
                "give up before another may take it"
            )


class LeaderElector:
    """Takes, renews and releases the Lease `namespace/name` as `identity`."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        name: str,
        identity: str,
        times: LeaseTimes | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Clock | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.times = times or LeaseTimes()
        self.monotonic = monotonic
        self.clock = clock or Clock()
        self.holder: str | None = None
        """The holder the Lease named when last read (None before it was read)."""
        self.answered: float | None = None
        """When (on the monotonic clock) the API last answered a try."""
        self._observed: dict[str, Any] | None = None
        self._observed_at = 0.0

    def _saw(self, spec: dict[str, Any]) -> None:
        """Note the Lease's record as read now; its duration runs from its last change."""
        self.answered = self.monotonic()
        self.holder = spec.get("holderIdentity") or ""
        if spec != self._observed:
            self._observed, self._observed_at = dict(spec), self.answered

    def _spec(self, acquired: str, now: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": math.ceil(self.times.duration),
            "acquireTime": acquired,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def try_acquire_or_renew(self) -> bool:
        """One try: take the Lease when it is free or its holder's record expired, renew it
        when this identity holds it; whether this identity holds it now."""
        now = self.clock.now().strftime(MICRO_TIME)
        current = self.api.get(*LEASE, self.namespace, self.name)
        if current is None:
            spec = self._spec(now, now, 0)
            body = {
                "apiVersion": LEASE[0],
                "kind": LEASE[1],
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": spec,
            }
            try:
                stored = self.api.create(*LEASE, self.namespace, body)
            except AlreadyExistsError:
                return False
            self._saw(stored.get("spec") or {})
            return True
        spec = current.get("spec") or {}
        self._saw(spec)
        holder = self.holder
        duration = float(spec.get("leaseDurationSeconds") or self.times.duration)
        if holder not in ("", self.identity) and self.monotonic() < self._observed_at + duration:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            wanted = self._spec(spec.get("acquireTime") or now, now, transitions)
        else:
            wanted = self._spec(now, now, transitions + 1)
        try:
            stored = self.api.replace(
                *LEASE, self.namespace, self.name, {**current, "spec": wanted}
            )
        except ConflictError:
            return False
        self._saw(stored.get("spec") or {})
        if holder != self.identity:
            log.info("took the lease %s/%s from %r", self.namespace, self.name, holder or None)
        return True

    def _try(self) -> bool:
        """One try; False (logged) when the API could not be asked."""
        try:
            return self.try_acquire_or_renew()
        except DiskferryError as error:
            log.warning("cannot reach the lease %s/%s: %s", self.namespace, self.name, error)
            return False

    def acquire(self, stop: threading.Event) -> bool:
        """Try every `retry` seconds until this identity holds the Lease (True) or `stop` is
        set (False)."""
        said = None
        while not stop.is_set():
            if self._try():
                return True
            if self.holder and self.holder != said:
                said = self.holder
                log.info("waiting for the lease %s/%s, held by %s", self.namespace, self.name, said)
            stop.wait(self.times.retry)
        return False

    def hold(self, stop: threading.Event) -> bool:
        """Renew every `retry` seconds until `stop` is set (True: still held) or the Lease is
        lost (False): another identity holds it, or no renewal succeeded for `renew_deadline`."""
        renewed = self.monotonic()
        while not stop.wait(self.times.retry):
            if self._try():
                renewed = self.monotonic()
                continue
            if self.holder not in (None, "", self.identity):
                log.error("lost the lease %s/%s to %s", self.namespace, self.name, self.holder)
                return False
            if self.monotonic() - renewed >= self.times.renew_deadline:
                log.error(
                    "lost the lease %s/%s: not renewed for %.0f s",
                    self.namespace,
                    self.name,
                    self.times.renew_deadline,
                )
                return False
        return True

    def release(self) -> None:
        """Give the Lease up if this identity holds it, so that another takes it at once."""
        try:
            current = self.api.get(*LEASE, self.namespace, self.name)
            spec = (current or {}).get("spec") or {}
            if current is None or spec.get("holderIdentity") != self.identity:
                return
            now = self.clock.now().strftime(MICRO_TIME)
            released = {
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": int(spec.get("leaseTransitions") or 0),
            }
            self.api.replace(*LEASE, self.namespace, self.name, {**current, "spec": released})
            self.holder = ""
        except DiskferryError as error:
            log.warning("cannot release the lease %s/%s: %s", self.namespace, self.name, error)
