"""An access log line per request, which tells what was asked without what a client may have
put a secret in: no header at all, no query value but those a server names as plain, and of a
refused request (status 400 and up) not its path but the shape of the route it matched."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse

# the path a refused request is logged with: the shape of its route, or what the app says
SHOWN_PATH = web.RequestKey("shown_path", str)
REDACTED = "REDACTED"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_AppHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def note_route_shape(request: web.Request, handler: _AppHandler) -> web.StreamResponse:
    """Note the path of the route the request matched, its variables unfilled ('-' for none),
    as the path the log shows should it be refused; a handler may note a fuller one."""
    resource = request.match_info.route.resource
    request[SHOWN_PATH] = resource.canonical if resource is not None else "-"
    return await handler(request)


class AccessLogger(AbstractAccessLogger):
    """Logs remote, method, path and query as `shown_path` and `plain_query` allow, status,
    bytes sent and seconds."""

    logger_name = "diskferry.access"
    # the query parameters whose values an answered request (status below 400) shows
    plain_query: frozenset[str] = frozenset()

    def shown_path(self, request: BaseRequest) -> str:
        """The path of an answered request as logged; a subclass hides what is secret in it."""
        return request.rel_url.raw_path

    def _shown_query(self, request: BaseRequest) -> str:
        shown = [
            f"{k}={v}" if k in self.plain_query else REDACTED for k, v in request.query.items()
        ]
        return "?" + "&".join(shown) if shown else ""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        """Write one access log line."""
        if response.status < 400:
            path = self.shown_path(request) + self._shown_query(request)
        else:
            path = request.get(SHOWN_PATH, "-")
        self.logger.info(
            '%s "%s %s" %s %s %.3f',
            request.remote,
            request.method if request.method in _METHODS else "-",
            path,
            response.status,
            response.body_length,
            time,
        )
