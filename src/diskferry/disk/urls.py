"""URLs fit for messages and log lines: no user:password@, and for HTTP(S) no query."""

from __future__ import annotations

import re

# scheme://user:password@ (or scheme://user@): the userinfo of an authority, wherever in a text
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s]*@")


def without_credentials(text: str) -> str:
    """`text` (a URL, or a message naming URLs) with the user:password@ of every URL removed."""
    return _USERINFO.sub(r"\g<scheme>", text)


def http_url_for_message(url: str) -> str:
    """An HTTP(S) URL without credentials or query (where tokens travel), for messages."""
    return without_credentials(url).split("?", 1)[0]
