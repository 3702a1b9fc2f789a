"""The resuming HTTP(S) reader: a stream that picks up with Range where a break happened."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import urllib3
from urllib3.exceptions import (
    HTTPError as Urllib3Error,
)
from urllib3.exceptions import MaxRetryError, ProtocolError, SSLError

from diskferry.base.errors import CancelledError, DiskferryError
from diskferry.base.retry import fault_text, log, pause
from diskferry.disk.errors import RangeNotSupportedError
from diskferry.disk.http_owned import REDIRECTS, OwnedPool, OwnedResponse
from diskferry.disk.urls import http_url_for_message

_RETRY_STATUSES = {429, 502, 503, 504}
_Got = TypeVar("_Got")
Response = urllib3.BaseHTTPResponse | OwnedResponse
# how much of an error answer is read for what the server said
_EXPLAIN_BYTES = 200


class HttpError(DiskferryError):
    """The server answered with an error status, or could not be reached."""

    reason = "HttpError"

    def __init__(
        self,
        message: str,
        status: int | None = None,
        *,
        transient: bool = True,
        fault: str | None = None,
        said: str = "",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.transient = transient and (status is None or status in _RETRY_STATUSES)
        self.fault = fault or message  # the message without the URL, as a retry says it
        self.said = said  # the server's own reason, when its answer gave one


class TlsError(DiskferryError):
    """The server's certificate could not be verified."""

    reason = "TlsVerificationFailed"


class TruncatedError(DiskferryError):
    """The stream ended before its declared length and could not be resumed."""

    reason = "Truncated"


class SourceChangedError(RangeNotSupportedError):
    """The resource changed during the transfer, so reading on would mix two versions."""

    reason = "SourceChanged"


def _said(data: bytes) -> str:
    """What an error answer says: `reason: message` of a JSON body, or its first line."""
    text = data[:_EXPLAIN_BYTES].decode(errors="replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and (doc.get("reason") or doc.get("message")):
        return ": ".join(str(doc[k]) for k in ("reason", "message") if doc.get(k))
    lines = text.splitlines()
    return lines[0][:_EXPLAIN_BYTES] if lines else ""


def _resendable(body: Any, e: HttpError) -> bool:
    """Whether a request that failed with `e` can be sent again with the same `body`."""
    if body is None:
        return True
    tell = getattr(body, "tell", None)
    return e.status is None and tell is not None and tell() == 0


def _validator(headers) -> str | None:
    """What If-Range can name: a strong ETag, or else Last-Modified."""
    etag = headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return headers.get("Last-Modified")


def split_credentials(url: str) -> tuple[str, str | None]:
    """`url` without its user:password@, and the Basic Authorization header value that they
    make (percent-escapes decoded, UTF-8), None when the URL has none."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    return urlunsplit(bare), "Basic " + base64.b64encode(pair.encode()).decode()


def tls_context(ca_bundle: str | None) -> ssl.SSLContext:
    """A verifying TLS context: the system CAs, or `ca_bundle`."""
    try:
        return ssl.create_default_context(cafile=ca_bundle)
    except (OSError, ssl.SSLError) as e:
        raise TlsError(
            f"cannot use the CA bundle {ca_bundle}: {getattr(e, 'strerror', None) or e}",
            reason="BadCaBundle",
        ) from e


def http_pool(
    ca_bundle: str | None,
    timeout: float,
    connect_timeout: float | None = None,
    context: ssl.SSLContext | None = None,
) -> urllib3.PoolManager:
    """A verifying connection pool (`context`, or one of `ca_bundle`); redirects followed.

    `timeout` bounds each wait for an answer, `connect_timeout` (default: `timeout`) the
    wait for a connection."""
    return urllib3.PoolManager(
        num_pools=4,
        maxsize=16,
        ssl_context=context or tls_context(ca_bundle),
        timeout=urllib3.Timeout(connect=connect_timeout or timeout, read=timeout),
        retries=urllib3.Retry(total=None, connect=0, read=0, other=0, redirect=5, status=0),
    )


@dataclass
class HttpSource:
    """An HTTP(S) URL to read, with its CA bundle, headers and resume policy.

    A user:password@ in the URL goes as Basic auth (as curl sends it) unless `headers` name
    an Authorization of their own; the URL kept and asked for has none.
    """

    url: str
    ca_bundle: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    retries: int = 5
    backoff: float = 0.5
    timeout: float = 30.0
    shown: str | None = None  # how messages show the URL, when its path holds a secret
    connect_timeout: float | None = None  # None: `timeout`
    # streamed GET bodies on connections of its own, read straight into the caller's buffer
    # (`http_owned`); an answer that redirects is asked again the pooled way
    owned: bool = False

    def __post_init__(self) -> None:
        self.url, basic = split_credentials(self.url)
        if basic is not None and not any(k.lower() == "authorization" for k in self.headers):
            self.headers = {"Authorization": basic, **self.headers}
        context = tls_context(self.ca_bundle)
        connect = self.connect_timeout or self.timeout
        self._pool = http_pool(self.ca_bundle, self.timeout, connect, context)
        self._owned = OwnedPool(self.url, context, self.timeout, connect) if self.owned else None
        self._head: tuple[int | None, bool] | None = None

    @property
    def shown_url(self) -> str:
        """The URL as messages and logs show it: no credentials, no query (where tokens go)."""
        return self.shown or http_url_for_message(self.url)

    def request(
        self,
        method: str,
        headers: dict[str, str] | None = None,
        *,
        stream: bool = True,
        body: Any = None,
        cancel: threading.Event | None = None,
        query: str | None = None,
    ) -> Response:
        """Send one request (with `body`, bytes or a file-like object; with `query`, to the URL
        with that query string instead of its own); errors become HttpError, with what the
        server said, or TlsError, statuses >= 400 included.

        A request is sent again after a transient fault (no connection, 429, 502, 503, 504),
        up to `retries` times, each retry said on the retry log; one with a body only when
        no connection was made and the body, which says where it is with `tell`, is unread.
        """
        attempt = 0
        while True:
            try:
                merged = {**self.headers, **(headers or {})}
                return self._send(method, merged, stream, body, query)
            except HttpError as e:
                if not e.transient or attempt >= self.retries or not _resendable(body, e):
                    raise
                attempt += 1
                pause(attempt, self.backoff, e.fault, cancel)

    def _send(
        self, method: str, headers: dict[str, str], stream: bool, body: Any, query: str | None
    ) -> Response:
        resp: Response | None = None
        owned = stream and method == "GET" and body is None and query is None
        if self._owned is not None and owned:
            resp = self._send_owned(headers)
        if resp is None:
            resp = self._send_pooled(method, headers, stream, body, query)
        if resp.status >= 400:
            said = _said(resp.read(_EXPLAIN_BYTES) if stream else resp.data)
            resp.drain_conn()
            resp.release_conn()
            if not said and method == "HEAD":
                said = self._said_to_get(headers)
            status = f"HTTP {resp.status} {resp.reason or ''}".strip()
            if said.lower() in (f"{resp.status}: {resp.reason}".lower(), status.lower()):
                said = ""  # a body that only repeats the status line
            fault = f"server answered {status}" + (f": {said}" if said else "")
            raise HttpError(f"{self.shown_url}: {fault}", resp.status, fault=fault, said=said)
        return resp

    def _send_pooled(
        self, method: str, headers: dict[str, str], stream: bool, body: Any, query: str | None
    ) -> urllib3.BaseHTTPResponse:
        url = self.url if query is None else urlunsplit(urlsplit(self.url)._replace(query=query))
        try:
            return self._pool.request(
                method,
                url,
                headers=headers,
                body=body,
                preload_content=not stream,
                decode_content=False,
            )
        except MaxRetryError as e:
            raise self._translate(e.reason or e) from e
        except Urllib3Error as e:
            raise self._translate(e) from e

    def _send_owned(self, headers: dict[str, str]) -> OwnedResponse | None:
        """A GET on an owned connection; None when its answer redirects."""
        assert self._owned is not None
        try:
            resp = self._owned.get(headers)
        except (OSError, http.client.HTTPException) as e:
            raise self._translate(e) from e
        if resp.status in REDIRECTS:
            resp.close()
            return None
        return resp

    def _said_to_get(self, headers: dict[str, str]) -> str:
        """What the server says to a GET of one byte: the reason a HEAD answer cannot carry."""
        try:
            resp = self._pool.request(
                "GET",
                self.url,
                headers={**headers, "Range": "bytes=0-0"},
                preload_content=False,
                decode_content=False,
            )
        except Urllib3Error:
            return ""
        said = _said(resp.read(_EXPLAIN_BYTES)) if resp.status >= 400 else ""
        resp.close()
        return said

    def _translate(self, e: BaseException) -> DiskferryError:
        where = self.shown_url
        if isinstance(e, (SSLError, ssl.SSLError)):
            return TlsError(f"{where}: TLS verification failed: {e}")
        text = str(e)
        if "too many redirects" in text.lower() or "ResponseError" in type(e).__name__:
            return HttpError(f"{where}: too many redirects", transient=False)
        fault = f"cannot connect: {fault_text(e)}"
        return HttpError(f"{where}: {fault}", fault=fault)

    def head(self) -> tuple[int | None, bool]:
        """(Content-Length or None, whether Range is accepted), asked once."""
        if self._head is None:
            resp = self.request("HEAD", stream=False)
            length = resp.headers.get("Content-Length")
            ranges = resp.headers.get("Accept-Ranges", "").lower() == "bytes"
            self._head = (int(length) if length is not None else None, ranges)
        return self._head

    def open_stream(
        self,
        offset: int = 0,
        cancel: threading.Event | None = None,
        end: int | None = None,
        validator: str | None = None,
    ) -> ResumingReader:
        """A reader of the body from `offset` (to `end`) that resumes after breaks; with
        `validator`, only of the version of the resource it names."""
        return ResumingReader(self, offset, cancel, end, validator)

    def close(self) -> None:
        """Close pooled connections."""
        self._pool.clear()
        if self._owned is not None:
            self._owned.close()


class ResumingReader:
    """A file-like body reader; a dropped connection is retried with Range from where it broke.

    `validator` (an ETag or Last-Modified of an earlier answer) goes in If-Range from the first
    request on, so that a resource that changed since is refused rather than read; without
    it, the first answer's is taken.
    """

    def __init__(
        self,
        source: HttpSource,
        offset: int = 0,
        cancel: threading.Event | None = None,
        end: int | None = None,
        validator: str | None = None,
    ) -> None:
        self.source = source
        self.start = offset
        self.position = offset
        self.end = end
        self.length: int | None = end
        self.content_type: str | None = None
        self.resumes = 0
        self.ranges = False  # whether the server said it accepts Range
        self._cancel = cancel
        self._resp: Response | None = None
        self.validator = validator
        self._open()

    def _open(self) -> None:
        try:
            self._resp = self._request()
        except HttpError as e:
            if e.status == 416 and self.position > self.start:
                raise TruncatedError(
                    f"{self.source.shown_url}: the body ended at byte {self.position}, "
                    f"short of its declared length {self.length} (truncated)"
                ) from e
            raise

    def _request(self) -> Response:
        ranged = bool(self.position) or self.end is not None
        last = "" if self.end is None else str(self.end - 1)
        headers = {}
        if ranged:
            headers["Range"] = f"bytes={self.position}-{last}"
            if self.validator:
                headers["If-Range"] = self.validator
        resp = self.source.request("GET", headers, cancel=self._cancel)
        where = self.source.shown_url
        if ranged and resp.status != 206:
            resp.close()
            # a whole answer of the version named is a server that ignores Range
            changed = _validator(resp.headers) != self.validator
            if self.validator and resp.status == 200 and changed:
                go_on = "resume" if self.position > self.start else "be read"
                raise SourceChangedError(
                    f"{where}: the resource changed during the transfer, "
                    f"so it cannot {go_on} at byte {self.position}"
                )
            raise RangeNotSupportedError(
                f"{where}: the server does not support Range requests, "
                f"so the transfer cannot resume at byte {self.position}"
            )
        if ranged:
            sent = resp.headers.get("Content-Range", "").removeprefix("bytes ").split("-")[0]
            if sent != str(self.position):
                resp.close()
                raise HttpError(
                    f"{where}: asked for bytes from {self.position}, the server sent "
                    f"'Content-Range: {resp.headers.get('Content-Range', '')}'",
                    resp.status,
                    transient=False,
                )
        if self.validator is None:
            self.validator = _validator(resp.headers)
        accepted = resp.headers.get("Accept-Ranges", "").lower() == "bytes"
        self.ranges = self.ranges or accepted or resp.status == 206
        if self.content_type is None:
            self.content_type = resp.headers.get("Content-Type")
        length = resp.headers.get("Content-Length")
        if length is not None and self.length is None:
            self.length = self.position + int(length)
        return resp

    def readinto(self, buf: bytearray | memoryview) -> int:
        """Read up to len(buf) bytes; 0 only at the true end of the body."""
        view = memoryview(buf).cast("B")
        return self._attempt(lambda resp: resp.readinto(view), lambda n: n)

    def read(self, n: int = 1 << 20) -> bytes:
        """Read up to `n` bytes; b'' only at the true end of the body."""
        # the response's own read: its readinto reads this way and copies once more
        return self._attempt(lambda resp: resp.read(n), len)

    def _attempt(self, read: Callable[[Response], _Got], count: Callable[[_Got], int]) -> _Got:
        """`read` from the response (`count` says how many bytes it got), resuming after a
        break."""
        attempt = 0
        while True:
            if self._cancel is not None and self._cancel.is_set():
                raise CancelledError("cancelled")
            try:
                assert self._resp is not None
                got = read(self._resp)
                n = count(got)
                if n == 0 and self.length is not None and self.position < self.length:
                    raise ProtocolError("connection closed early")
                self.position += n
                return got
            except (Urllib3Error, http.client.HTTPException, OSError) as e:
                attempt += 1
                if attempt > self.source.retries:
                    raise TruncatedError(
                        f"{self.source.shown_url}: transfer broke at byte {self.position} "
                        f"and did not resume after {self.source.retries} retries: {e}"
                    ) from e
                self._release()
                broke = f"the transfer broke at byte {self.position} ({fault_text(e)})"
                pause(attempt, self.source.backoff, broke, self._cancel)
                self.resumes += 1
                self._open()
                log.warning("resumed %s at byte %d", self.source.shown_url, self.position)

    def _release(self) -> None:
        if self._resp is not None:
            self._resp.release_conn()
            self._resp = None

    def close(self) -> None:
        """Give the connection back when the body was read whole, otherwise drop it."""
        if self._resp is not None:
            if self.length is not None and self.position >= self.length:
                self._resp.release_conn()
            else:
                self._resp.close()
        self._resp = None
