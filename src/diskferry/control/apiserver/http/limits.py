"""What one client may ask of the API at once, as kube-apiserver bounds it: a body of 3 MiB,
counted while it is read, and a few requests that change objects in flight.

A body declared longer is refused before a byte of it is read; one sent in chunks, or longer
than it said, is cut where it passes the limit. Nothing past the limit is buffered: the
server reads a body only as fast as the handler takes it. A request that changes objects
may hold its body parsed, copied and validated (some 30 times its size): beyond
MAX_MUTATING_IN_FLIGHT of them, one is refused with 429 and Retry-After (kube-apiserver's
--max-mutating-requests-inflight), and the client tries again.

A body must come in time, as nginx's client_body_timeout wants it: each part within
`body_read_seconds` of the one before, the whole within `body_seconds`; a client slower than
that is answered 408 and its connection closed, so that it holds no slot for long.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from diskferry.control.errors import (
    ApiError,
    RequestEntityTooLargeError,
    RequestTimeoutError,
    TooManyRequestsError,
)

MAX_BODY_BYTES = 3 << 20
MAX_MUTATING_IN_FLIGHT = 4
MUTATING = ("POST", "PUT", "PATCH", "DELETE")


@dataclass(frozen=True)
class Limits:
    """What clients may hold of the daemon, as kube-apiserver and nginx bound it: open
    connections in all (beyond, a request is answered 503) and from one address (beyond, a
    connection is closed at once); the seconds a connection may take to send a request's
    headers (nginx's client_header_timeout), a body, and each part of a body."""

    connections: int = 1024
    connections_per_client: int = 128
    header_seconds: float = 60.0
    body_seconds: float = 60.0
    body_read_seconds: float = 20.0


DEFAULT_LIMITS = Limits()


def answer(error: ApiError) -> JSONResponse:
    """The Status answer of `error`, with Retry-After when it says when to try again."""
    response = JSONResponse(error.to_status(), status_code=error.code)
    if isinstance(error, TooManyRequestsError):
        response.headers["Retry-After"] = str(error.retry_after)
    if isinstance(error, RequestTimeoutError):
        response.headers["Connection"] = "close"  # the rest of the body is not waited for
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
    and reading more than MAX_BODY_BYTES of a body raises the 413, reading it slower than
    `limits` say the 408 (each answered as a Status by the app's handler); after the answer
    started, it ends the body as a client gone would."""

    def __init__(self, app: ASGIApp, limits: Limits = DEFAULT_LIMITS) -> None:
        self.app = app
        self.limits = limits
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

    async def _in_time(self, receive: Receive, deadline: float) -> Message:
        """The next part of a body, if it comes within `body_read_seconds` and before
        `deadline`; RequestTimeoutError otherwise."""
        left = deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(receive(), min(left, self.limits.body_read_seconds))
        except TimeoutError:
            raise RequestTimeoutError("the request's body did not come in time") from None

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = _declared(scope)
        read = 0
        answered = complete = False
        deadline = asyncio.get_running_loop().time() + self.limits.body_seconds

        async def counted() -> Message:
            nonlocal read, complete
            if declared > MAX_BODY_BYTES and not answered:
                raise too_large()
            if complete or answered:  # only a disconnect is waited for now, for as long
                message = await receive()
            else:
                message = await self._in_time(receive, deadline)
            complete = not message.get("more_body", False)
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
