"""The bandwidth limit: the token bucket's accounting on an injected clock, and the volume
that reads and writes through it."""

from __future__ import annotations

import threading

import pytest

from diskferry.base.errors import CancelledError
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.throttle import ThrottledVolume, TokenBucket, bucket_for, throttled


class FakeTime:
    """A clock that moves only when slept on; every sleep is recorded."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []
        self._lock = threading.Lock()

    def clock(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds
            self.slept.append(seconds)


def bucket(rate: int, burst: int | None = None) -> tuple[TokenBucket, FakeTime]:
    time = FakeTime()
    return TokenBucket(rate, burst, clock=time.clock, sleep=time.sleep), time


def test_the_burst_passes_at_once_and_the_rest_at_the_rate() -> None:
    limiter, time = bucket(1000)
    assert limiter.take(500) == 0 and limiter.take(500) == 0
    assert time.now == 100.0
    assert limiter.take(500) == pytest.approx(0.5)
    assert time.now == pytest.approx(100.5)
    assert limiter.taken == 1500


def test_bytes_let_through_never_exceed_the_burst_and_the_rate() -> None:
    limiter, time = bucket(4096, burst=1024)
    released = 0
    for n in (100, 3000, 64, 10_000, 1, 5000, 4096):
        limiter.take(n)
        released += n
        assert released <= 1024 + 4096 * (time.now - 100.0) + 1e-6
    assert time.now - 100.0 == pytest.approx((released - 1024) / 4096)


def test_a_take_larger_than_the_burst_waits_for_its_debt() -> None:
    limiter, time = bucket(1 << 20, burst=64 << 10)
    assert limiter.take(4 << 20) == pytest.approx((4 * 1024 - 64) / 1024)
    assert max(time.slept) <= 0.25  # slept in steps, so a cancel is seen


def test_an_idle_bucket_fills_only_to_its_burst() -> None:
    limiter, time = bucket(1000)
    time.now += 3600
    assert limiter.take(3000) == pytest.approx(2.0)


def test_threads_share_one_limit() -> None:
    limiter, time = bucket(10_000, burst=1000)
    lock = threading.Lock()
    releases: list[tuple[float, int]] = []

    def mover() -> None:
        for _ in range(20):
            limiter.take(500)
            with lock:
                releases.append((time.clock(), 500))

    threads = [threading.Thread(target=mover) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert limiter.taken == 40_000
    released = 0
    for at, n in sorted(releases):
        released += n
        assert released <= 1000 + 10_000 * (at - 100.0) + 1e-6
    assert time.now - 100.0 >= (40_000 - 1000) / 10_000 - 1e-6


def test_a_cancel_stops_a_waiting_take() -> None:
    cancel = threading.Event()
    time = FakeTime()

    def sleep(seconds: float) -> None:
        time.sleep(seconds)
        cancel.set()

    limiter = TokenBucket(1000, clock=time.clock, sleep=sleep)
    with pytest.raises(CancelledError):
        limiter.take(10_000, cancel)
    assert time.now - 100.0 < 9


def test_no_limit_is_no_bucket_and_zero_is_refused() -> None:
    assert bucket_for(None) is None
    assert bucket_for(5).rate == 5
    with pytest.raises(ValueError, match="at least 1 byte"):
        TokenBucket(0)


def test_the_volume_takes_what_it_reads_and_writes_but_not_zeros(tmp_path) -> None:
    limiter, _ = bucket(1 << 30)
    with FileVolume.create(str(tmp_path / "v.raw"), 1 << 20) as inner:
        assert throttled(inner, None) is inner
        volume = throttled(inner, limiter)
        assert isinstance(volume, ThrottledVolume) and volume.size == 1 << 20
        volume.write(4096, b"x" * 8192)
        volume.zero(0, 4096)
        assert volume.read(4096, 100) == b"x" * 100
        assert limiter.taken == 8192 + 100
        assert [e.zero for e in volume.extents()] == [e.zero for e in inner.extents()]
