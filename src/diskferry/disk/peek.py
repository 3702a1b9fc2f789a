"""PeekReader: look at the head of a stream, then read it from the start."""

from __future__ import annotations

from diskferry.disk.decompress import Readable


class PeekReader:
    """Wraps a readable so its first bytes can be looked at without losing them."""

    def __init__(self, raw: Readable) -> None:
        self._raw = raw
        self._head = b""

    def peek(self, n: int) -> bytes:
        """Up to `n` bytes from the current position (fewer only at the end)."""
        while len(self._head) < n:
            more = self._raw.read(n - len(self._head))
            if not more:
                break
            self._head += more
        return self._head[:n]

    def read(self, n: int = 1 << 20) -> bytes:
        """Up to `n` bytes; the head looked at is topped up from the stream to `n`, so that
        reads after it stay whole blocks of the stream."""
        if not self._head:
            return self._raw.read(n)
        out, self._head = self._head[:n], self._head[n:]
        if len(out) < n:
            out += self._raw.read(n - len(out))
        return out
