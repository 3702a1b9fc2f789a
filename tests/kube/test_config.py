"""How the operator finds its cluster: a kubeconfig it is given, else in a Pod the service
account Kubernetes mounts, else KUBECONFIG; and its workers: Pods of its own image in a Pod,
child processes of its own elsewhere, unless told."""

from __future__ import annotations

import pytest
from standin_support import StandIn

from diskferry.kube.api import KubeApi
from diskferry.kube.config import api_client, own_namespace
from diskferry.kube.errors import ClusterConfigError
from diskferry.kube.operator import (
    LOCAL,
    PODS,
    BadRunnerError,
    NoWorkerImageError,
    choose_runner,
    default_identity,
    own_image,
)

POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_in_a_pod_the_service_account_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in POD.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ClusterConfigError, match="service account"):
        api_client()  # no token is mounted here: the Pod's way is the one tried


def test_a_kubeconfig_given_wins_in_a_pod_too(
    standin: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in POD.items():
        monkeypatch.setenv(name, value)
    server = standin.kubeconfig.read_text().split("server: ")[1].split()[0]
    assert api_client(standin.kubeconfig).configuration.host == server


def test_outside_a_pod_kubeconfig_names_the_cluster(
    standin: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in POD:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(standin.kubeconfig))
    client = api_client()
    assert client.configuration.host.startswith("https://127.0.0.1:")
    assert client.user_agent.startswith("diskferry-operator/")


def test_each_instance_has_a_name_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_identity() != default_identity()
    monkeypatch.setenv("POD_NAME", "diskferry-operator-7d4b9")
    assert default_identity().startswith("diskferry-operator-7d4b9_")


def test_the_pod_namespace_is_the_operators(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert own_namespace("diskferry-system") == "diskferry-system"  # no service account here
    monkeypatch.setenv("POD_NAMESPACE", "virtualization")
    assert own_namespace("diskferry-system") == "virtualization"


def test_workers_are_pods_in_a_pod_and_local_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in POD:
        monkeypatch.delenv(name, raising=False)
    assert choose_runner(None) == LOCAL
    assert choose_runner(PODS) == PODS
    for name, value in POD.items():
        monkeypatch.setenv(name, value)
    assert choose_runner(None) == PODS
    assert choose_runner(LOCAL) == LOCAL
    with pytest.raises(BadRunnerError, match="pods, local"):
        choose_runner("threads")


def test_the_workers_image_is_the_operator_s_own(
    api: KubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    with pytest.raises(NoWorkerImageError, match="--worker-image"):
        own_image(api)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "diskferry-operator-7d4b9", "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "sidecar", "image": "example.com/other:1"},
                {"name": "operator", "image": "registry.example.com/diskferry:0.1.0"},
            ]
        },
    }
    api.create("v1", "Pod", "default", pod)
    monkeypatch.setenv("POD_NAME", "diskferry-operator-7d4b9")
    monkeypatch.setenv("POD_NAMESPACE", "default")
    assert own_image(api) == "registry.example.com/diskferry:0.1.0"
