"""The proxy's bounds keep one export's trouble to that export: a server that takes
connections and never answers holds at most its own share of the pool, every request to it
ends (504 once its headers are late, 503 with Retry-After when its share is taken), and
another export answers meanwhile; a pool that is full answers 503 too, never waits on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from export_support import TOKEN, write_routes

from diskferry.export.backends import PoolSettings
from diskferry.export.proxy import ExportProxy
from diskferry.export.routes import RoutesFile

PREFIX = "/api/export.kubevirt.io/v1/namespaces/default/virtualmachineexports"
# the pool's bounds; a request waits for a slot far less than a hung server is given
POOL = PoolSettings(limit=4, per_backend=2, headers=6.0, queue=1.0)
HUNG_REQUESTS = 3 * POOL.limit
# how long the test waits for anything at all before it calls the proxy stuck
STUCK = 120.0


class Hung:
    """A server on a Unix socket that accepts and never answers."""

    def __init__(self, count: int) -> None:
        self.accepted: list[asyncio.StreamWriter] = []
        self.filled = asyncio.Event()
        self._count = count

    async def take(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted.append(writer)
        if len(self.accepted) >= self._count:
            self.filled.set()


async def _healthy(path: Path) -> web.AppRunner:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(text="healthy\n")

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.UnixSite(runner, str(path)).start()
    return runner


async def _proxy(routes: Path) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(ExportProxy(RoutesFile(routes), POOL).app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}{PREFIX}"


async def _get(client: aiohttp.ClientSession, url: str) -> tuple[int, dict, str | None]:
    async with client.get(url, headers={"x-kubevirt-export-token": TOKEN}) as resp:
        body = await resp.read()
        reason = json.loads(body)["reason"] if resp.status >= 400 else None
        return resp.status, dict(resp.headers), reason


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """A folder for sockets short enough for sun_path."""
    short = Path("/tmp") / f"dfb{tmp_path.name[-12:]}"
    short.mkdir(mode=0o700)
    yield short
    for left in short.iterdir():
        left.unlink()
    short.rmdir()


def _routes(path: Path, sockets: dict[str, Path]) -> Path:
    routes = [
        {"namespace": "default", "name": n, "url": "https://127.0.0.1:9", "unixSocket": str(s)}
        for n, s in sockets.items()
    ]
    write_routes(path, routes)
    return path


def test_a_hung_export_keeps_to_its_share_and_another_answers_meanwhile(
    folder: Path, tmp_path: Path
) -> None:
    async def main() -> None:
        hung = Hung(POOL.per_backend)
        hung_server = await asyncio.start_unix_server(hung.take, str(folder / "hung.sock"))
        healthy = await _healthy(folder / "healthy.sock")
        sockets = {"hung": folder / "hung.sock", "healthy": folder / "healthy.sock"}
        proxy, base = await _proxy(_routes(tmp_path / "routes.yaml", sockets))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
            url = f"{base}/hung/volumes/disk/disk.img"
            stuck = [asyncio.create_task(_get(client, url)) for _ in range(HUNG_REQUESTS)]
            async with asyncio.timeout(STUCK):
                await hung.filled.wait()
                answer = await _get(client, f"{base}/healthy/volumes/disk/disk.img")
            assert answer[0] == 200
            assert not any(task.done() for task in stuck), "the healthy export answered late"
            async with asyncio.timeout(STUCK):
                ended = await asyncio.gather(*stuck)
        assert len(hung.accepted) == POOL.per_backend
        statuses = sorted(status for status, _, _ in ended)
        assert statuses.count(504) == POOL.per_backend
        busy = [(headers, reason) for status, headers, reason in ended if status == 503]
        assert len(busy) == HUNG_REQUESTS - POOL.per_backend
        assert all(reason == "BackendBusy" and int(h["Retry-After"]) > 0 for h, reason in busy)
        await proxy.cleanup()
        await healthy.cleanup()
        hung_server.close()
        for writer in hung.accepted:
            writer.close()

    asyncio.run(main())


def test_a_full_pool_answers_503_rather_than_waiting_on(folder: Path, tmp_path: Path) -> None:
    async def main() -> None:
        names = [f"hung{i}" for i in range(POOL.limit // POOL.per_backend)]
        hung = Hung(POOL.limit)
        servers = [
            await asyncio.start_unix_server(hung.take, str(folder / f"{n}.sock")) for n in names
        ]
        healthy = await _healthy(folder / "healthy.sock")
        sockets = {n: folder / f"{n}.sock" for n in [*names, "healthy"]}
        proxy, base = await _proxy(_routes(tmp_path / "routes.yaml", sockets))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
            stuck = [
                asyncio.create_task(_get(client, f"{base}/{n}/volumes/disk/disk.img"))
                for n in names
                for _ in range(POOL.per_backend)
            ]
            async with asyncio.timeout(STUCK):
                await hung.filled.wait()
                status, headers, reason = await _get(client, f"{base}/healthy/exportready")
            assert (status, reason) == (503, "ProxyBusy") and int(headers["Retry-After"]) > 0
            async with asyncio.timeout(STUCK):
                ended = await asyncio.gather(*stuck)
            assert {s for s, _, _ in ended} == {504}
            assert (await _get(client, f"{base}/healthy/exportready"))[0] == 200
        await proxy.cleanup()
        await healthy.cleanup()
        for server in servers:
            server.close()
        for writer in hung.accepted:
            writer.close()

    asyncio.run(main())
