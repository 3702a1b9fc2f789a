"""The end of a request's head is found however the bytes are split, and a head that is not
good HTTP/1.1 is refused as soon as its bytes say so, before any parser sees it."""

from __future__ import annotations

import pytest

from diskferry.serving.request_head import MAX_HEAD, MAX_LINE, BadHead, RequestHead

REQUEST = b"GET /volumes/disk/disk.img HTTP/1.1\r\nHost: x\r\nX-Tab:\ta\tb\r\n\r\n"


@pytest.mark.parametrize("piece", [1, 2, 3, 5, len(REQUEST)])
def test_found_in_the_piece_that_completes_it(piece: int) -> None:
    head = RequestHead()
    pieces = [REQUEST[i : i + piece] for i in range(0, len(REQUEST), piece)]
    assert [head.feed(p) for p in pieces] == [False] * (len(pieces) - 1) + [True]


def test_found_with_a_body_after_it() -> None:
    assert RequestHead().feed(REQUEST + b"body bytes \x00\x01 of any kind")


def test_line_ends_alone_are_not_the_end() -> None:
    head = RequestHead()
    assert not head.feed(b"GET / HTTP/1.1\r\n")
    assert not head.feed(b"Host: x\r")
    assert not head.feed(b"\n")
    assert not head.feed(b"")
    assert head.feed(b"\r\n")


@pytest.mark.parametrize(
    "bad",
    [
        b"GET / HTTP/1.1\r\nx-kubevirt-export-token: t\x01\r\n",
        b"GET / HTTP/1.1\r\nHost: x\ny: z\r\n",
        b"GET / HTTP/1.1\r\nHost: x\rz\r\n",
        b"GET /\x7f HTTP/1.1\r\n",
        b"GET / HTTP/2.0\r\n",
        b"GET  / HTTP/1.1\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        b"GET / HTTP/1.1\r\nno colon here\r\n",
        b"GET / HTTP/1.1\r\nBad Name: x\r\n",
        b"GET / HTTP/1.1\r\n folded: x\r\n",
    ],
)
@pytest.mark.parametrize("piece", [1, 7, 1 << 20])
def test_a_malformed_head_is_refused_whatever_the_pieces(bad: bytes, piece: int) -> None:
    head = RequestHead()
    with pytest.raises(BadHead) as refused:
        for at in range(0, len(bad), piece):
            head.feed(bad[at : at + piece])
        head.feed(b"\r\n")
    assert refused.value.status == 400
    assert refused.value.answer().startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_a_long_line_is_refused_before_its_end() -> None:
    head = RequestHead()
    head.feed(b"GET / HTTP/1.1\r\nX-Long: ")
    with pytest.raises(BadHead) as refused:
        for _ in range(MAX_LINE):
            head.feed(b"a")
    assert refused.value.status == 431


def test_a_long_head_of_short_lines_is_refused() -> None:
    head = RequestHead()
    head.feed(b"GET / HTTP/1.1\r\n")
    line = b"X-A: " + b"a" * 100 + b"\r\n"
    with pytest.raises(BadHead) as refused:
        for _ in range(MAX_HEAD // len(line) + 1):
            head.feed(line)
    assert refused.value.status == 431
