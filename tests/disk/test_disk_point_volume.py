"""PointVolume against a small server of a backup point's endpoints: the map read a page at a
time, dirty runs of an incremental point, a whole incremental point counted as data; a read
that breaks asks for the rest; the token goes with every request; a map that skips bytes or
stops short is refused."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from diskferry.disk.extent_map import ExtentMapError
from diskferry.disk.point_volume import TOKEN_HEADER, PointVolume

SIZE = 1 << 20
DISK = random.Random(7).randbytes(SIZE)
TOKEN = "the-token"
RUNS = [(0, 4096, "data"), (4096, 61440, "zero"), (65536, 65536, "dirty"), (131072, 917504, "data")]


class Point:
    """What the server serves, and what it saw."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, int, str]] = list(RUNS)
        self.tokens: set[str | None] = set()
        self.map_requests = 0
        self.break_next_read = False


def _handler(point: Point) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _query(self) -> dict[str, int]:
            return {k: int(v[0]) for k, v in parse_qs(urlsplit(self.path).query).items()}

        def do_HEAD(self) -> None:
            point.tokens.add(self.headers.get(TOKEN_HEADER))
            self.send_response(200)
            self.send_header("Content-Length", str(SIZE))
            self.end_headers()

        def do_GET(self) -> None:
            point.tokens.add(self.headers.get(TOKEN_HEADER))
            query = self._query()
            offset = query.get("offset", 0)
            if urlsplit(self.path).path.endswith("/map"):
                self._map(offset, query.get("page_size", 512))
                return
            length = query.get("length", SIZE - offset)
            self.send_response(200)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            body = DISK[offset : offset + length]
            if point.break_next_read and length > 1000:
                point.break_next_read = False
                self.wfile.write(body[:1000])
                self.wfile.flush()
                self.connection.close()
                return
            self.wfile.write(body)

        def _map(self, offset: int, page_size: int) -> None:
            point.map_requests += 1
            runs = [r for r in point.runs if r[0] + r[1] > offset]
            page, rest = runs[:page_size], runs[page_size:]
            extents = [
                {"offset": max(o, offset), "length": o + n - max(o, offset), "type": t}
                for o, n, t in page
            ]
            body = json.dumps({"extents": extents, "next_offset": rest[0][0] if rest else None})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

    return Handler


@pytest.fixture
def served() -> Iterator[tuple[Point, str]]:
    point = Point()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(point))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield point, f"http://127.0.0.1:{server.server_address[1]}/exports/vda"
    server.shutdown()
    server.server_close()


def volume(base: str, **options: Any) -> PointVolume:
    return PointVolume(f"{base}/data", f"{base}/map", TOKEN, backoff=0.01, **options)


def test_a_full_points_map_is_read_a_page_at_a_time(served: tuple[Point, str]) -> None:
    point, base = served
    with volume(base, page_size=2) as vol:
        assert vol.size == SIZE
        got = [(e.start, e.length, e.zero) for e in vol.extents("zero")]
        assert got == [(o, n, t == "zero") for o, n, t in RUNS]
        assert point.map_requests == 2
        clipped = [(e.start, e.length) for e in vol.extents("zero", 8192, 65536)]
        assert clipped == [(8192, 57344), (65536, 8192)]
        assert vol.read(65536, 4096) == DISK[65536 : 65536 + 4096]
    assert point.tokens == {TOKEN}


def test_an_incremental_points_map_gives_its_dirty_runs_and_no_zeros(
    served: tuple[Point, str],
) -> None:
    _, base = served
    with volume(base, changes=True) as vol:
        assert [(e.start, e.length) for e in vol.extents("dirty") if e.dirty] == [(65536, 65536)]
        whole = list(vol.extents("zero"))
        assert [(e.start, e.length, e.zero) for e in whole] == [(0, SIZE, False)]


def test_a_read_that_breaks_asks_for_the_rest(served: tuple[Point, str]) -> None:
    point, base = served
    point.break_next_read = True
    with volume(base) as vol:
        assert vol.read(4096, 300_000) == DISK[4096 : 4096 + 300_000]
    assert not point.break_next_read


@pytest.mark.parametrize(
    ("runs", "said"),
    [
        ([(0, 4096, "data"), (8192, SIZE - 8192, "data")], "do not follow on at 4096"),
        ([(0, 4096, "data")], "ends at 4096, short of the disk's"),
        ([(0, SIZE, "sparse")], "not in the expected shape: extents.0.type"),
    ],
)
def test_a_map_that_skips_or_stops_short_is_refused(
    served: tuple[Point, str], runs: list[tuple[int, int, str]], said: str
) -> None:
    point, base = served
    point.runs = runs
    with volume(base) as vol, pytest.raises(ExtentMapError, match=said):
        list(vol.extents("zero"))
