"""The kube tests run against the stand-in cluster (tests/standin.py), one for each module, whose
kubelet runs Pods from the image built once for the whole run (image_support)."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "control"))
sys.path.insert(0, str(Path(__file__).parents[1] / "operator"))
sys.path.insert(0, str(Path(__file__).parents[1] / "image"))

from daemon_support import kubectl
from image_support import built as built
from image_support import pinned as pinned
from standin_support import StandIn, start_standin

from diskferry.kube.api import KubeApi
from diskferry.kube.config import api_client
from diskferry.kube.runner import PodRunner
from diskferry.kube.volumes import ClusterVolumes

NAMESPACES = itertools.count()


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    """A stand-in cluster for the module's tests."""
    base = tmp_path_factory.mktemp("standin")
    started = start_standin(base / "data", base / "standin.log")
    yield started
    assert started.stop() == 0


@pytest.fixture
def api(standin: StandIn, tmp_path: Path) -> KubeApi:
    """The stand-in's API through the kubernetes client, as the operator reaches it."""
    return KubeApi(api_client(standin.kubeconfig), discovery_cache=tmp_path / "discovery.json")


@pytest.fixture
def namespace(standin: StandIn) -> str:
    """A namespace of the test's own, where the operator runs."""
    name = f"operator-{next(NAMESPACES)}"
    kubectl(standin, "create", "namespace", name)
    return name


@pytest.fixture
def volumes(api: KubeApi) -> ClusterVolumes:
    """The claims as PVCs, through the stand-in's API."""
    return ClusterVolumes(api)


@pytest.fixture
def runner(api: KubeApi, image: str, volumes: ClusterVolumes) -> PodRunner:
    """Workers as Pods of `image` (a module's own fixture: its image, its classes applied)."""
    return PodRunner(api, image, volumes, "default")
