"""The export servers' access log: the paging parameters shown, and the upload secrets the
proxy routes (`.../upload/<secret>`) hidden."""

from __future__ import annotations

import re

from aiohttp.web import BaseRequest

from diskferry.serving.accesslog import REDACTED, AccessLogger

# Deckhouse's upload path, whose last segment is its secret
_UPLOAD_SECRET = re.compile(r"/upload/[^/?]+")


class RedactingAccessLogger(AccessLogger):
    """The access log of the export servers and the proxy."""

    logger_name = "diskferry.export.access"
    plain_query = frozenset({"offset", "length", "page_size", "context"})

    def shown_path(self, request: BaseRequest) -> str:
        """The path with an upload secret redacted."""
        return _UPLOAD_SECRET.sub(f"/upload/{REDACTED}", request.rel_url.raw_path)
