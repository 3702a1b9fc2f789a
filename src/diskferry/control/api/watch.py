"""Watch streams: the store's changes as newline-delimited JSON events, ended by a timeout."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi.responses import StreamingResponse

from diskferry.control.errors import ApiError
from diskferry.control.store.feed import Watch

POLL_SECONDS = 1.0
BOOKMARK_SECONDS = 30.0
DEFAULT_TIMEOUT = (1800, 3600)  # kube-apiserver's range when a client gives none
MAX_WATCHES = 256

Encode = Callable[[dict[str, Any]], dict[str, Any]]


def _line(type_: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"


class Watcher:
    """Streams watches; each waits for events in a thread of its own pool, not the request pool."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(MAX_WATCHES, thread_name_prefix="watch")
        self.stopping = asyncio.Event()
        self.open = 0

    def stop(self) -> None:
        """End every stream at its next poll, so that the server can close."""
        self.stopping.set()

    def close(self) -> None:
        """Stop and let the waiting threads go."""
        self.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def _events(
        self, watch: Watch, encode: Encode, timeout: float, bookmarks: bool
    ) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        next_bookmark = loop.time() + BOOKMARK_SECONDS
        self.open += 1
        try:
            while not self.stopping.is_set() and (left := deadline - loop.time()) > 0:
                try:
                    events = await loop.run_in_executor(
                        self.pool, watch.next, min(left, POLL_SECONDS)
                    )
                except ApiError as error:
                    yield _line("ERROR", error.to_status())
                    return
                for event in events:
                    if event.type != "BOOKMARK":
                        yield _line(event.type, encode(event.object))
                if bookmarks and loop.time() >= next_bookmark:
                    next_bookmark = loop.time() + BOOKMARK_SECONDS
                    yield _line("BOOKMARK", watch.bookmark().object)
        finally:
            self.open -= 1
            watch.close()

    async def response(
        self,
        start: Callable[[], Watch],
        encode: Encode,
        *,
        timeout: float | None,
        bookmarks: bool,
    ) -> StreamingResponse:
        """A streaming answer of the watch `start` opens, each object through `encode`.

        A resourceVersion too old is a 410 Status in an ERROR event, as kube-apiserver sends;
        any other error of `start` is the request's.
        """
        seconds = timeout if timeout is not None else random.uniform(*DEFAULT_TIMEOUT)
        try:
            watch = await asyncio.get_running_loop().run_in_executor(self.pool, start)
        except ApiError as error:
            if error.code != 410:
                raise
            gone = _line("ERROR", error.to_status())
            return StreamingResponse(iter([gone]), media_type="application/json")
        events = self._events(watch, encode, seconds, bookmarks)
        return StreamingResponse(events, media_type="application/json")
