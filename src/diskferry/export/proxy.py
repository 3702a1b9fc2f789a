"""The export proxy: routes KubeVirt export API paths to each export's server, streaming."""

from __future__ import annotations

import logging
import re
import ssl
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from diskferry.export.backends import Backends, PoolSettings
from diskferry.export.errors import BusyError, UntrustedBackendError
from diskferry.export.routes import Route, RouteSource
from diskferry.export.server import problem_response
from diskferry.serving.accesslog import SHOWN_PATH

log = logging.getLogger(__name__)

# the versions of export.kubevirt.io whose paths the proxy routes
VERSIONS = ("v1", "v1beta1")
_EXPORTS = "/api/export.kubevirt.io/-"
_PATH = re.compile(
    rf"/api/export\.kubevirt\.io/(?:{'|'.join(VERSIONS)})/namespaces/([^/]+)"
    r"/virtualmachineexports/([^/]+)/(.*)",
    re.DOTALL,
)
_HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
    )
)
# the body's length goes on to the backend as the client gave it, a response's is set anew
_LENGTH = "content-length"
# the base of a request to a server over its Unix socket, where the host names nothing
_UNIX_BASE = "http://localhost"
# Per stream the proxy holds about twice the read buffer from the backend, and towards the
# client the write buffer plus one piece. TLS keeps, for as long as a client's connection
# lives, a buffer as large as the most it ever had to encrypt ahead of the socket: with
# whole chunks of every size and 256 KiB of write buffer that was 0.3-0.8 MiB per connection,
# so the proxy grew with every connection that had streamed (111 -> 178 MiB under 200
# downloads). Pieces are views of the chunks as they came, so no byte is copied to cut them.
_READ_BUFFER = 64 << 10
_WRITE_BUFFER = 64 << 10
_PIECE = 64 << 10
# what a client that finds an export or the pool busy is told to wait before it asks again
RETRY_AFTER_SECONDS = 5
# how long the cluster's API may take to say whether an export's Service exists
PRESENCE_TIMEOUT = aiohttp.ClientTimeout(total=10)


def _retry_later(reason: str, message: str) -> web.Response:
    """503 `reason`, telling the client to ask again in RETRY_AFTER_SECONDS."""
    response = problem_response(503, reason, f"{message}; ask again in {RETRY_AFTER_SECONDS} s")
    response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _not_ready(export: str) -> web.Response:
    """The answer for the export `export` (namespace/name) whose server is not ready yet."""
    return _retry_later("ExportNotReady", f"{export} is not ready")


def _refused(error: BaseException) -> bool:
    """Whether `error` is a backend that refused the connection: nothing listens there."""
    cause = error.os_error if isinstance(error, aiohttp.ClientConnectorError) else error
    return isinstance(cause, ConnectionRefusedError)


def _forwardable(headers: object, length: bool = False) -> dict[str, str]:
    """The end-to-end headers; Content-Length only with `length`."""
    return {
        k: v
        for k, v in headers.items()  # type: ignore[attr-defined]
        if k.lower() not in _HOP_BY_HOP and (length or k.lower() != _LENGTH)
    }


class ExportProxy:
    """Forwards `<rest>` of each matching path to the export's server, over TLS or over its
    Unix socket on this host, within the bounds of one pool."""

    def __init__(self, routes: RouteSource, pool: PoolSettings | None = None) -> None:
        self.routes = routes
        self.pool = pool or PoolSettings()
        self.backends = Backends(self.pool, _READ_BUFFER)
        self._presence_trouble: str | None = None  # the last one logged, until it answers

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, app: web.Application) -> None:
        await self.backends.open()

    async def _close(self, app: web.Application) -> None:
        await self.backends.close()

    def _target(self, route: Route, rest: str, query: str) -> tuple[URL, dict[str, Any]]:
        """The URL of `rest` on the route's server, and how to reach it: over its Unix socket
        in plain HTTP, or over TLS verified with its CA (which may raise OSError, SSLError)."""
        if route.unix_socket is not None:
            base, how = _UNIX_BASE, {}
        else:
            base, how = route.url.rstrip("/"), {"ssl": self.routes.client_context(route)}
        url = base + "/" + rest + ("?" + query if query else "")
        return URL(url, encoded=True), how

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        # The raw path, so that percent-escapes reach the export server as the client sent them.
        match = _PATH.fullmatch(request.rel_url.raw_path)
        if match is None:
            return problem_response(
                400,
                "BadPath",
                "use /api/export.kubevirt.io/VERSION/namespaces/NS/virtualmachineexports/NAME/..."
                f" with VERSION one of {', '.join(VERSIONS)}",
            )
        namespace, name, rest = match.groups()
        route = self.routes.get(namespace, name)
        if route is None:
            return problem_response(404, "UnknownExport", f"no export {namespace}/{name}")
        # an export routed: its names are no secret, what follows them may be
        request[SHOWN_PATH] = f"{_EXPORTS}/namespaces/{namespace}/virtualmachineexports/{name}/-"
        if not route.ready:
            return _not_ready(f"{namespace}/{name}")
        try:
            url, how = self._target(route, rest, request.query_string)
        except (OSError, ssl.SSLError) as e:
            log.warning("export %s/%s: cannot load its CA: %s", namespace, name, e)
            return problem_response(502, "BadBackendCA", f"no usable CA for {namespace}/{name}")
        if request.body_exists:
            how.update(data=request.content, timeout=self.backends.upload_timeout)
        try:
            async with (
                self.backends.slot(route.unix_socket or str(url.origin())),
                self.backends.session(route.unix_socket, self.routes.unix_sockets) as session,
            ):
                return await self._exchange(request, session, url, how, route)
        except BusyError as e:
            return _retry_later(e.reason, f"{namespace}/{name}: {e}")

    async def _exchange(
        self,
        request: web.Request,
        session: aiohttp.ClientSession,
        url: URL,
        how: dict[str, Any],
        route: Route,
    ) -> web.StreamResponse:
        """Send the request to the server of the route's export and relay its answer."""
        export = f"{route.namespace}/{route.name}"
        try:
            upstream = await session.request(
                request.method,
                url,
                headers=_forwardable(request.headers, length=request.body_exists),
                allow_redirects=False,
                **how,
            )
        except aiohttp.ClientConnectorCertificateError as e:
            log.warning("export %s: backend certificate refused: %s", export, e)
            return problem_response(
                502, "BackendCertificateRefused", f"the server of {export} is not trusted"
            )
        except UntrustedBackendError as e:
            log.warning("export %s: %s", export, e)
            return problem_response(502, e.reason, f"the server of {export} is not the proxy's")
        except TimeoutError:
            return problem_response(504, "BackendTimeout", f"{export} did not answer")
        except aiohttp.ClientConnectorDNSError:
            # a server found by its Service's name: a Service whose Pod has no address yet,
            # or no such Service
            if await self._present(route):
                return _not_ready(export)
            return problem_response(404, "UnknownExport", f"no export {export} is served")
        except (aiohttp.ClientError, OSError) as e:
            if route.refused_while_starting and _refused(e):
                return _not_ready(export)
            log.warning("export %s: backend failed: %s", export, e)
            return problem_response(502, "BackendUnavailable", f"cannot reach {export}")
        return await self._relay(request, upstream)

    async def _present(self, route: Route) -> bool:
        """Whether the export of `route`, whose server's name resolves to nothing, exists all
        the same, as the routes' source can ask; False where it cannot, or has no answer (logged
        once until it answers again). The asking takes a slot of the pool as a request does:
        BusyError where none is free in time (the client is told to ask again)."""
        try:
            presence = self.routes.presence(route)
            if presence is None:
                return False
            url = URL(presence.url)
            async with (
                self.backends.slot(str(url.origin())),
                self.backends.session(None, self.routes.unix_sockets) as session,
                session.get(
                    url,
                    headers=presence.headers,
                    ssl=presence.context,
                    allow_redirects=False,
                    timeout=PRESENCE_TIMEOUT,
                ) as answer,
            ):
                status = answer.status
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            self._presence_failed(f"{type(e).__name__}: {e}")
            return False
        if status not in (200, 404):
            self._presence_failed(f"HTTP {status}")
            return False
        self._presence_trouble = None
        return status == 200

    def _presence_failed(self, trouble: str) -> None:
        if trouble != self._presence_trouble:
            log.warning("cannot tell whether exports with no server address exist: %s", trouble)
            self._presence_trouble = trouble

    async def _relay(
        self, request: web.Request, upstream: aiohttp.ClientResponse
    ) -> web.StreamResponse:
        resp = web.StreamResponse(status=upstream.status, headers=_forwardable(upstream.headers))
        if upstream.content_length is not None:
            resp.content_length = upstream.content_length
        try:
            await resp.prepare(request)
            if request.transport is not None:
                request.transport.set_write_buffer_limits(high=_WRITE_BUFFER)
            if request.method != "HEAD":
                async for chunk, _ in upstream.content.iter_chunks():
                    view = memoryview(chunk)
                    for start in range(0, len(view), _PIECE):
                        await resp.write(view[start : start + _PIECE])
            await resp.write_eof()
        except (aiohttp.ClientError, ConnectionError, TimeoutError):
            # The status line is gone already: cut the client's connection so that it
            # sees a short body rather than a clean end.
            upstream.close()
            if request.transport is not None:
                request.transport.close()
        finally:
            upstream.release()
        return resp
