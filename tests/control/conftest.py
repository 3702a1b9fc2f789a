"""What the control tests share: the example manifests, each a parameter of `example` tests, a
docker-registry, and a watch on the repositories the daemon's reconcilers open."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from crd_support import example_documents
from registry_support import Registry, start_basic_registry, start_registry

from diskferry.backup.repository import Repository


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run a test taking `example` once per example document."""
    if "example" in metafunc.fixturenames:
        docs = example_documents()
        ids = [f"{d['kind']}/{d['metadata']['name']}" for d in docs]
        metafunc.parametrize("example", docs, ids=ids)


@pytest.fixture
def examples() -> list[dict[str, Any]]:
    """Every example document."""
    return example_documents()


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """Debian's docker-registry, anonymous, over plain HTTP on 127.0.0.1."""
    yield from start_registry(tmp_path_factory.mktemp("registry"))


@pytest.fixture(scope="session")
def basic_registry(tmp_path_factory: pytest.TempPathFactory, tls) -> Iterator[Registry]:
    """Debian's docker-registry over TLS (the test CA) with htpasswd basic auth."""
    yield from start_basic_registry(tmp_path_factory.mktemp("registry-basic"), tls)


@pytest.fixture
def repositories_opened_by_reconcilers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each repository the reconcilers open or make in this process (on the manager's
    `control-` threads), as `Repository.<how> <url>`: it must stay empty, every repository
    chore running in a backup worker of its own."""
    opened: list[str] = []
    for how in ("open", "init"):
        real = getattr(Repository, how)

        def watched(url: str, *args: Any, _real: Any = real, _how: str = how, **kw: Any) -> Any:
            if threading.current_thread().name.startswith("control-"):
                opened.append(f"Repository.{_how} {url}")
            return _real(url, *args, **kw)

        monkeypatch.setattr(Repository, how, watched)
    return opened
