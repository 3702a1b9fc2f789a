"""The work queue: a key once, one holder per key, requeue-after, backoff that grows and resets."""

from __future__ import annotations

import threading
import time

from diskferry.control.runtime.queue import Backoff, WorkQueue


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_key_added_twice_is_queued_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a", "a"):
        queue.add(key)
    assert [queue.get(0), queue.get(0), queue.get(0)] == ["a", "b", None]


def test_a_key_held_is_not_handed_out_again_until_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(0) == "a"
    queue.add("a")  # changed while being reconciled
    queue.add("b")
    assert queue.get(0) == "b"
    assert queue.get(0) is None  # "a" waits for its holder
    queue.done("a")
    assert queue.get(0) == "a"
    queue.done("a")
    assert queue.get(0) is None


def test_one_reconcile_of_a_key_at_a_time_across_threads() -> None:
    queue: WorkQueue[int] = WorkQueue()
    holding: dict[int, int] = {}
    overlaps = []
    lock = threading.Lock()
    stop = threading.Event()

    def worker() -> None:
        while (key := queue.get(0.2)) is not None or not stop.is_set():
            if key is None:
                continue
            with lock:
                holding[key] = holding.get(key, 0) + 1
                if holding[key] > 1:
                    overlaps.append(key)
            time.sleep(0.001)
            with lock:
                holding[key] -= 1
            queue.done(key)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for n in range(2000):
        queue.add(n % 3)
    stop.set()
    for t in threads:
        t.join(30)
    assert overlaps == []
    assert queue.get(0) is None


def test_requeue_after_waits_for_its_time() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("later", 10)
    queue.add_after("sooner", 5)
    assert queue.get(0) is None
    clock.now = 5
    assert queue.get(0) == "sooner"
    assert queue.get(0) is None
    clock.now = 10
    assert queue.get(0) == "later"


def test_a_delayed_key_queued_meanwhile_is_not_doubled() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 1)
    queue.add("a")
    clock.now = 2
    assert queue.get(0) == "a"
    assert queue.get(0) is None


def test_a_key_waits_for_its_earliest_time_only() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 5)  # due at 5
    clock.now = 1
    queue.add_after("a", 5)  # at 6: the wait until 5 stands
    queue.add_after("a", 2)  # at 3: sooner, so it is the one
    assert len(queue) == 1
    clock.now = 3
    assert queue.get(0) == "a"
    queue.done("a")
    clock.now = 10
    assert queue.get(0) is None  # no wait left behind to reconcile it again


def test_requeues_of_many_keys_keep_one_wait_each() -> None:
    clock = FakeClock()
    queue: WorkQueue[int] = WorkQueue(clock=clock)
    for n in range(1000):
        for key in range(10):
            queue.add_after(key, 2000 - n)  # each sooner than the last
        clock.now += 0.5
    assert len(queue) == 10
    clock.now = 2000
    assert sorted(queue.get(0) for _ in range(10)) == list(range(10))
    assert queue.get(0) is None


def test_a_blocked_get_wakes_for_a_delayed_key() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 0.05)
    assert queue.get(30) == "a"


def test_backoff_doubles_per_failure_up_to_its_maximum_and_resets() -> None:
    backoff: Backoff[str] = Backoff(base=0.5, maximum=4)
    assert [backoff.when("a") for _ in range(6)] == [0.5, 1, 2, 4, 4, 4]
    assert backoff.when("b") == 0.5  # keys apart
    assert backoff.failures("a") == 6
    backoff.forget("a")
    assert backoff.when("a") == 0.5


def test_rate_limited_adds_use_the_backoff() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(Backoff(base=1, maximum=60), clock=clock)
    assert queue.add_rate_limited("a") == 1
    clock.now = 1
    assert queue.get(0) == "a"
    queue.done("a")
    assert queue.add_rate_limited("a") == 2
    clock.now = 2.5
    assert queue.get(0) is None
    clock.now = 3
    assert queue.get(0) == "a"
    queue.forget("a")
    assert queue.add_rate_limited("a") == 1


def test_shutdown_releases_waiting_workers() -> None:
    queue: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(queue.get()))
    t.start()
    queue.shutdown()
    t.join(10)
    assert got == [None] and not t.is_alive()
    queue.add("a")
    assert queue.get(0) is None
