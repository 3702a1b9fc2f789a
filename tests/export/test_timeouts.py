"""Server-side limits: slow headers are closed, idle keep-alive closes, a slow body is never cut,
and at the TTL new requests get 410 while a transfer in flight finishes."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import time
from pathlib import Path

from export_support import TOKEN, MiB, curl, make_disk

AUTH = f"x-kubevirt-export-token: {TOKEN}"
SLOW_CLIENTS = 200


async def _slow_header_client(port: int, ctx: ssl.SSLContext, request: bytes) -> tuple[bool, bytes]:
    """Send `request` a byte per second; (closed before the last byte, what came back)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    reply = asyncio.ensure_future(reader.read())
    try:
        for i in range(len(request)):
            done, _ = await asyncio.wait([reply], timeout=1.0)
            if done:
                return True, reply.result()
            writer.write(request[i : i + 1])
            await writer.drain()
        return False, await asyncio.wait_for(reply, 10)
    except (ConnectionError, ssl.SSLError):
        return True, b""
    finally:
        writer.close()


def test_slow_headers_are_closed_and_do_not_block_others(export_factory, disk: Path) -> None:
    r = export_factory({"disk": disk}, "--header-timeout", "2s")
    ctx = ssl.create_default_context(cafile=str(r.ca))
    request = f"GET /volumes/disk/extents HTTP/1.1\r\nHost: x\r\n{AUTH}\r\n\r\n".encode()

    async def main() -> tuple[list[tuple[bool, bytes]], subprocess.CompletedProcess[bytes]]:
        clients = [_slow_header_client(r.port, ctx, request) for _ in range(SLOW_CLIENTS)]
        slow = asyncio.gather(*clients)
        await asyncio.sleep(0.5)
        normal = await asyncio.to_thread(
            curl,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            AUTH,
            r.url + "/volumes/disk/disk.img",
            ca=r.ca,
        )
        return await slow, normal

    results, normal = asyncio.run(main())
    assert normal.stdout == b"200"
    assert all(closed for closed, _ in results), "a slow-header connection was never closed"
    assert all(reply == b"" for _, reply in results)


def test_idle_keep_alive_is_closed(export_factory, disk: Path) -> None:
    r = export_factory({"disk": disk}, "--idle-timeout", "1s")
    ctx = ssl.create_default_context(cafile=str(r.ca))

    async def main() -> tuple[bytes, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", r.port, ssl=ctx)
        writer.write(b"GET /exportready HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        head = await reader.readuntil(b"ready\n")
        rest = await asyncio.wait_for(reader.read(), 20)
        writer.close()
        return head, rest

    head, rest = asyncio.run(main())
    assert head.startswith(b"HTTP/1.1 200")
    assert rest == b""


def test_slow_download_longer_than_the_timeouts_is_not_cut(export_factory, tmp_path: Path) -> None:
    disk = make_disk(tmp_path / "small.img", 10 * MiB, [(0, 10 * MiB)])
    r = export_factory({"disk": disk}, "--idle-timeout", "2s", "--header-timeout", "2s")
    out = tmp_path / "out.img"
    p = curl(
        "-H", AUTH, "--limit-rate", "2M", "-o", str(out), r.url + "/volumes/disk/disk.img", ca=r.ca
    )
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == disk.read_bytes()


def test_ttl_refuses_new_requests_and_lets_transfers_finish(
    export_factory, disk: Path, tmp_path: Path
) -> None:
    r = export_factory({"disk": disk}, "--ttl", "3s", "--grace", "60s")
    out = tmp_path / "out.img"
    slow = subprocess.Popen(
        [
            "curl",
            "-sS",
            "--cacert",
            str(r.ca),
            "-H",
            AUTH,
            "--limit-rate",
            "4M",
            "-o",
            str(out),
            r.url + "/volumes/disk/disk.img",
        ]
    )
    codes = []
    while slow.poll() is None:
        p = curl(
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            AUTH,
            r.url + "/volumes/disk/extents",
            ca=r.ca,
        )
        codes.append(p.stdout)
        if p.stdout == b"410":
            break
        time.sleep(0.2)
    assert codes[-1] == b"410", "the TTL passed while the download ran, yet no 410"
    assert slow.wait(60) == 0
    assert out.read_bytes() == disk.read_bytes()
    assert r.proc.wait(30) == 0


def test_later_requests_are_timed_from_their_first_byte(export_factory, disk: Path) -> None:
    r = export_factory({"disk": disk}, "--header-timeout", "2s", "--idle-timeout", "120s")
    ctx = ssl.create_default_context(cafile=str(r.ca))
    ready = b"GET /exportready HTTP/1.1\r\nHost: x\r\n\r\n"

    async def main() -> tuple[bytes, bytes, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", r.port, ssl=ctx)
        writer.write(ready)
        first = await reader.readuntil(b"ready\n")
        await asyncio.sleep(3)
        writer.write(ready)
        second = await asyncio.wait_for(reader.readuntil(b"ready\n"), 10)
        for i in range(len(ready)):
            writer.write(ready[i : i + 1])
            await asyncio.sleep(1)
            if reader.at_eof():
                break
        rest = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        return first, second, rest

    first, second, rest = asyncio.run(main())
    assert first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200")
    assert rest == b"", "a slow second request on a kept-alive connection was served"
