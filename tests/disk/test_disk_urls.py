"""URLs for messages: credentials never shown, and an HTTP URL's query (tokens) left out."""

from __future__ import annotations

import pytest

from diskferry.disk.urls import http_url_for_message, without_credentials


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://user:pw@host/disk.img?t=1", "https://host/disk.img?t=1"),
        ("http://user@host:8080/x", "http://host:8080/x"),
        ("http://user:p@ss@host/x@y", "http://host/x@y"),
        ("nbd://u:pw@[::1]:10809/e?socket=/s", "nbd://[::1]:10809/e?socket=/s"),
        ("get http://a:b@one/ then https://c:d@two/", "get http://one/ then https://two/"),
        ("http://host/path@with-at", "http://host/path@with-at"),
        ("/a/local/file@2x.img", "/a/local/file@2x.img"),
    ],
)
def test_credentials_are_removed(text: str, shown: str) -> None:
    assert without_credentials(text) == shown


def test_an_http_url_loses_its_query_too() -> None:
    url = "https://user:pw@host/v/disk.img?x-kubevirt-export-token=abc"
    assert http_url_for_message(url) == "https://host/v/disk.img"
