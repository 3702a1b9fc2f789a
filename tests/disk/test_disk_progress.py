"""Progress: percent, average and current speed, time left, with an injected clock."""

from __future__ import annotations

import threading

from diskferry.disk.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_percent_and_speeds():
    clock = Clock()
    p = Progress(1000, clock=clock)
    clock.now += 10
    p.add(100)
    assert p.percent == 10.0
    assert p.average_speed == 10.0
    # a burst in the last second: the current speed follows it, the average lags
    clock.now += 1
    p.add(400)
    assert p.average_speed == 500 / 11
    # 80 bytes were done at the window's edge (t=108), 500 now
    assert p.current_speed == (500 - 80) / 3
    assert p.eta == 500 / p.current_speed


def test_current_speed_forgets_old_samples():
    clock = Clock()
    p = Progress(10_000, clock=clock)
    for _ in range(10):
        clock.now += 1
        p.add(1000)
    assert p.current_speed == 1000.0
    for _ in range(5):
        clock.now += 1
        p.add(100)
    assert p.current_speed == 100.0
    assert p.average_speed == 10_500 / 15


def test_stalled_transfer_has_zero_current_speed():
    clock = Clock()
    p = Progress(100, clock=clock)
    clock.now += 1
    p.add(50)
    clock.now += 60
    assert p.current_speed == 0.0
    assert p.eta == 50 / p.average_speed


def test_finish_freezes_elapsed_and_unknown_total():
    clock = Clock()
    p = Progress(clock=clock)
    assert p.percent == 0.0
    assert p.eta is None
    clock.now += 2
    p.add(10)
    p.finish()
    clock.now += 100
    assert p.elapsed == 2
    assert p.percent == 100.0


def test_to_dict():
    clock = Clock()
    p = Progress(200, "import", clock=clock)
    clock.now += 4
    p.add(50)
    assert p.to_dict() == {
        "phase": "import",
        "bytesDone": 50,
        "bytesTotal": 200,
        "percent": 25.0,
        "averageSpeed": 12,
        "currentSpeed": 12,
        "eta": 12.0,
        "elapsed": 4.0,
    }


def test_many_threads_add_exactly():
    p = Progress(8 * 10_000)

    def work() -> None:
        for _ in range(10_000):
            p.add(1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert p.done == 80_000
    assert p.percent == 100.0


def test_bytes_taken_back_are_counted_once_when_read_again():
    p = Progress(1000, clock=Clock())
    p.add(64)
    p.uncount(64)
    p.add(1000)
    assert p.done == 1000
    assert p.percent == 100.0
