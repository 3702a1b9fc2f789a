"""The export servers' access log: tokens in the query, and upload secrets the proxy routes
(`.../upload/<secret>`), redacted."""

from __future__ import annotations

import re

from aiohttp.web import BaseRequest

from diskferry.export.token import redact
from diskferry.serving.accesslog import AccessLogger

# Deckhouse's upload path, whose last segment is its secret
_UPLOAD_SECRET = re.compile(r"/upload/[^/?]+")


class RedactingAccessLogger(AccessLogger):
    """The access log with any export token in the query replaced."""

    logger_name = "diskferry.export.access"

    def shown_path(self, request: BaseRequest) -> str:
        """The path and query with the token and an upload secret redacted."""
        return _UPLOAD_SECRET.sub("/upload/REDACTED", redact(request.rel_url))
