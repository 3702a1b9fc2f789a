"""The upload server's app: CDI's upload paths and Deckhouse's `/upload/<secret>`, one upload.

An upload streams through the import pipeline into a prime copy of the target, swapped in
only when the import succeeds. One upload runs at a time (503 to another); once one has
succeeded the server takes no more (409). A refused or broken upload leaves the target as
it was and the server ready for the next.

Beyond CDI and Deckhouse, the sync and async raw paths and `/upload/<secret>` take a resumable
upload (HEAD for the offset, PATCH with Content-Range to continue; see `upload_resume`) when
the server has a partial file.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from enum import Enum

import aiohttp
from aiohttp import BodyPartReader, web

from diskferry.base.errors import DiskferryError
from diskferry.disk.checksums import ChecksumError
from diskferry.disk.decompress import Readable
from diskferry.importer.engine import ImageRefusedError
from diskferry.importer.job import ImportResult
from diskferry.importer.upload_body import UploadBody, UploadBrokenError
from diskferry.importer.upload_job import UploadJob
from diskferry.importer.upload_resume import (
    LENGTH_HEADER,
    OFFSET_HEADER,
    PartialFile,
    ResumeConflictError,
    parse_content_range,
)
from diskferry.importer.upload_token import UploadToken
from diskferry.serving.accesslog import REDACTED, AccessLogger

log = logging.getLogger(__name__)

CDI_VERSIONS = ("v1alpha1", "v1beta1")
FORM_FIELD = "file"
_BEARER = "bearer "
_IN = "the upload is in; the import goes on in the background"
# refusals that are the upload's fault, not the server's
_CLIENT_REASONS = {
    ImageRefusedError.reason,
    UploadBrokenError.reason,
    ChecksumError.reason,
    "SizeTooSmall",
    "TargetTooSmall",
}

# runs one import of a body of known length (or None) in a worker thread
Importer = Callable[[Readable, int | None], ImportResult]


class State(Enum):
    """Where the server is in its one upload."""

    READY = "ready"
    UPLOADING = "uploading"
    DONE = "done"


class UploadAccessLogger(AccessLogger):
    """The access log with the secret of `/upload/<secret>` hidden."""

    logger_name = "diskferry.upload.access"

    def shown_path(self, request: web.BaseRequest) -> str:
        """The path with an upload secret replaced."""
        if request.path.startswith(UploadJob.UPLOAD_PREFIX):
            return f"{UploadJob.UPLOAD_PREFIX}{REDACTED}"
        return request.rel_url.raw_path


class UploadServer:
    """The routes, the state of the one upload, and what it imported."""

    def __init__(
        self,
        token: UploadToken,
        importer: Importer,
        stall_timeout: float = 60.0,
        partial: PartialFile | None = None,
        receiving: Callable[[bool], None] = lambda _: None,
    ) -> None:
        self.token = token
        self.importer = importer
        self.stall_timeout = stall_timeout
        self.partial = partial
        self.receiving = receiving
        self.state = State.READY
        self.result: ImportResult | None = None
        self.done = threading.Event()

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(client_max_size=0)
        for version in CDI_VERSIONS:
            base = f"/{version}"
            app.router.add_post(f"{base}/upload", self._cdi(form=False, wait=True))
            app.router.add_post(f"{base}/upload-async", self._cdi(form=False, wait=False))
            app.router.add_post(f"{base}/upload-form", self._cdi(form=True, wait=True))
            app.router.add_post(f"{base}/upload-form-async", self._cdi(form=True, wait=False))
            app.router.add_route("HEAD", f"{base}/upload", self._cdi_offset)
            app.router.add_route("HEAD", f"{base}/upload-async", self._probe)
            app.router.add_route("HEAD", f"{base}/upload-form-async", self._probe)
            app.router.add_patch(f"{base}/upload", self._cdi_resume(wait=True))
            app.router.add_patch(f"{base}/upload-async", self._cdi_resume(wait=False))
        secret = UploadJob.UPLOAD_PREFIX + "{secret}"
        app.router.add_put(secret, self._deckhouse)
        app.router.add_post(secret, self._deckhouse)
        app.router.add_get(secret, self._deckhouse_ready, allow_head=False)
        app.router.add_route("HEAD", secret, self._deckhouse_offset)
        app.router.add_patch(secret, self._deckhouse_resume)
        return app

    async def _probe(self, request: web.Request) -> web.Response:
        """CDI's probe of an async path, 200 as ever; with a good token and no upload under
        way, the resumable offset too."""
        if self._refused(request) is None and self._busy() is None:
            return self._offset()
        return web.Response()

    def _refused(self, request: web.Request) -> web.Response | None:
        """The answer to a request of CDI's paths without a good bearer token."""
        header = request.headers.get("Authorization")
        if header is None or not header.lower().startswith(_BEARER):
            return _text(400, "give the token as 'Authorization: Bearer <token>'")
        offered = header[len(_BEARER) :].strip()
        if not offered:
            return _text(400, "give the token as 'Authorization: Bearer <token>'")
        if not self.token.accepts(offered):
            return _text(401, "the token is wrong or has expired")
        return None

    def _cdi(self, *, form: bool, wait: bool):
        async def handle(request: web.Request) -> web.StreamResponse:
            return self._refused(request) or await self._upload(request, form=form, wait=wait)

        return handle

    async def _cdi_offset(self, request: web.Request) -> web.Response:
        return self._refused(request) or self._offset()

    def _cdi_resume(self, *, wait: bool):
        async def handle(request: web.Request) -> web.StreamResponse:
            return self._refused(request) or await self._resume(request, wait=wait)

        return handle

    def _secret_matches(self, request: web.Request) -> bool:
        return self.token.accepts(request.match_info["secret"])

    async def _deckhouse(self, request: web.Request) -> web.StreamResponse:
        if not self._secret_matches(request):
            raise web.HTTPNotFound()
        return await self._upload(request, form=False, wait=True)

    async def _deckhouse_offset(self, request: web.Request) -> web.Response:
        if not self._secret_matches(request):
            raise web.HTTPNotFound()
        return self._offset()

    async def _deckhouse_resume(self, request: web.Request) -> web.StreamResponse:
        if not self._secret_matches(request):
            raise web.HTTPNotFound()
        return await self._resume(request, wait=True)

    def _offset(self) -> web.Response:
        """The answer to a HEAD: the resumable offset, or why no upload is taken."""
        if self.partial is None:
            return web.Response()
        busy = self._busy()
        if busy is not None:
            return busy
        headers = {OFFSET_HEADER: str(self.partial.offset)}
        if self.partial.total is not None:
            headers[LENGTH_HEADER] = str(self.partial.total)
        return web.Response(headers=headers)

    async def _resume(self, request: web.Request, *, wait: bool) -> web.StreamResponse:
        """Take a PATCH's range into the partial file; import it once the last byte is in."""
        partial = self.partial
        if partial is None:
            return _text(405, "this server takes no resumable uploads")
        busy = self._busy()
        if busy is not None:
            return busy
        try:
            span = parse_content_range(request.headers.get("Content-Range"))
        except ValueError as e:
            return _text(400, str(e))
        if request.content_length != span.length:
            return _text(400, f"Content-Length must be {span.length}, the Content-Range's length")
        try:
            partial.begin(span)
        except ResumeConflictError as e:
            return _text(409, str(e), {OFFSET_HEADER: str(partial.offset)})
        self.state = State.UPLOADING
        self.receiving(True)
        try:
            await self._receive(request, partial, span.length)
        except (OSError, TimeoutError, aiohttp.ClientError) as e:
            why = "nothing came in time" if isinstance(e, TimeoutError) else type(e).__name__
            log.warning("resumable upload broke at byte %d, kept: %s", partial.offset, why)
            return _text(400, f"the upload broke at byte {partial.offset}: {why}")
        finally:
            self.state = State.READY
            self.receiving(False)
        if partial.offset <= span.end:
            return _text(400, f"the range ended early, at byte {partial.offset}")
        if not partial.complete:
            return web.Response(status=204, headers={OFFSET_HEADER: str(partial.offset)})
        self.state = State.UPLOADING
        body = partial.reader()

        def imported(_: asyncio.Future[ImportResult]) -> None:
            body.close()
            partial.discard()

        return await self._import(body, span.total, None, wait, imported)

    async def _deckhouse_ready(self, request: web.Request) -> web.StreamResponse:
        if not self._secret_matches(request):
            raise web.HTTPNotFound()
        return self._busy() or _text(200, "ready for an upload")

    def _busy(self) -> web.Response | None:
        if self.state is State.UPLOADING:
            return _text(503, "an upload is already running; try again once it has ended")
        if self.state is State.DONE:
            return _text(409, "the upload is complete; this server takes no more")
        return None

    async def _upload(self, request: web.Request, *, form: bool, wait: bool) -> web.StreamResponse:
        busy = self._busy()
        if busy is not None:
            return busy
        self.state = State.UPLOADING
        try:
            body = await self._body(request, form)
        except BaseException:
            self.state = State.READY
            raise
        size = None if form else request.content_length
        return await self._import(body, size, body.complete, wait)

    async def _import(
        self,
        body: Readable,
        size: int | None,
        complete: asyncio.Event | None,
        wait: bool,
        ended: Callable[[asyncio.Future[ImportResult]], None] | None = None,
    ) -> web.StreamResponse:
        """Import `body` in a thread; answer once done, or once `complete` (all of the body
        is in: None when it is already) when not `wait`."""
        loop = asyncio.get_running_loop()
        task = loop.run_in_executor(None, self.importer, body, size)
        if ended is not None:
            task.add_done_callback(ended)
        task.add_done_callback(self._finished)
        if not wait:
            if complete is None:
                return _text(200, _IN)
            waiting = asyncio.ensure_future(complete.wait())
            finished, _ = await asyncio.wait([task, waiting], return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if task not in finished:
                return _text(200, _IN)
        try:
            await asyncio.shield(task)
        except DiskferryError as e:
            status = 400 if e.reason in _CLIENT_REASONS else 500
            return _text(status, f"the upload failed: {e.message}")
        except Exception as e:
            return _text(500, f"the upload failed: {type(e).__name__}")
        return _text(200, "the upload is complete")

    async def _receive(self, request: web.Request, partial: PartialFile, length: int) -> None:
        """Append up to `length` bytes of the body to `partial`, which keeps them however the
        body ends."""
        loop = asyncio.get_running_loop()
        try:
            while length:
                read = request.content.read(min(length, 1 << 20))
                data = await asyncio.wait_for(read, self.stall_timeout)
                if not data:
                    return
                length -= len(data)
                await loop.run_in_executor(None, partial.write, data)
        finally:
            await loop.run_in_executor(None, partial.end)

    async def _body(self, request: web.Request, form: bool) -> UploadBody:
        loop = asyncio.get_running_loop()
        if not form:
            return UploadBody(
                request.content.read, loop, request.content_length, self.stall_timeout
            )
        if not request.content_type.startswith("multipart/"):
            raise web.HTTPBadRequest(text=f"send a multipart form with the field '{FORM_FIELD}'\n")
        try:
            reader = await request.multipart()
        except ValueError as e:
            raise web.HTTPBadRequest(text=f"cannot read the upload form: {e}\n") from e
        while True:
            part = await reader.next()
            if part is None:
                raise web.HTTPBadRequest(text=f"the form has no field '{FORM_FIELD}'\n")
            if isinstance(part, BodyPartReader) and part.name == FORM_FIELD:
                return UploadBody(part.read_chunk, loop, None, self.stall_timeout)
            if isinstance(part, BodyPartReader):
                await part.release()

    def _finished(self, task: asyncio.Future[ImportResult]) -> None:
        error = asyncio.CancelledError() if task.cancelled() else task.exception()
        if error is None:
            self.result = task.result()
            self.state = State.DONE
            self.done.set()
            log.info("upload complete: %s", self.result.target)
            return
        self.state = State.READY
        why = error.message if isinstance(error, DiskferryError) else type(error).__name__
        log.warning("upload failed, target unchanged, ready for another: %s", why)


def _text(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=message + "\n", headers=headers)
