"""The export server's paths over the Volume interface, behind the token, until its TTL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from aiohttp import web

from diskferry.base.errors import DiskferryError
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.volume import Volume
from diskferry.export.archive import listing, resolve_inside, tar_gz_stream
from diskferry.export.blocks import BlockPool, blocks
from diskferry.export.compress import gzip_stream, zstd_stream
from diskferry.export.extent_pages import PAGE_SIZE, extent_page
from diskferry.export.job import ExportJob
from diskferry.export.manifests import Document, Side, manifest_body, pointed, secret_manifest
from diskferry.export.ranges import UnsatisfiableRange, parse_range
from diskferry.export.token import TOKEN_HEADER, TokenFile
from diskferry.export.volumes import ExportedVolume
from diskferry.serving.sendfile import FileSender

log = logging.getLogger(__name__)

WRITE_SLICE = 256 << 10
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Activity = Callable[[int, int], None]
"""Told the requests served (the token accepted) so far and those under way, on each change."""


class HttpProblem(Exception):
    """A request that is answered with an error status and a JSON reason."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def problem_response(status: int, reason: str, message: str) -> web.Response:
    """The JSON error body every refusal carries."""
    return web.json_response({"reason": reason, "message": message}, status=status)


def _router_problem(request: web.Request, error: web.HTTPError) -> web.Response:
    """The router's refusal (no such path, method not allowed) as a JSON error."""
    resp = problem_response(
        error.status,
        error.reason.replace(" ", ""),
        f"{request.method} {request.path}: {error.reason}",
    )
    if "Allow" in error.headers:
        resp.headers["Allow"] = error.headers["Allow"]
    return resp


def _client_gone(request: web.Request) -> bool:
    """Whether the client closed its connection."""
    return request.transport is None or request.transport.is_closing()


class _SentFileResponse(web.StreamResponse):
    """A response whose body went out by sendfile, past aiohttp's writer: the access log
    counts it too."""

    sent = 0

    def count(self, n: int) -> None:
        """Count `n` more bytes sent."""
        self.sent += n

    @property
    def body_length(self) -> int:
        return super().body_length + self.sent


def _int_query(request: web.Request, name: str, default: int | None) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise HttpProblem(400, "BadQuery", f"{name}={raw!r} is not a non-negative integer")
    return value


class ExportServer:
    """One export: named volumes, a manifest, a token file; 410 for everything once expired.

    `sides` are the ways in (internal, external) that the manifest's disks are pointed at. A
    client that takes no byte of a body for `idle` seconds loses its connection. `activity` is
    told each time a request the token lets in begins and ends.
    """

    def __init__(
        self,
        name: str,
        volumes: list[ExportedVolume],
        token: TokenFile,
        manifest: list[Document] | None = None,
        idle: float = 60.0,
        sides: dict[str, Side] | None = None,
        activity: Activity | None = None,
    ) -> None:
        self.name = name
        self.volumes = {v.name: v for v in volumes}
        self.token = token
        self.manifest = manifest
        self.sides = sides or {}
        self.expired = False
        self.pool = BlockPool()
        self.sender = FileSender(idle=idle)
        self.in_flight = 0
        self.served = 0
        self.serving = 0
        self.activity = activity or (lambda served, in_flight: None)
        self._quiet = asyncio.Event()
        self._quiet.set()

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(middlewares=[self._gate])
        r = app.router
        r.add_get(ExportJob.READY_PATH, self._ready)
        r.add_get("/volumes/{vol}/disk.img", self._raw)
        r.add_get("/volumes/{vol}/disk.img.gz", self._gzip)
        r.add_get("/volumes/{vol}/disk.img.zst", self._zstd)
        r.add_get("/volumes/{vol}/disk.tar.gz", self._tar)
        r.add_get("/volumes/{vol}/dir/{path:.*}", self._dir)
        r.add_get("/volumes/{vol}/extents", self._extents, allow_head=False)
        r.add_get("/exports/{vol}/map", self._map, allow_head=False)
        r.add_get("/exports/{vol}/data", self._data)
        r.add_get("/{kind:internal|external}/manifests/{what:all|secret}", self._manifests)
        return app

    def close(self) -> None:
        """Wait for the threads that send files; after the app has stopped."""
        self.sender.close()

    def expire(self) -> None:
        """Refuse every new request with 410 from now on."""
        self.expired = True

    async def drained(self, grace: float) -> bool:
        """Wait up to `grace` seconds for requests in flight to finish; whether they did."""
        try:
            async with asyncio.timeout(grace):
                await self._quiet.wait()
        except TimeoutError:
            return False
        return True

    @web.middleware
    async def _gate(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        if self.expired:
            return problem_response(410, "ExportExpired", "this export has expired")
        if request.path != ExportJob.READY_PATH:
            offered = request.headers.get(TOKEN_HEADER) or request.query.get(TOKEN_HEADER)
            try:
                accepted = self.token.accepts(offered)
            except DiskferryError as e:
                log.warning("%s", e)
                accepted = False
            if not accepted:
                if offered is None:
                    return problem_response(
                        401,
                        "MissingToken",
                        f"give the export token in the {TOKEN_HEADER} header or query",
                    )
                return problem_response(401, "BadToken", "the token given is not this export's")
        counted = request.path != ExportJob.READY_PATH
        self.in_flight += 1
        self._quiet.clear()
        if counted:
            self.served += 1
            self.serving += 1
            self.activity(self.served, self.serving)
        try:
            return await handler(request)
        except HttpProblem as p:
            return problem_response(p.status, p.reason, str(p))
        except web.HTTPError as e:
            return _router_problem(request, e)
        finally:
            self.in_flight -= 1
            if counted:
                self.serving -= 1
                self.activity(self.served, self.serving)
            if self.in_flight == 0:
                self._quiet.set()

    def _volume(self, request: web.Request) -> ExportedVolume:
        name = request.match_info["vol"]
        vol = self.volumes.get(name)
        if vol is None:
            raise HttpProblem(404, "UnknownVolume", f"this export has no volume {name!r}")
        return vol

    def _disk(self, request: web.Request) -> Volume:
        vol = self._volume(request)
        if vol.disk is None:
            raise HttpProblem(404, "NotADisk", f"volume {vol.name!r} holds files, not a disk")
        return vol.disk

    def _directory(self, request: web.Request) -> Path:
        vol = self._volume(request)
        if vol.directory is None:
            raise HttpProblem(404, "NotADirectory", f"volume {vol.name!r} is a disk, not files")
        return vol.directory

    async def _stream(
        self,
        request: web.Request,
        body: AsyncIterator[bytes | bytearray | memoryview],
        *,
        status: int = 200,
        length: int | None = None,
        content_type: str = "application/octet-stream",
        headers: dict[str, str] | None = None,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(status=status, headers=headers)
        resp.content_type = content_type
        if length is not None:
            resp.content_length = length
        async with contextlib.aclosing(body):  # type: ignore[type-var]
            try:
                await resp.prepare(request)
                if request.method != "HEAD":
                    async for block in body:
                        # Slices keep what waits in each client's transport small. A
                        # transport may hold what it was given, unsent, after the write
                        # returns (uvloop's does), while a block of the pool is read over
                        # once the next is asked for: each slice goes as a copy.
                        for at in range(0, len(block), WRITE_SLICE):
                            await resp.write(bytes(block[at : at + WRITE_SLICE]))
                await resp.write_eof()
            except ConnectionError:
                # A client that went away is the access log's line (bytes sent short of the
                # length); anything else is the server's fault.
                if not _client_gone(request):
                    raise
        return resp

    async def _serve_volume(self, request: web.Request, volume: Volume) -> web.StreamResponse:
        size = volume.size
        headers = {"Accept-Ranges": "bytes"}
        try:
            rng = parse_range(request.headers.get("Range"), size)
        except UnsatisfiableRange:
            headers["Content-Range"] = f"bytes */{size}"
            return web.Response(status=416, headers=headers)
        start, end = rng or (0, size)
        status = 206 if rng else 200
        if rng is not None:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        if (
            request.method == "GET"
            and isinstance(volume, FileVolume)
            and FileSender.plain(request.transport)
            and self.sender.reserve()
        ):
            try:
                return await self._send_file(request, volume, start, end - start, status, headers)
            finally:
                self.sender.release()
        return await self._stream(
            request,
            blocks(volume, start, end - start, self.pool),
            status=status,
            length=end - start,
            headers=headers,
        )

    async def _send_file(
        self,
        request: web.Request,
        volume: FileVolume,
        offset: int,
        count: int,
        status: int,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        """The range by sendfile, on a plain connection (a proxy's, over the Unix socket)."""
        resp = _SentFileResponse(status=status, headers=headers)
        resp.content_length = count
        try:
            await resp.prepare(request)
            if request.transport is None:
                raise ConnectionResetError("the client went away")
            await self.sender.send(request.transport, volume.fileno(), offset, count, resp.count)
            await resp.write_eof()
        except (ConnectionError, TimeoutError):
            # as in _stream: the access log's line shows the bytes short of the length
            if request.transport is not None:
                request.transport.close()
        return resp

    async def _ready(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="ready\n")

    async def _raw(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_volume(request, self._disk(request))

    async def _gzip(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(
            request, gzip_stream(self._disk(request)), content_type="application/gzip"
        )

    async def _zstd(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(
            request, zstd_stream(self._disk(request), self.pool), content_type="application/zstd"
        )

    async def _tar(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(
            request, tar_gz_stream(self._directory(request)), content_type="application/gzip"
        )

    async def _dir(self, request: web.Request) -> web.StreamResponse:
        root = self._directory(request)
        relative = request.match_info["path"]
        target = resolve_inside(root, relative)
        if target is None:
            raise HttpProblem(404, "NoSuchFile", f"no file {relative!r} in volume")
        if target.is_dir():
            if relative and not relative.endswith("/"):
                raise web.HTTPMovedPermanently(location=request.path + "/")
            return web.Response(text=listing(target), content_type="text/html")
        if not target.is_file():
            # a pipe would block the server on open, a device is not the volume's to give
            raise HttpProblem(404, "NoSuchFile", f"{relative!r} in volume is not a regular file")
        try:
            volume = FileVolume(target)
        except DiskferryError as e:
            raise HttpProblem(404, "NoSuchFile", str(e)) from e
        with volume:
            return await self._serve_volume(request, volume)

    async def _page(self, request: web.Request, context: str) -> web.StreamResponse:
        disk = self._disk(request)
        offset = _int_query(request, "offset", 0) or 0
        length = _int_query(request, "length", None)
        page_size = _int_query(request, "page_size", PAGE_SIZE) or PAGE_SIZE
        if context not in ("zero", "dirty"):
            raise HttpProblem(400, "BadQuery", f"context={context!r} is not zero or dirty")
        loop = asyncio.get_running_loop()
        page = await loop.run_in_executor(
            None,
            lambda: extent_page(disk, context, offset, length, page_size),  # type: ignore[arg-type]
        )
        return web.json_response(page)

    async def _extents(self, request: web.Request) -> web.StreamResponse:
        return await self._page(request, "zero")

    async def _map(self, request: web.Request) -> web.StreamResponse:
        default = "zero" if self._volume(request).bitmap is None else "dirty"
        return await self._page(request, request.query.get("context", default))

    async def _data(self, request: web.Request) -> web.StreamResponse:
        disk = self._disk(request)
        offset = _int_query(request, "offset", 0) or 0
        length = _int_query(request, "length", None)
        if length is None:
            length = max(0, disk.size - offset)
        if offset + length > disk.size:
            raise HttpProblem(
                416, "OutOfRange", f"offset+length {offset + length} is past the end {disk.size}"
            )
        return await self._stream(request, blocks(disk, offset, length, self.pool), length=length)

    async def _manifests(self, request: web.Request) -> web.StreamResponse:
        token = self.token.read()
        if request.match_info["what"] == "secret":
            documents = [secret_manifest(self.name, token)]
        elif self.manifest is None:
            raise HttpProblem(404, "NoManifest", "this export was started without a manifest")
        else:
            side = self.sides.get(request.match_info["kind"])
            documents = self.manifest if side is None else pointed(self.manifest, side, token)
        text, content_type = manifest_body(documents, request.headers.get("Accept"))
        return web.Response(text=text, content_type=content_type)
