"""Watch streams: the store's changes as newline-delimited JSON events, ended by a timeout.

Every watch sends an object's encoded text as the store keeps it, one copy shared by all of
them; only a Table is encoded per watch. Watches are bounded, per client address and in all:
one beyond is refused with 429 and Retry-After, as kube-apiserver refuses requests beyond its
limits, and the client tries again.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from diskferry.control.apiserver.store.feed import Watch, WatchEvent
from diskferry.control.errors import ApiError, TooManyRequestsError

POLL_SECONDS = 1.0
BOOKMARK_SECONDS = 30.0
DEFAULT_TIMEOUT = (1800, 3600)  # kube-apiserver's range when a client gives none
MAX_WATCHES = 128
MAX_WATCHES_PER_CLIENT = 32
RETRY_AFTER_SECONDS = 1

Table = Callable[[dict[str, Any]], dict[str, Any]]


def _line(type_: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _chunks(event: WatchEvent, table: Table | None) -> Iterable[bytes]:
    """An event's line: the object's shared text between its two ends, or its Table."""
    if table is not None:
        return (_line(event.type, table(event.object)),)
    return (b'{"type":"%s","object":' % event.type.encode(), event.document.text, b"}\n")


class _Stream(StreamingResponse):
    """A streaming answer that calls `done` once it ends, however it ends."""

    def __init__(self, content: AsyncIterator[bytes], done: Callable[[], None]) -> None:
        super().__init__(content, media_type="application/json")
        self.done = done

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream, then let the watch go."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.done()


class Watcher:
    """Streams watches; each waits for events in a thread of its own pool, not the request pool."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(MAX_WATCHES, thread_name_prefix="watch")
        self.stopping = asyncio.Event()
        self.open = 0
        self.by_client: Counter[str] = Counter()

    def stop(self) -> None:
        """End every stream at its next poll, so that the server can close."""
        self.stopping.set()

    def close(self) -> None:
        """Stop and let the waiting threads go."""
        self.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _admit(self, client: str) -> None:
        """Count one more watch of `client`; TooManyRequestsError beyond the bounds."""
        if self.open >= MAX_WATCHES:
            raise TooManyRequestsError(
                f"too many watches are open: {MAX_WATCHES} at most",
                retry_after=RETRY_AFTER_SECONDS,
            )
        if self.by_client[client] >= MAX_WATCHES_PER_CLIENT:
            raise TooManyRequestsError(
                f"too many watches are open from {client}: {MAX_WATCHES_PER_CLIENT} at most",
                retry_after=RETRY_AFTER_SECONDS,
            )
        self.open += 1
        self.by_client[client] += 1

    def _release(self, client: str) -> None:
        self.open -= 1
        self.by_client[client] -= 1
        if not self.by_client[client]:
            del self.by_client[client]

    async def _events(
        self, watch: Watch, table: Table | None, timeout: float, bookmarks: bool
    ) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        next_bookmark = loop.time() + BOOKMARK_SECONDS
        while not self.stopping.is_set() and (left := deadline - loop.time()) > 0:
            try:
                events = await loop.run_in_executor(self.pool, watch.next, min(left, POLL_SECONDS))
            except ApiError as error:
                yield _line("ERROR", error.to_status())
                return
            for event in events:
                if event.type != "BOOKMARK":
                    for chunk in _chunks(event, table):
                        yield chunk
            if bookmarks and loop.time() >= next_bookmark:
                next_bookmark = loop.time() + BOOKMARK_SECONDS
                for chunk in _chunks(watch.bookmark(), None):
                    yield chunk

    async def response(
        self,
        start: Callable[[], Watch],
        table: Table | None,
        *,
        client: str,
        timeout: float | None,
        bookmarks: bool,
    ) -> StreamingResponse:
        """A streaming answer of the watch `start` opens for `client` (its address), each
        object as its Table when `table` is given.

        TooManyRequestsError when `client`, or all clients, have as many watches open as they
        may. A resourceVersion too old is a 410 Status in an ERROR event, as kube-apiserver
        sends; any other error of `start` is the request's.
        """
        self._admit(client)
        seconds = timeout if timeout is not None else random.uniform(*DEFAULT_TIMEOUT)
        try:
            watch = await asyncio.get_running_loop().run_in_executor(self.pool, start)
        except BaseException as error:
            self._release(client)
            if not isinstance(error, ApiError) or error.code != 410:
                raise
            gone = _line("ERROR", error.to_status())
            return StreamingResponse(iter([gone]), media_type="application/json")

        def done() -> None:
            watch.close()
            self._release(client)

        return _Stream(self._events(watch, table, seconds, bookmarks), done)
