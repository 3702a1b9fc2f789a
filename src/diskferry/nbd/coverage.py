"""ReadCoverage: which bytes of a read request its reply chunks filled, each at most once."""

from __future__ import annotations

import bisect

MAX_RUNS = 4096


class ReadCoverage:
    """The disjoint runs of a `length`-byte request that reply chunks filled so far.

    Neighbouring runs join, so chunks that arrive in order keep one run; a reply scattered
    into more than MAX_RUNS separate runs is refused rather than tracked without bound.
    """

    def __init__(self, length: int) -> None:
        self.length = length
        self.filled = 0
        self._starts: list[int] = []
        self._ends: list[int] = []

    @property
    def whole(self) -> bool:
        """Whether every byte of the request was filled."""
        return self.filled == self.length

    def add(self, at: int, size: int) -> str | None:
        """Note that [at, at + size) arrived; what is wrong with that chunk, if anything."""
        end = at + size
        if size <= 0:
            return "an empty read chunk"
        if at < 0 or end > self.length:
            return "read data outside the requested range"
        i = bisect.bisect_right(self._starts, at)
        if (i and self._ends[i - 1] > at) or (i < len(self._starts) and self._starts[i] < end):
            return f"read chunks overlap at {at}+{size} of the request"
        joins_left = i > 0 and self._ends[i - 1] == at
        joins_right = i < len(self._starts) and self._starts[i] == end
        if joins_left and joins_right:
            self._ends[i - 1] = self._ends[i]
            del self._starts[i], self._ends[i]
        elif joins_left:
            self._ends[i - 1] = end
        elif joins_right:
            self._starts[i] = at
        elif len(self._starts) >= MAX_RUNS:
            return f"a read reply scattered into more than {MAX_RUNS} pieces"
        else:
            self._starts.insert(i, at)
            self._ends.insert(i, end)
        self.filled += size
        return None
