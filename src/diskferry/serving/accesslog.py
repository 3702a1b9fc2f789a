"""An access log line per request; servers whose URLs carry credentials say how to hide them."""

from __future__ import annotations

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse


class AccessLogger(AbstractAccessLogger):
    """Logs remote, method, path as `shown_path` gives it, status, bytes sent and seconds."""

    logger_name = "diskferry.access"

    def shown_path(self, request: BaseRequest) -> str:
        """The path and query as logged; a subclass hides what is secret in them."""
        return request.rel_url.raw_path_qs

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        """Write one access log line."""
        self.logger.info(
            '%s "%s %s" %s %s %.3f',
            request.remote,
            request.method,
            self.shown_path(request),
            response.status,
            response.body_length,
            time,
        )
