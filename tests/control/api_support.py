"""An API app over a real store in a temporary directory, and a client that carries the token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from diskferry.control.apiserver.http.app import ApiServer
from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.resources.registry import REGISTRY

TOKEN = "test-token-Zq8"
VD = "/apis/diskferry.io/v1alpha1/namespaces/default/virtualdisks"
SECRETS = "/api/v1/namespaces/default/secrets"


def disk(name: str = "vd1", **spec: object) -> dict:
    """A VirtualDisk manifest."""
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualDisk",
        "metadata": {"name": name},
        "spec": {"persistentVolumeClaim": {"size": "64Mi"}, **spec},
    }


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ApiServer]:
    """The app over a store in `tmp_path`."""
    service = ObjectService(tmp_path / "state.db", REGISTRY)
    api = ApiServer(service, REGISTRY, TOKEN, "127.0.0.1:7443")
    yield api
    api.close()
    service.close()


@pytest.fixture
def client(server: ApiServer) -> Iterator[TestClient]:
    """A client of the app that sends the bearer token."""
    with TestClient(server.app, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c
