"""An upload's body, arriving on the server's event loop, read by the import in its thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable

from diskferry.base.errors import DiskferryError

# the least asked of the loop at a time (a form's reader needs more than its boundary)
_CHUNK = 1 << 20


class UploadBrokenError(DiskferryError):
    """The upload's body stopped before its end: the client went away or stalled."""

    reason = "UploadBroken"


class UploadBody:
    """Reads `read_chunk(n)` on `loop` from another thread, with a stall limit; `complete` is
    set on the loop once the whole body is in."""

    def __init__(
        self,
        read_chunk: Callable[[int], Awaitable[bytes]],
        loop: asyncio.AbstractEventLoop,
        expected: int | None,
        stall_timeout: float,
    ) -> None:
        self._read_chunk = read_chunk
        self._loop = loop
        self._expected = expected
        self._stall_timeout = stall_timeout
        self.received = 0
        self.complete = asyncio.Event()
        self._ended = False
        self._left = b""

    def read(self, n: int = 1 << 20) -> bytes:
        """Up to `n` bytes of the body; b"" once all of it is in."""
        if not self._left:
            self._left = self._fetch()
        data, self._left = self._left[:n], self._left[n:]
        return data

    def _fetch(self) -> bytes:
        if self._ended:
            return b""
        future = asyncio.run_coroutine_threadsafe(self._read_chunk(_CHUNK), self._loop)
        try:
            data = future.result(self._stall_timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise UploadBrokenError(
                f"the upload stalled after {self.received} bytes: "
                f"nothing came for {self._stall_timeout:g} s"
            ) from None
        except Exception as e:
            raise UploadBrokenError(
                f"the upload broke after {self.received} bytes: {type(e).__name__} {e}".strip()
            ) from e
        self.received += len(data)
        if not data:
            if self._expected is not None and self.received < self._expected:
                raise UploadBrokenError(
                    f"the upload ended after {self.received} of {self._expected} bytes"
                )
            self._ended = True
            self._loop.call_soon_threadsafe(self.complete.set)
        return data
