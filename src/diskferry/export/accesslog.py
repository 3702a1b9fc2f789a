"""The export servers' access log: tokens in the query redacted."""

from __future__ import annotations

from aiohttp.web import BaseRequest

from diskferry.export.token import redact
from diskferry.serving.accesslog import AccessLogger


class RedactingAccessLogger(AccessLogger):
    """The access log with any export token in the query replaced."""

    logger_name = "diskferry.export.access"

    def shown_path(self, request: BaseRequest) -> str:
        """The path and query with the token redacted."""
        return redact(request.rel_url)
