"""The end of a request's headers is found however the bytes are split."""

from __future__ import annotations

import pytest

from diskferry.serving.listener import HeaderEnd

REQUEST = b"GET /volumes/disk/disk.img HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize("piece", [1, 2, 3, 5, len(REQUEST)])
def test_found_in_the_piece_that_completes_it(piece: int) -> None:
    header_end = HeaderEnd()
    pieces = [REQUEST[i : i + piece] for i in range(0, len(REQUEST), piece)]
    assert [header_end.feed(p) for p in pieces] == [False] * (len(pieces) - 1) + [True]


def test_found_with_a_body_after_it() -> None:
    assert HeaderEnd().feed(REQUEST + b"body bytes")


def test_line_ends_alone_are_not_the_end() -> None:
    header_end = HeaderEnd()
    assert not header_end.feed(b"GET / HTTP/1.1\r\n")
    assert not header_end.feed(b"Host: x\r")
    assert not header_end.feed(b"\n")
    assert not header_end.feed(b"")
    assert header_end.feed(b"\r\n")
