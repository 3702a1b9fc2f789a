"""Strategic merge patch from kr8s and the official `kubernetes` client, unmodified, against a
real `diskferry serve`, as kube-apiserver answers it: taken on a core kind (a Secret: the
official client's default for a dict body, kubectl's default), 415 naming the patch types a
custom resource takes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import kr8s.asyncio
import pytest
from daemon_support import Served, start_daemon
from kr8s import ServerError
from kubernetes import client, config
from kubernetes.client.rest import ApiException

NAMESPACE = "default"
STRATEGIC = "application/strategic-merge-patch+json"
TAKEN = ("application/json-patch+json", "application/merge-patch+json")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One daemon, without controllers, for the module's tests."""
    base = tmp_path_factory.mktemp("strategic")
    served = start_daemon(base / "data", base / "daemon.log")
    yield served
    assert served.stop() == 0


@pytest.fixture
def official(daemon: Served) -> Iterator[client.ApiClient]:
    """The official client configured from the daemon's kubeconfig."""
    api = config.new_client_from_config(str(daemon.kubeconfig))
    yield api
    api.close()


def _secret(name: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": NAMESPACE, "labels": {"keep": "yes", "drop": "yes"}}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "stringData": {"k": "v"}}


def _disk(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualDisk",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"persistentVolumeClaim": {"size": "64Mi"}},
    }


PATCH = {"metadata": {"labels": {"added": "yes", "drop": None}}}
AFTER = {"keep": "yes", "added": "yes"}


def test_the_official_clients_default_patch_of_a_secret_is_strategic(
    official: client.ApiClient,
) -> None:
    core = client.CoreV1Api(official)
    core.create_namespaced_secret(NAMESPACE, _secret("official-strategic"))
    patched = core.patch_namespaced_secret("official-strategic", NAMESPACE, PATCH)
    assert patched.metadata.labels == AFTER


def test_the_official_clients_strategic_patch_of_a_custom_resource_is_415(
    official: client.ApiClient,
) -> None:
    custom = client.CustomObjectsApi(official)
    where = ("diskferry.io", "v1alpha1", NAMESPACE, "virtualdisks")
    custom.create_namespaced_custom_object(*where, _disk("official-disk"))
    with pytest.raises(ApiException) as refused:
        custom.patch_namespaced_custom_object(
            *where, "official-disk", PATCH, _content_type=STRATEGIC
        )
    assert refused.value.status == 415
    assert all(taken in str(refused.value.body) for taken in TAKEN)
    merged = custom.patch_namespaced_custom_object(*where, "official-disk", PATCH)
    assert merged["metadata"]["labels"] == {"added": "yes"}


async def _kr8s_strategic(api: Any, version: str, plural: str, name: str) -> Any:
    """A strategic merge patch through kr8s's own API call (its `patch` sends merge patches)."""
    async with api.call_api(
        "PATCH",
        version=version,
        namespace=NAMESPACE,
        url=f"{plural}/{name}",
        content=json.dumps(PATCH),
        headers={"Content-Type": STRATEGIC},
    ) as response:
        return response.json()


async def _kr8s(daemon: Served) -> tuple[dict[str, str], ServerError]:
    api = await kr8s.asyncio.api(kubeconfig=str(daemon.kubeconfig))
    await kr8s.asyncio.objects.Secret(_secret("kr8s-strategic"), api=api).create()
    patched = await _kr8s_strategic(api, "v1", "secrets", "kr8s-strategic")
    disks = kr8s.asyncio.objects.new_class(
        kind="VirtualDisk", version="diskferry.io/v1alpha1", namespaced=True
    )
    await disks(_disk("kr8s-disk"), api=api).create()
    with pytest.raises(ServerError) as refused:
        await _kr8s_strategic(api, "diskferry.io/v1alpha1", "virtualdisks", "kr8s-disk")
    return patched["metadata"]["labels"], refused.value


def test_kr8s_strategic_patch_is_taken_on_a_secret_and_415_on_a_custom_resource(
    daemon: Served,
) -> None:
    labels, refused = asyncio.run(_kr8s(daemon))
    assert labels == AFTER
    assert refused.response.status_code == 415
    assert all(taken in str(refused) for taken in TAKEN)
