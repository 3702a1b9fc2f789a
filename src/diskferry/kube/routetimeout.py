"""The timeout the export proxy's Route keeps (`haproxy.router.openshift.io/timeout`), as the
operator is told it: light enough for the CLI to check it before anything starts."""

from __future__ import annotations

import re

from diskferry.base.errors import DiskferryError

DEFAULT_ROUTE_TIMEOUT = "10m"
"""Long enough for a large download through the router, whose own default (30 s) cuts it."""
_TIMEOUT = re.compile(r"^[1-9][0-9]*(us|ms|s|m|h|d)?$")


class RouteTimeoutError(DiskferryError):
    """The timeout of the proxy's Route is not one HAProxy reads."""

    reason = "BadRouteTimeout"


def route_timeout(text: str) -> str:
    """`text` when HAProxy reads it as a timeout (a number and its unit: 10m, 600s, 1h; without
    one, milliseconds); RouteTimeoutError if not."""
    if not _TIMEOUT.match(text):
        raise RouteTimeoutError(
            f"{text!r} is no timeout HAProxy reads: give a number and a unit, as 10m or 600s"
        )
    return text
