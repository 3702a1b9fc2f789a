"""parallel_map: results in order, and a cancel honoured even once every item is in flight."""

from __future__ import annotations

import threading

import pytest

from diskferry.base.errors import CancelledError
from diskferry.disk.parallel import parallel_map


def test_results_come_in_order() -> None:
    assert list(parallel_map(lambda n: n * n, range(50), threads=4)) == [n * n for n in range(50)]


def test_a_cancel_stops_the_last_items_in_flight() -> None:
    cancel = threading.Event()
    # fewer items than may be in flight: all are submitted before the first result is taken
    results = parallel_map(lambda n: n, range(5), threads=4, cancel=cancel)
    assert next(results) == 0
    cancel.set()
    with pytest.raises(CancelledError):
        next(results)


def test_unordered_results_come_as_they_finish() -> None:
    slow = threading.Event()

    def work(n: int) -> int:
        if n == 0:
            slow.wait(10)
        return n

    results = parallel_map(work, range(4), threads=2, ordered=False)
    first = next(results)
    slow.set()
    assert first != 0
    assert sorted([first, *results]) == [0, 1, 2, 3]
