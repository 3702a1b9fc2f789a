"""The Service of a job's server, as the Pod runner asks it of the cluster's API: a job that
listens on every address of its Pod (as `server_address` gives it) is behind a headless
Service of its Pod's name that selects the Pod, and it is removed with the Pod; a job that
listens elsewhere (the export proxy, on loopback) gets none, and a Service of its name that
the cluster admin made is left alone. No Pod of these runs (their image is not built): what
is tested is what the runner makes and removes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from control_support import wait_until
from daemon_support import kubectl

from diskferry.export import ProxyJob
from diskferry.importer import UploadJob
from diskferry.kube.api import KubeApi
from diskferry.kube.pods import pod_name
from diskferry.kube.runner import PodRunner
from diskferry.kube.volumes import ClusterVolumes

NAMESPACE = "uploads"
UNBUILT = "localhost/diskferry-unbuilt:0"


@pytest.fixture
def runner(api: KubeApi, standin) -> Iterator[PodRunner]:
    kubectl(standin, "create", "namespace", NAMESPACE)
    yield PodRunner(api, UNBUILT, ClusterVolumes(api), NAMESPACE)
    kubectl(standin, "delete", "namespace", NAMESPACE, "--wait=false")


def _service(api: KubeApi, job_id: str) -> dict[str, Any] | None:
    return api.get("v1", "Service", NAMESPACE, pod_name(job_id))


def _ports(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [port for c in pod["spec"]["containers"] for port in c.get("ports") or []]


def _purged(runner: PodRunner, job_id: str) -> None:
    """Wait until the job ended (its Pod could not start) and purge it."""
    wait_until(lambda: (state := runner.state(job_id)) and not state.running, 120, 0.3)
    assert runner.purge(job_id, keep_scratch=False)


def test_a_job_that_serves_is_behind_a_headless_service_gone_with_its_pod(
    runner: PodRunner, api: KubeApi
) -> None:
    server = runner.server_address("up-1", NAMESPACE)
    assert server.port == 8443
    assert f"diskferry-up-1.{NAMESPACE}.svc" in server.sans
    job = UploadJob(
        target="/tmp/disk.img",
        token_file="token",
        cert_dir=".",
        sans=list(server.sans),
        listen_address=server.address,
        listen_port=server.port,
    )
    runner.start("up-1", job)
    service = _service(api, "up-1")
    pod = api.get("v1", "Pod", NAMESPACE, pod_name("up-1"))
    assert service is not None and pod is not None
    assert service["spec"]["clusterIP"] == "None"
    assert [p["port"] for p in service["spec"]["ports"]] == [8443]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert {"name": "server", "containerPort": 8443} in _ports(pod)
    assert runner.server_url("up-1", 8443) == f"https://diskferry-up-1.{NAMESPACE}.svc:8443"
    _purged(runner, "up-1")
    assert _service(api, "up-1") is None


def test_a_job_listening_on_loopback_gets_no_service_and_leaves_one_of_its_name(
    runner: PodRunner, api: KubeApi
) -> None:
    admins = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": pod_name("export-proxy"), "namespace": NAMESPACE},
        "spec": {"selector": {"app": "proxy"}, "ports": [{"port": 443, "targetPort": 8443}]},
    }
    api.create("v1", "Service", NAMESPACE, admins)
    job = ProxyJob(routes="routes.yaml", cert_dir=".", listen_address="127.0.0.1", listen_port=7444)
    runner.start("export-proxy", job)
    pod = api.get("v1", "Pod", NAMESPACE, pod_name("export-proxy"))
    assert pod is not None
    assert [port["name"] for port in _ports(pod)] == ["progress"]
    _purged(runner, "export-proxy")
    kept = _service(api, "export-proxy")
    assert kept is not None and kept["spec"]["selector"] == {"app": "proxy"}
