"""A bandwidth limit: a token bucket of bytes per second, and a Volume read and written through
one, so that every engine that moves a disk's bytes (a backup reading, a restore writing)
keeps to the same limit the same way.

The bucket holds at most `burst` bytes (one second's worth by default) and fills at `rate`.
A take larger than what is left runs the bucket into debt and waits until the debt is paid,
so a block larger than the burst still passes, and the bytes let through by any moment never
exceed `burst + rate * elapsed`, however many threads take at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

from diskferry.base.errors import check_cancel
from diskferry.disk.extent import Extent
from diskferry.disk.volume import ExtentContext, Volume

MAX_SLEEP = 0.25
"""The longest one sleep, so that a cancel is seen while a take waits."""


class TokenBucket:
    """At most `rate` bytes a second on average and `burst` at once; thread-safe."""

    def __init__(
        self,
        rate: int,
        burst: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"a bandwidth limit must be at least 1 byte a second, not {rate}")
        self.rate = rate
        self.burst = rate if burst is None else burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(self.burst)
        self._stamp = clock()
        self.taken = 0
        """Bytes taken so far."""

    def take(self, n: int, cancel: threading.Event | None = None) -> float:
        """Take `n` bytes' worth, waiting until the bucket holds them; the seconds waited.

        CancelledError when `cancel` is set while it waits.
        """
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= n
            self.taken += n
            debt = -self._tokens if self._tokens < 0 else 0.0
        deadline = now + debt / self.rate
        while (left := deadline - self._clock()) > 0:
            check_cancel(cancel)
            self._sleep(min(left, MAX_SLEEP))
        return debt / self.rate


class ThrottledVolume(Volume):
    """A volume whose reads and writes each take their bytes from a bucket first; zeroing,
    extents and the rest pass through untaken (they move no data)."""

    def __init__(
        self, inner: Volume, bucket: TokenBucket, cancel: threading.Event | None = None
    ) -> None:
        self.inner = inner
        self.bucket = bucket
        self.cancel = cancel
        self.readonly = inner.readonly
        self.sparse = inner.sparse

    @property
    def size(self) -> int:
        """The inner volume's size."""
        return self.inner.size

    def read_into(self, offset: int, buf: memoryview | bytearray) -> None:
        """Read once the bucket lets `len(buf)` bytes through."""
        self.bucket.take(len(buf), self.cancel)
        self.inner.read_into(offset, buf)

    def read_into_many(self, pieces: Sequence[tuple[int, memoryview]]) -> None:
        """Read them all at once when the bucket lets their bytes through."""
        self.bucket.take(sum(len(buf) for _, buf in pieces), self.cancel)
        self.inner.read_into_many(pieces)

    def write(self, offset: int, data: bytes | memoryview | bytearray) -> None:
        """Write once the bucket lets `len(data)` bytes through."""
        self.bucket.take(len(data), self.cancel)
        self.inner.write(offset, data)

    def zero(self, offset: int, length: int) -> None:
        """Zero the range, untaken."""
        self.inner.zero(offset, length)

    def flush(self) -> None:
        """Flush the inner volume."""
        self.inner.flush()

    def extents(
        self, context: ExtentContext = "zero", offset: int = 0, length: int | None = None
    ) -> Iterator[Extent]:
        """The inner volume's extents."""
        return self.inner.extents(context, offset, length)

    def close(self) -> None:
        """Close the inner volume."""
        self.inner.close()

    def __str__(self) -> str:
        return str(self.inner)


def throttled(
    volume: Volume, bucket: TokenBucket | None, cancel: threading.Event | None = None
) -> Volume:
    """`volume` read and written through `bucket`; `volume` itself when there is no limit."""
    return volume if bucket is None else ThrottledVolume(volume, bucket, cancel)


def bucket_for(rate: int | None) -> TokenBucket | None:
    """A bucket of `rate` bytes a second, None when unlimited (None)."""
    return None if rate is None else TokenBucket(rate)
