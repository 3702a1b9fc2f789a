"""PeekReader: the head looked at is read again, and reads after it stay whole blocks."""

from __future__ import annotations

import io

from diskferry.disk.peek import PeekReader


class _Trickle:
    """A stream that gives at most `most` bytes a read, as a socket may."""

    def __init__(self, data: bytes, most: int) -> None:
        self._data = io.BytesIO(data)
        self._most = most

    def read(self, n: int = -1) -> bytes:
        return self._data.read(min(n, self._most))


def test_the_head_is_read_again_and_the_next_reads_are_whole_blocks():
    data = bytes(range(256)) * 64  # 16 KiB
    reader = PeekReader(io.BytesIO(data))
    assert reader.peek(10) == data[:10]
    blocks = [reader.read(4096) for _ in range(5)]
    assert [len(b) for b in blocks] == [4096, 4096, 4096, 4096, 0]
    assert b"".join(blocks) == data


def test_a_peek_longer_than_one_read_of_the_stream_gathers_it_and_loses_nothing():
    data = bytes(range(250)) * 4
    reader = PeekReader(_Trickle(data, 100))
    assert reader.peek(350) == data[:350]
    assert reader.read(300) == data[:300]
    parts = []
    while part := reader.read(300):
        parts.append(part)
    assert b"".join(parts) == data[300:]
