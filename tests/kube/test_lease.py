"""Leader election on a Lease of the stand-in cluster: one holder at a time, a record expired
only by the candidate's own clock, a holder that finds another in it has lost it, a release
hands it over at once, and of candidates racing for a free Lease one wins."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from diskferry.kube.api import KubeApi
from diskferry.kube.lease import LEASE, LeaderElector, LeaseTimes, LeaseTimesError

TIMES = LeaseTimes(duration=15, renew_deadline=10, retry=2)
names = (f"lease-{n}" for n in itertools.count())


class Monotonic:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def elect(api: KubeApi) -> Callable[..., LeaderElector]:
    """Candidates for one Lease, each with a clock of its own."""
    name = next(names)

    def make(identity: str) -> LeaderElector:
        return LeaderElector(api, "default", name, identity, TIMES, monotonic=Monotonic())

    return make


def spec(elector: LeaderElector) -> dict:
    lease = elector.api.get(*LEASE, elector.namespace, elector.name)
    assert lease is not None
    return lease["spec"]


def test_the_first_candidate_takes_a_free_lease(elect) -> None:
    a = elect("a")
    assert a.try_acquire_or_renew()
    held = spec(a)
    assert held["holderIdentity"] == "a"
    assert held["leaseDurationSeconds"] == 15
    assert held["leaseTransitions"] == 0
    assert held["acquireTime"] == held["renewTime"]
    assert a.try_acquire_or_renew()  # a renewal
    assert spec(a)["acquireTime"] == held["acquireTime"]


def test_another_waits_while_the_record_changes_and_takes_it_once_it_stood(elect) -> None:
    a, b = elect("a"), elect("b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    b.monotonic.now += 14
    a.try_acquire_or_renew()  # renewed: b's count starts again from what it sees now
    assert not b.try_acquire_or_renew()
    b.monotonic.now += 14
    assert not b.try_acquire_or_renew()
    b.monotonic.now += 1  # the holder's record stood unchanged for its whole duration
    assert b.try_acquire_or_renew()
    taken = spec(b)
    assert (taken["holderIdentity"], taken["leaseTransitions"]) == ("b", 1)


def test_a_holder_that_finds_another_in_the_lease_has_lost_it(elect) -> None:
    a, b = elect("a"), elect("b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    b.monotonic.now += 15
    assert b.try_acquire_or_renew()
    stop = threading.Event()
    held = LeaderElector(
        a.api, a.namespace, a.name, "a", LeaseTimes(duration=3, renew_deadline=2, retry=0.1)
    )
    assert held.hold(stop) is False
    assert held.holder == "b"


def test_a_released_lease_is_taken_at_once(elect) -> None:
    a, b = elect("a"), elect("b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert spec(a).get("holderIdentity") is None
    assert b.try_acquire_or_renew()
    assert spec(b)["holderIdentity"] == "b"


def test_of_candidates_racing_for_a_free_lease_one_wins(elect) -> None:
    candidates = [elect(f"c{n}") for n in range(6)]
    with ThreadPoolExecutor(len(candidates)) as pool:
        won = list(pool.map(lambda c: c.try_acquire_or_renew(), candidates))
    assert won.count(True) == 1
    assert spec(candidates[0])["holderIdentity"] == f"c{won.index(True)}"


def test_times_that_let_two_hold_at_once_are_refused() -> None:
    with pytest.raises(LeaseTimesError):
        LeaseTimes(duration=10, renew_deadline=10, retry=2)
