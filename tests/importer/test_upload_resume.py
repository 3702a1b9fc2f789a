"""Resumable uploads on diskferry's own upload server: the offset a HEAD reports, PATCH with
Content-Range going on from it, a broken upload's bytes kept beside the target (not in it), and
diskferry's client going on from where a killed connection stopped, byte-exact."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from server_support import Running
from upload_support import ORIGINAL, TOKEN, UploadSetup, bearer, curl

from diskferry.importer.upload_client import upload_file
from diskferry.importer.upload_resume import PARTIAL_SUFFIX


@pytest.fixture
def resumable(tmp_path: Path) -> Iterator[UploadSetup]:
    """A CA, the token, and a target holding ORIGINAL."""
    setup = UploadSetup.made_in(tmp_path)
    yield setup
    setup.stop_servers()


def _partial(setup: UploadSetup) -> Path:
    return setup.target.with_name(setup.target.name + PARTIAL_SUFFIX)


def _patch_then_drop(server: Running, path: str, data: bytes, sent: int, auth: bool) -> None:
    """PATCH all of `data` as its range, send only `sent` bytes of it, and go away."""
    context = ssl.create_default_context(cafile=str(server.ca))
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        token = f"Authorization: Bearer {TOKEN}\r\n" if auth else ""
        head = (
            f"PATCH {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{token}"
            f"Content-Range: bytes 0-{len(data) - 1}/{len(data)}\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        sock.sendall(head.encode() + data[:sent])


def _offset(server: Running, path: str, *auth: str) -> tuple[int, dict[str, str]]:
    """HEAD `path`: the status and the headers."""
    code, out = curl(server, path, "-I", *auth)
    headers = {}
    for line in out.splitlines()[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return code, headers


def _kept(server: Running, path: str, *auth: str, at_least: int) -> int:
    """The offset the server reports once it has `at_least` bytes and the broken PATCH ended."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        code, headers = _offset(server, path, *auth)
        offset = int(headers.get("upload-offset", -1))
        if code == 200 and offset >= at_least:
            return offset
        time.sleep(0.1)
    raise AssertionError(f"the server kept no {at_least} bytes")


def test_a_killed_upload_goes_on_from_its_offset_and_lands_byte_exact(
    resumable, images, diskferry
) -> None:
    server = resumable.serve("--json")
    image = images.get("raw")
    data = image.read_bytes()
    half = len(data) // 2
    _patch_then_drop(server, "/v1beta1/upload", data, half, auth=True)
    kept = _kept(server, "/v1beta1/upload", *bearer(), at_least=1)
    assert 0 < kept <= half
    partial = _partial(resumable)
    assert partial.read_bytes() == data[:kept]
    assert resumable.target.read_bytes() == ORIGINAL
    # a mark in the kept part: a client that went on from the offset never overwrites it
    with partial.open("r+b") as f:
        f.write(b"\x5a")
    done = diskferry(
        "upload", image, server.url, "--token-file", resumable.token_file, "--ca-bundle", server.ca
    )
    assert done.code == 0, done.stderr
    assert server.proc.wait(60) == 0
    assert resumable.target.read_bytes() == b"\x5a" + data[1:]
    assert not partial.exists()


def test_a_compressed_image_resumed_on_the_secret_path_is_imported(
    resumable, images, diskferry
) -> None:
    server = resumable.serve()
    image = images.get("qcow2", "gzip")
    data = image.read_bytes()
    path = f"/upload/{TOKEN}"
    _patch_then_drop(server, path, data, len(data) // 3, auth=False)
    _kept(server, path, at_least=1)
    assert resumable.target.read_bytes() == ORIGINAL
    done = diskferry("upload", image, f"{server.url}{path}", "--ca-bundle", server.ca, "--json")
    assert done.code == 0, done.stderr
    assert server.proc.wait(60) == 0
    assert images.same(resumable.target, images.reference)
    assert not _partial(resumable).exists()
    assert TOKEN not in server.log.read_text() and TOKEN not in done.stderr


def test_the_offset_and_the_ranges_the_server_refuses(resumable, images) -> None:
    server = resumable.serve("--keep-serving")
    code, headers = _offset(server, "/v1beta1/upload", *bearer())
    assert (code, headers.get("upload-offset"), headers.get("upload-length")) == (200, "0", None)
    assert _offset(server, "/v1beta1/upload", *bearer("wrong"))[0] == 401
    assert _offset(server, "/upload/not-the-secret")[0] == 404
    # CDI's probe of an async path answers as before without a token
    code, headers = _offset(server, "/v1beta1/upload-async")
    assert code == 200 and "upload-offset" not in headers
    assert _offset(server, "/v1beta1/upload-async", *bearer())[1]["upload-offset"] == "0"
    piece = b"x" * 4096
    patch = ["-X", "PATCH", "--data-binary", "@-", *bearer()]

    def send(content_range: str | None, body: bytes = piece) -> tuple[int, str]:
        ranged = ["-H", f"Content-Range: {content_range}"] if content_range else []
        return curl_stdin(server, "/v1beta1/upload", body, *patch, *ranged)

    assert send(None)[0] == 400
    assert send("bytes 0-4095/100")[0] == 400
    assert send("bytes 0-4094/8192")[0] == 400  # the body is longer than the range
    assert send("bytes 0-4095/8192")[0] == 204
    assert _offset(server, "/v1beta1/upload", *bearer())[1]["upload-length"] == "8192"
    code, said = send("bytes 100-4195/8192")
    assert code == 409 and "continues at byte 4096" in said
    assert send("bytes 4096-8191/9000")[0] == 409
    assert resumable.target.read_bytes() == ORIGINAL
    assert _partial(resumable).read_bytes() == piece
    assert send("bytes 0-4095/4096")[0] == 200  # from 0 again: a 4 KiB raw image
    assert resumable.target.read_bytes() == piece
    assert not _partial(resumable).exists()
    assert _offset(server, "/v1beta1/upload", *bearer())[0] == 409


def curl_stdin(server: Running, path: str, body: bytes, *args: str) -> tuple[int, str]:
    """curl `path` with `args`, `body` on its stdin; the status and the answer."""
    head = ["curl", "-sS", "--cacert", str(server.ca), "-o", "-", "-w", "\n%{http_code}"]
    proc = subprocess.run(
        [*head, *args, f"{server.url}{path}"], input=body, capture_output=True, timeout=120
    )
    out, _, code = proc.stdout.decode().rpartition("\n")
    return int(code), out


def test_the_client_posts_once_to_a_server_that_keeps_no_partial_uploads(tmp_path: Path) -> None:
    got: dict[str, object] = {}

    async def upload(request: web.Request) -> web.Response:
        got["body"] = await request.read()
        got["range"] = request.headers.get("Content-Range")
        return web.Response(text="stored")

    async def head(request: web.Request) -> web.Response:
        got["head"] = True
        return web.Response()  # a HEAD that names no offset, as CDI's probe answers

    app = web.Application(client_max_size=0)
    app.router.add_post("/v1beta1/upload-async", upload)
    app.router.add_route("HEAD", "/v1beta1/upload-async", head)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        image = tmp_path / "disk.raw"
        image.write_bytes(b"\x11" * 65536)
        token = tmp_path / "token"
        token.write_text(TOKEN + "\n")
        url = f"http://127.0.0.1:{port}/v1beta1/upload-async"
        assert upload_file(str(image), url, token_file=str(token)) == "stored"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
    assert got == {"head": True, "body": b"\x11" * 65536, "range": None}


def test_a_restarted_server_still_knows_how_long_the_partial_upload_is(resumable) -> None:
    server = resumable.serve("--keep-serving")
    piece = b"y" * 4096
    patch = ["-X", "PATCH", "--data-binary", "@-", *bearer()]
    ranged = ["-H", "Content-Range: bytes 0-4095/8192"]
    assert curl_stdin(server, "/v1beta1/upload", piece, *patch, *ranged)[0] == 204
    resumable.stop_servers()
    server = resumable.serve("--keep-serving")
    code, headers = _offset(server, "/v1beta1/upload", *bearer())
    assert (code, headers["upload-offset"], headers["upload-length"]) == (200, "4096", "8192")
    rest = ["-H", "Content-Range: bytes 4096-8191/9000"]
    code, said = curl_stdin(server, "/v1beta1/upload", piece, *patch, *rest)
    assert code == 409 and "8192 bytes long, not 9000" in said
