"""Bodies read on connections the reader owns: http.client, each body straight into the
caller's buffer.

urllib3 reads a body through a buffer of its own and copies it twice more before it reaches
the caller; http.client's `readinto` on a connection of its own fills the caller's buffer
from the socket, one TLS record a call, and nothing else. Over TLS on loopback, 256 MiB in
2 MiB ranges on four connections took 0.50 s of CPU this way against 0.75 s through urllib3.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from urllib.parse import urlsplit

# statuses whose answer names another URL: a request that gets one goes the pooled way
REDIRECTS = frozenset({301, 302, 303, 307, 308})


class UnknownHostError(OSError):
    """The URL's host name resolves to no address."""

    def __init__(self, host: str) -> None:
        super().__init__(f"unknown host {host}")


class OwnedResponse:
    """An http.client answer with the face of the urllib3 responses the reader uses."""

    def __init__(
        self, pool: OwnedPool, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse
    ) -> None:
        self._pool = pool
        self._conn: http.client.HTTPConnection | None = conn
        self._resp = resp
        self.status = resp.status
        self.reason = resp.reason
        self.headers = resp.headers
        length = resp.headers.get("Content-Length")
        self._left = int(length) if length is not None and length.isdigit() else None
        self._reusable = (
            resp.version == 11 and self._left is not None and "close" not in _connection(resp)
        )

    def readinto(self, buf: memoryview | bytearray) -> int:
        """Read up to len(buf) bytes of the body into `buf`; 0 at its end."""
        n = self._resp.readinto(buf)
        self._count(n)
        return n

    def read(self, n: int) -> bytes:
        """Up to `n` bytes of the body."""
        data = self._resp.read(n)
        self._count(len(data))
        return data

    def _count(self, n: int) -> None:
        if self._left is not None:
            self._left -= n

    def drain_conn(self) -> None:
        """Read the rest of the body, so that the connection can serve another request."""
        try:
            self._count(len(self._resp.read()))
        except (OSError, http.client.HTTPException):
            self._reusable = False

    def release_conn(self) -> None:
        """Give the connection back when the body was read whole, otherwise close it."""
        if self._conn is None:
            return
        if self._reusable and self._left == 0:
            self._resp.close()
            self._pool.put(self._conn)
        else:
            self._conn.close()
        self._conn = None

    def close(self) -> None:
        """Close the connection."""
        self._reusable = False
        self.release_conn()


def _connection(resp: http.client.HTTPResponse) -> str:
    return (resp.headers.get("Connection") or "").lower()


class OwnedPool:
    """Kept-alive connections to the origin of one URL, each used by one request at a time;
    safe from many threads."""

    def __init__(
        self, url: str, context: ssl.SSLContext, timeout: float, connect_timeout: float
    ) -> None:
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._target = parts.path or "/"
        if parts.query:
            self._target += "?" + parts.query
        self._context = context
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def get(self, headers: dict[str, str]) -> OwnedResponse:
        """Send a GET of the URL; its answer, the body unread. A kept-alive connection that
        fails before the answer (the server closed it meanwhile) is replaced at once."""
        while True:
            conn, reused = self._take()
            try:
                conn.request("GET", self._target, headers=headers)
                return OwnedResponse(self, conn, conn.getresponse())
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                if not reused or isinstance(e, TimeoutError):
                    raise
            except BaseException:
                conn.close()
                raise

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        conn: http.client.HTTPConnection
        if self._https:
            conn = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._connect_timeout, context=self._context
            )
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self._connect_timeout)
        try:
            conn.connect()
        except socket.gaierror as e:
            raise UnknownHostError(self._host) from e
        if conn.sock is not None:
            conn.sock.settimeout(self._timeout)
        return conn, False

    def put(self, conn: http.client.HTTPConnection) -> None:
        """Keep `conn` for the next request."""
        with self._lock:
            self._idle.append(conn)

    def close(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
