"""A request aiohttp cannot parse, or one that carries a token where none belongs, leaves one
short line in the log of the export server and of the proxy: no token, no header value, no
query value, and a bounded size however large the request; its answer echoes none of it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from export_support import TOKEN, curl, write_routes
from server_support import Running, send_raw

PREFIX = "/api/export.kubevirt.io/v1beta1/namespaces/default/virtualmachineexports/vm1"
GARBAGE = 2 << 20
# a line of the log says who, what and how it ended: far less than this
LINE_MAX = 300


def _garbage(kind: str, seed: int) -> bytes:
    rng = random.Random(seed)
    if kind == "binary":
        return rng.randbytes(GARBAGE)
    if kind == "line":
        return b"GET /" + b"A" * GARBAGE + b" HTTP/1.1\r\n\r\n"
    if kind == "header":
        return f"GET /x HTTP/1.1\r\nHost: x\r\nX-Junk: {'B' * GARBAGE}\r\n\r\n".encode()
    return bytes(rng.choice(b"abcdefghij \t") for _ in range(GARBAGE))


def _routes_to(export: Running, tmp_path: Path) -> Path:
    routes = tmp_path / "routes.yaml"
    route = {"namespace": "default", "name": "vm1", "url": export.url, "caFile": str(export.ca)}
    write_routes(routes, [route])
    return routes


@pytest.fixture(params=["export", "proxy"])
def server(request, export: Running, proxy_factory, tmp_path: Path) -> tuple[Running, str]:
    """The export server, or the proxy in front of it; and the base path of its export."""
    if request.param == "export":
        return export, ""
    return proxy_factory(_routes_to(export, tmp_path), "--processes", "1"), PREFIX


def test_a_control_character_in_a_header_leaves_no_token(server: tuple[Running, str]) -> None:
    running, base = server
    bad = f"GET {base}/volumes/disk/extents HTTP/1.1\r\nHost: x\r\n"
    bad += f"x-kubevirt-export-token: {TOKEN}\x01\r\n\r\n"
    answer = send_raw(running, bad.encode())
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert TOKEN.encode() not in answer
    # the same behind a good request on the connection, parsed at once with it
    good = f"GET {base}/exportready HTTP/1.1\r\nHost: x\r\n\r\n"
    send_raw(running, good.encode() + bad.encode())
    log = running.log.read_text()
    assert TOKEN not in log and "Traceback" not in log
    assert max(len(line) for line in log.splitlines()) <= LINE_MAX


def test_large_garbage_leaves_short_lines_and_is_not_echoed(server: tuple[Running, str]) -> None:
    running, _ = server
    before = running.log.stat().st_size
    for seed, kind in enumerate(["binary", "line", "header", "text", "binary"]):
        garbage = _garbage(kind, seed)
        answer = send_raw(running, garbage)
        middle = garbage[GARBAGE // 2 : GARBAGE // 2 + 16]
        assert middle not in answer and b"A" * 16 not in answer and b"B" * 16 not in answer
        assert len(answer) < 1024
    grown = running.log.read_text()[before:]
    assert len(grown) <= 5 * LINE_MAX, grown[:2000]


def test_a_token_in_a_wrong_case_query_or_in_the_path_is_not_logged(
    server: tuple[Running, str],
) -> None:
    running, base = server
    auth = ["-H", f"x-kubevirt-export-token: {TOKEN}"]
    asked = [
        [f"{base}/volumes/disk/extents?X-KubeVirt-Export-Token={TOKEN}"],
        [f"{base}/volumes/disk/extents?offset=0&{TOKEN}", *auth],
        [f"{base}/volumes/{TOKEN}/disk.img"],
        [f"{base}/volumes/disk/disk.img/{TOKEN}", *auth],
        [f"{base}/volumes/disk/extents?offset={TOKEN}", *auth],
    ]
    codes = []
    for path, *args in asked:
        done = curl(
            "-o", "/dev/null", "-w", "%{http_code}", *args, running.url + path, ca=running.ca
        )
        codes.append(done.stdout)
    assert codes == [b"401", b"200", b"401", b"404", b"400"]
    log = running.log.read_text()
    assert TOKEN not in log
    assert "extents" in log  # the requests are logged, only without the token
