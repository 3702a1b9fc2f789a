"""ordered_map: results in order, and a cancel honoured even once every item is in flight."""

from __future__ import annotations

import threading

import pytest

from diskferry.disk.errors import CancelledError
from diskferry.disk.parallel import ordered_map


def test_results_come_in_order() -> None:
    assert list(ordered_map(lambda n: n * n, range(50), threads=4)) == [n * n for n in range(50)]


def test_a_cancel_stops_the_last_items_in_flight() -> None:
    cancel = threading.Event()
    # fewer items than may be in flight: all are submitted before the first result is taken
    results = ordered_map(lambda n: n, range(5), threads=4, cancel=cancel)
    assert next(results) == 0
    cancel.set()
    with pytest.raises(CancelledError):
        next(results)
