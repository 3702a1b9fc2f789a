"""What one client may ask of the API at once, as kube-apiserver bounds it: a body of 3 MiB,
counted while it is read, and a few requests that change objects in flight.

A body declared longer is refused before a byte of it is read; one sent in chunks, or longer
than it said, is cut where it passes the limit. Nothing past the limit is buffered: the
server reads a body only as fast as the handler takes it. A request that changes objects
may hold its body parsed, copied and validated (some 30 times its size): beyond
MAX_MUTATING_IN_FLIGHT of them, one is refused with 429 and Retry-After (kube-apiserver's
--max-mutating-requests-inflight), and the client tries again.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from diskferry.control.errors import ApiError, RequestEntityTooLargeError, TooManyRequestsError

MAX_BODY_BYTES = 3 << 20
MAX_MUTATING_IN_FLIGHT = 4
MUTATING = ("POST", "PUT", "PATCH", "DELETE")


def answer(error: ApiError) -> JSONResponse:
    """The Status answer of `error`, with Retry-After when it says when to try again."""
    response = JSONResponse(error.to_status(), status_code=error.code)
    if isinstance(error, TooManyRequestsError):
        response.headers["Retry-After"] = str(error.retry_after)
    return response


def too_large() -> RequestEntityTooLargeError:
    """The 413 kube-apiserver answers a body over the limit with."""
    return RequestEntityTooLargeError(f"Request entity too large: limit is {MAX_BODY_BYTES}")


def _declared(scope: Scope) -> int:
    """The Content-Length the request declares, 0 when it declares none."""
    text = Headers(scope=scope).get("content-length", "")
    return int(text) if text.isdigit() else 0


class RequestLimits:
    """ASGI middleware: at most MAX_MUTATING_IN_FLIGHT requests that change objects at once,
    and reading more than MAX_BODY_BYTES of a body raises the 413 (answered as a Status by
    the app's handler); after the answer started, it ends the body as a client gone would."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.mutating = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request within the limits."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] not in MUTATING:
            await self._serve(scope, receive, send)
            return
        if self.mutating >= MAX_MUTATING_IN_FLIGHT:
            busy = TooManyRequestsError("Too many requests, please try again later.")
            await answer(busy)(scope, receive, send)
            return
        self.mutating += 1
        try:
            await self._serve(scope, receive, send)
        finally:
            self.mutating -= 1

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = _declared(scope)
        read = 0
        answered = False

        async def counted() -> Message:
            nonlocal read
            if declared > MAX_BODY_BYTES and not answered:
                raise too_large()
            message = await receive()
            read += len(message.get("body", b""))
            if read > MAX_BODY_BYTES:
                if answered:
                    return {"type": "http.disconnect"}
                raise too_large()
            return message

        async def sending(message: Message) -> None:
            nonlocal answered
            answered = answered or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, counted, sending)
