"""A request's head (request line and headers) checked as its bytes arrive, before aiohttp
parses it: bounded in size, every line well formed, no control character anywhere.

aiohttp refuses a head it cannot parse with the offending line in its answer and in its log,
and a token in a header with it. A head that fails here is refused instead with a fixed
answer and one fixed line of log, and none of its bytes go anywhere. The checks are at least
as strict as aiohttp's parser, so that what passes here parses there.
"""

from __future__ import annotations

import http
import json
import re

HEAD_END = b"\r\n\r\n"
LINE_END = b"\r\n"
# aiohttp refuses a line over 8190 bytes: a little less here, so that this refuses it first
MAX_LINE = 8000
MAX_HEAD = 64 << 10
_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_REQUEST_LINE = re.compile(_TOKEN + rb" [^\x00-\x20\x7f]+ HTTP/1\.[01]")
_HEADER_LINE = re.compile(_TOKEN + rb":[^\x00-\x08\x0a-\x1f\x7f]*")
# what may stand in a line not yet ended: no control character but tab, and a CR last
_PARTIAL = re.compile(rb"[^\x00-\x08\x0a-\x1f\x7f]*\r?")


class BadHead(Exception):
    """A head that is refused: the status to answer and why, in words of this module's own."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.why = why

    def answer(self) -> bytes:
        """The whole answer, with the JSON body every refusal carries; the connection closes."""
        phrase = http.HTTPStatus(self.status).phrase
        body = json.dumps({"reason": phrase.replace(" ", ""), "message": self.why}).encode()
        head = (
            f"HTTP/1.1 {self.status} {phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        return head.encode() + body


class RequestHead:
    """The head of one request, fed in whatever pieces it arrives."""

    def __init__(self) -> None:
        self._head = bytearray()
        self._checked = 0  # the head's bytes up to here are whole lines, checked

    def feed(self, data: bytes) -> bool:
        """Whether the head ends within `data`, given the bytes fed before it; BadHead as
        soon as what has come cannot be the start of a good head."""
        seen = len(self._head)
        self._head += data[: MAX_HEAD + len(HEAD_END) - seen]
        end = self._head.find(HEAD_END, max(0, seen - len(HEAD_END) + 1))
        if end >= 0:
            del self._head[end + len(LINE_END) :]
        self._check_lines()
        if end >= 0:
            return True
        if len(self._head) > MAX_HEAD:
            raise BadHead(431, f"the request's head is longer than {MAX_HEAD} bytes")
        return False

    def _check_lines(self) -> None:
        while (end := self._head.find(LINE_END, self._checked)) >= 0:
            self._check_line(bytes(self._head[self._checked : end]), first=self._checked == 0)
            self._checked = end + len(LINE_END)
        rest = bytes(self._head[self._checked :])
        if len(rest) > MAX_LINE:
            raise BadHead(431, f"a line of the request's head is longer than {MAX_LINE} bytes")
        if _PARTIAL.fullmatch(rest) is None:
            raise BadHead(400, "the request's head holds a control character")

    @staticmethod
    def _check_line(line: bytes, first: bool) -> None:
        if len(line) > MAX_LINE:
            raise BadHead(431, f"a line of the request's head is longer than {MAX_LINE} bytes")
        if first and _REQUEST_LINE.fullmatch(line) is None:
            raise BadHead(400, "the request line is not 'METHOD TARGET HTTP/1.x'")
        if not first and _HEADER_LINE.fullmatch(line) is None:
            raise BadHead(400, "a header line is not 'Name: value' without control characters")
