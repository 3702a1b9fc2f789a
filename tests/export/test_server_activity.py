"""The export server tells how many requests it has served and how many are under way: what
a VirtualDataExport's idle timeout is counted from."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from diskferry.export.job import ExportJob
from diskferry.export.server import ExportServer
from diskferry.export.token import TOKEN_HEADER, TokenFile
from diskferry.export.volumes import open_exported

TOKEN = "activity-token"


def test_requests_served_and_in_flight_are_told(tmp_path: Path) -> None:
    disk = tmp_path / "disk.img"
    disk.write_bytes(b"x" * 65536)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    told: list[tuple[int, int]] = []

    async def run() -> None:
        server = ExportServer(
            "e",
            [open_exported("disk", str(disk))],
            TokenFile(token),
            activity=lambda served, in_flight: told.append((served, in_flight)),
        )
        async with TestServer(server.app()) as http, ClientSession() as session:
            async with session.get(http.make_url(ExportJob.READY_PATH)) as ready:
                assert ready.status == 200
            async with session.get(http.make_url("/volumes/disk/disk.img")) as refused:
                assert refused.status == 401
            assert told == []
            url = http.make_url("/volumes/disk/disk.img")
            async with session.get(url, headers={TOKEN_HEADER: TOKEN}) as got:
                assert await got.read() == disk.read_bytes()
        server.close()

    asyncio.run(run())
    assert told == [(1, 1), (1, 0)]
