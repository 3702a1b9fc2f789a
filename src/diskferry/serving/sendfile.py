"""A file's range on a plain connection with sendfile(2): the kernel copies it from the page
cache into the socket, and no byte of it passes through Python.

uvloop has no `loop.sendfile`, and a transport's socket belongs to libuv. Once the transport
has sent everything it buffered (the response's headers), the range goes out on a duplicate
of the socket's descriptor, from a thread that waits for room with poll(2). The duplicate
keeps the socket open however the connection ends meanwhile, so the descriptor written is
never another file's; the thread stops at its next piece once told to, and at once when the
peer goes (EPIPE, ECONNRESET).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

# what one sendfile call sends at most: the thread looks at its stop flag between calls
PIECE = 4 << 20
# how long the thread waits for room before it looks at its stop flag again
_POLL_SECONDS = 0.2
# how often the transport's buffer is looked at while the headers go out
_FLUSH_POLL_SECONDS = 0.001


def _send(
    sock: int,
    fd: int,
    offset: int,
    count: int,
    stop: threading.Event,
    idle: float,
    on_sent: Callable[[int], None],
) -> None:
    """Send `count` bytes of `fd` from `offset` on the non-blocking socket `sock`, which this
    closes, telling `on_sent` each piece's bytes; TimeoutError when the peer takes nothing
    for `idle` seconds."""
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    sent = 0
    waited = 0.0
    try:
        while sent < count and not stop.is_set():
            try:
                n = os.sendfile(sock, fd, offset + sent, min(PIECE, count - sent))
            except BlockingIOError:
                if poller.poll(_POLL_SECONDS * 1000):
                    continue
                waited += _POLL_SECONDS
                if waited >= idle:
                    raise TimeoutError(f"the peer took nothing for {idle:g} s") from None
                continue
            if n == 0:
                raise EOFError(f"the file ends before byte {offset + count}")
            sent += n
            on_sent(n)
            waited = 0.0
    finally:
        os.close(sock)


class FileSender:
    """Sends file ranges on plain connections, from at most `threads` threads at once; a
    connection that finds them all busy is told so (`reserve` is False) and streams its range
    the ordinary way. Each range takes a thread with `reserve` and gives it back with
    `release`."""

    def __init__(self, threads: int = 32, idle: float = 60.0) -> None:
        self.idle = idle
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="diskferry-sendfile")
        self._free = threading.BoundedSemaphore(threads)
        self._sending: set[threading.Event] = set()

    @staticmethod
    def plain(transport: asyncio.BaseTransport | None) -> bool:
        """Whether `transport` is a plain socket connection (no TLS), open."""
        return (
            transport is not None
            and not transport.is_closing()
            and transport.get_extra_info("sslcontext") is None
            and transport.get_extra_info("socket") is not None
        )

    def reserve(self) -> bool:
        """Take a thread for one range, without waiting; whether there was one."""
        return self._free.acquire(blocking=False)

    def release(self) -> None:
        """Give back the thread a range took."""
        self._free.release()

    async def send(
        self,
        transport: asyncio.WriteTransport,
        fd: int,
        offset: int,
        count: int,
        on_sent: Callable[[int], None],
    ) -> None:
        """Send `count` bytes of `fd` from `offset` on `transport`, after what it buffered, in
        the thread reserved for it, telling `on_sent` (from that thread) what went. Cancelled,
        it stops the thread and waits for it, so that the transport is not closed under it."""
        while transport.get_write_buffer_size():
            if transport.is_closing():
                raise ConnectionResetError("the connection closed")
            await asyncio.sleep(_FLUSH_POLL_SECONDS)
        sock = os.dup(transport.get_extra_info("socket").fileno())
        stop = threading.Event()
        self._sending.add(stop)
        loop = asyncio.get_running_loop()
        try:
            job = loop.run_in_executor(
                self._threads, _send, sock, fd, offset, count, stop, self.idle, on_sent
            )
        except BaseException:
            os.close(sock)
            self._sending.discard(stop)
            raise
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:
            stop.set()
            with contextlib.suppress(Exception):
                await job
            raise
        finally:
            self._sending.discard(stop)

    def close(self) -> None:
        """Stop every range still sending and wait for the threads: after this, no descriptor
        a range was sent from is read."""
        for stop in list(self._sending):
            stop.set()
        self._threads.shutdown(wait=True)
