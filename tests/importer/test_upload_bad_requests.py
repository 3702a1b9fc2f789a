"""The upload server logs a request it cannot parse, or one with its token where none
belongs, in one short line without the token; and echoes none of such a request back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from server_support import send_raw
from upload_support import TOKEN, UploadSetup, bearer, curl

# a line of the log says who, what and how it ended: far less than this
LINE_MAX = 300
GARBAGE = 2 << 20


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[UploadSetup]:
    """A CA, the token, and a target holding ORIGINAL."""
    setup = UploadSetup.made_in(tmp_path)
    yield setup
    setup.stop_servers()


def test_a_control_character_in_a_header_leaves_no_token(setup: UploadSetup) -> None:
    server = setup.serve()
    bad = f"POST /v1beta1/upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\x01\r\n\r\n"
    answer = send_raw(server, bad.encode())
    assert answer.split(b"\r\n")[0].split()[1] == b"400"
    assert TOKEN.encode() not in answer
    # behind a good request on the connection, parsed at once with it
    good = f"GET /upload/{TOKEN} HTTP/1.1\r\nHost: x\r\n\r\n"
    send_raw(server, good.encode() + bad.encode())
    log = server.log.read_text()
    assert TOKEN not in log and "Traceback" not in log
    assert max(len(line) for line in log.splitlines()) <= LINE_MAX


def test_large_garbage_leaves_short_lines_and_is_not_echoed(setup: UploadSetup) -> None:
    server = setup.serve()
    before = server.log.stat().st_size
    garbage = [
        b"POST /" + b"A" * GARBAGE + b" HTTP/1.1\r\n\r\n",
        f"POST /v1beta1/upload HTTP/1.1\r\nX-Junk: {'B' * GARBAGE}\r\n\r\n".encode(),
        bytes(range(256)) * (GARBAGE // 256),
    ]
    for raw in garbage:
        answer = send_raw(server, raw)
        assert b"A" * 16 not in answer and b"B" * 16 not in answer
        assert bytes(range(16, 32)) not in answer and len(answer) < 1024
    grown = server.log.read_text()[before:]
    assert len(grown) <= len(garbage) * LINE_MAX, grown[:2000]


def test_a_token_in_the_query_or_a_wrong_path_is_not_logged(setup: UploadSetup) -> None:
    server = setup.serve()
    asked = [
        (f"/v1beta1/upload?token={TOKEN}", ["-X", "HEAD", "-I", *bearer()]),
        (f"/v1beta1/upload-async?Authorization=Bearer%20{TOKEN}", ["-I"]),
        (f"/upload/{TOKEN}x", []),
        (f"/v1beta1/{TOKEN}", []),
        (f"/upload/{TOKEN}", []),
    ]
    codes = [curl(server, path, *args)[0] for path, args in asked]
    assert codes == [200, 200, 404, 404, 200]
    log = server.log.read_text()
    assert TOKEN not in log
    assert "/v1beta1/upload" in log  # the requests are logged, only without the token
