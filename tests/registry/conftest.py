"""Debian's docker-registry on 127.0.0.1 (anonymous, htpasswd basic auth, TLS), and skopeo."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from registry_support import PASSWORD, USER, Registry, start_basic_registry, start_registry
from servers import TokenIssuer, token_server


@pytest.fixture(scope="session")
def registry(tmp_path_factory) -> Iterator[Registry]:
    """An anonymous registry over plain HTTP."""
    yield from start_registry(tmp_path_factory.mktemp("registry"))


@pytest.fixture(scope="session")
def basic_registry(tmp_path_factory, tls) -> Iterator[Registry]:
    """A registry over TLS (the test CA) with htpasswd basic auth."""
    yield from start_basic_registry(tmp_path_factory.mktemp("registry-basic"), tls)


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory) -> Iterator[tuple[Registry, TokenIssuer]]:
    """A plain-HTTP registry with bearer-token auth from a local token server."""
    work = tmp_path_factory.mktemp("registry-token")
    issuer = TokenIssuer.create(work, USER, PASSWORD)
    with token_server(issuer) as realm:
        token = (
            f"auth:\n  token:\n    realm: {realm}\n    service: {issuer.service}\n"
            f"    issuer: {issuer.issuer}\n    rootcertbundle: {issuer.cert_pem}\n"
        )
        for registry in start_registry(work, token=token):
            yield registry, issuer
