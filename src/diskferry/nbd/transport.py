"""What the client speaks over: a socket, or TLS on one; one thread receives as others send."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading

_RECV = 1 << 18
# a read at least this long goes straight into its place, not through the buffer
_DIRECT = 1 << 16
_TLS_WRITE = 1 << 18


class Transport:
    """A plain socket: one thread may receive while others send."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def sendall(self, data: bytes | memoryview) -> None:
        """Send all of `data`."""
        self.sock.sendall(data)

    def recv_into(self, view: memoryview) -> int:
        """Receive some bytes into `view`; 0 at the end of the stream."""
        return self.sock.recv_into(view)

    def recv_all(self, view: memoryview) -> int:
        """Receive until `view` is full or the stream ends; the bytes received. The kernel
        fills it in one call, so a large reply costs one wakeup, not one per packet."""
        done = 0
        while done < len(view):
            got = self.sock.recv_into(view[done:], 0, socket.MSG_WAITALL)
            if not got:
                break
            done += got
        return done

    def settimeout(self, timeout: float | None) -> None:
        """Bound (or unbound) the time one send or receive may block."""
        self.sock.settimeout(timeout)

    def shutdown(self) -> None:
        """Stop the stream both ways, waking a blocked receiver."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def reader(self) -> Receiver:
        """A buffered reader of the stream, for the one receiving thread."""
        return Receiver(self)


class TlsTransport(Transport):
    """TLS over a socket through memory buffers, so that one SSL object is never used by two
    threads at once: the TLS state is locked only while it works in memory, never across
    socket I/O, and a receiver never waits for a sender."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, hostname: str | None) -> None:
        super().__init__(sock)
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=hostname)
        self._state = threading.Lock()
        self._send = threading.Lock()
        self._handshake()

    def _handshake(self) -> None:
        while True:
            try:
                with self._state:
                    self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                if not self._pull():
                    raise ConnectionError("the server closed the connection") from None
        self._flush()

    def sendall(self, data: bytes | memoryview) -> None:
        """Encrypt and send all of `data`."""
        view = memoryview(data).cast("B")
        for at in range(0, len(view), _TLS_WRITE):
            with self._state:
                self._tls.write(view[at : at + _TLS_WRITE])
            self._flush()

    def recv_into(self, view: memoryview) -> int:
        """Decrypt some bytes into `view`; 0 when the server ends the stream."""
        while True:
            try:
                with self._state:
                    got = self._tls.read(len(view), view)
            except ssl.SSLWantReadError:
                got = -1
            except ssl.SSLZeroReturnError:
                return 0
            if self._outgoing.pending and self._send.acquire(blocking=False):
                try:
                    self._flush_locked()
                finally:
                    self._send.release()
            if got >= 0:
                return got
            if not self._pull():
                return 0

    def recv_all(self, view: memoryview) -> int:
        """Decrypt until `view` is full or the stream ends; the bytes received."""
        done = 0
        while done < len(view):
            got = self.recv_into(view[done:])
            if not got:
                break
            done += got
        return done

    def _pull(self) -> bool:
        """Move received ciphertext into the TLS state; False at the end of the stream."""
        data = self.sock.recv(_RECV)
        if not data:
            return False
        with self._state:
            self._incoming.write(data)
        return True

    def _flush(self) -> None:
        with self._send:
            self._flush_locked()

    def _flush_locked(self) -> None:
        """Send what TLS produced, in order: the caller holds the send lock."""
        with self._state:
            data = self._outgoing.read()
        if data:
            self.sock.sendall(data)


class Receiver:
    """Exact reads from a transport: small ones (reply headers) through a buffer, large
    ones (read payloads) straight into the caller's buffer."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._buffer = memoryview(bytearray(_RECV))
        self._start = 0
        self._end = 0

    def read_into(self, view: memoryview) -> int:
        """Fill `view`; the bytes filled, fewer only where the stream ended."""
        done = self._take(view)
        if done < len(view) and len(view) - done >= _DIRECT:
            return done + self._transport.recv_all(view[done:])
        while done < len(view):
            got = self._transport.recv_into(self._buffer)
            if not got:
                break
            self._start, self._end = 0, got
            done += self._take(view[done:])
        return done

    def _take(self, view: memoryview) -> int:
        """Copy into `view` what the buffer holds, as much as fits."""
        n = min(len(view), self._end - self._start)
        view[:n] = self._buffer[self._start : self._start + n]
        self._start += n
        return n
