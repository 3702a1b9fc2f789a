"""An access log line per request, with tokens in the query redacted."""

from __future__ import annotations

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse

from diskferry.export.token import redact


class RedactingAccessLogger(AbstractAccessLogger):
    """Logs remote, method, path (token redacted), status, bytes sent and seconds."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        """Write one access log line."""
        self.logger.info(
            '%s "%s %s" %s %s %.3f',
            request.remote,
            request.method,
            redact(request.rel_url),
            response.status,
            response.body_length,
            time,
        )
