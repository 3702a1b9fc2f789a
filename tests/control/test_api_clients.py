"""kr8s and the official `kubernetes` client, unmodified, against a real `diskferry serve`:
version, discovery, list, get, create, watch from a resourceVersion (and 410 on a too-old one),
merge patch, JSON patch, server-side apply with its conflicts, and delete, on a diskferry kind
and on a core kind."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kr8s.asyncio
import pytest
import yaml
from daemon_support import Served, start_daemon
from kr8s import NotFoundError, ServerError
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.apiserver.store.db import TRIM_EVERY
from diskferry.control.resources.core import SECRETS
from diskferry.control.resources.registry import REGISTRY

NAMESPACE = "default"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
TOO_OLD = "1"
WATCH_SECONDS = 30


@dataclass(frozen=True)
class Kind:
    """A kind the clients drive: where it is served and a manifest of it."""

    api_version: str
    kind: str
    plural: str
    manifest: Callable[[str], dict[str, Any]]

    @property
    def group(self) -> str:
        """The API group, "" for the core group."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        """The API version within the group."""
        return self.api_version.rpartition("/")[2]

    def applied(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        """An apply configuration of `name` that sets `labels` only."""
        meta = {"name": name, "namespace": NAMESPACE, "labels": labels}
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": meta}


def _disk(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualDisk",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"persistentVolumeClaim": {"size": "64Mi"}},
    }


def _secret(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "stringData": {"key": name},
    }


DISKS = Kind("diskferry.io/v1alpha1", "VirtualDisk", "virtualdisks", _disk)
SECRET_KIND = Kind("v1", "Secret", "secrets", _secret)
KINDS = pytest.mark.parametrize("kind", [DISKS, SECRET_KIND], ids=["VirtualDisk", "Secret"])


def _expected(a: str, b: str) -> list[tuple[str, str]]:
    """The events a scenario's writes after creating `a` make: `b` added, `a` changed 4 times."""
    return [("ADDED", b), *[("MODIFIED", a)] * 4]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A daemon whose change feed no longer reaches back to resourceVersion 1."""
    base = tmp_path_factory.mktemp("clients")
    data = base / "data"
    data.mkdir(mode=0o700)
    _forget_the_first_changes(data / "state.db")
    served = start_daemon(data, base / "daemon.log")
    yield served
    assert served.stop() == 0


def _forget_the_first_changes(path: Path) -> None:
    """Write and delete a Secret until the feed has been trimmed past the first changes."""
    service = ObjectService(path, REGISTRY, keep_changes=1)
    try:
        for _ in range(TRIM_EVERY // 2 + 1):
            service.create(SECRETS, NAMESPACE, {"metadata": {"name": "churn"}})
            service.delete(SECRETS, NAMESPACE, "churn")
    finally:
        service.close()


# --- kr8s


async def _kr8s_api(daemon: Served) -> Any:
    return await kr8s.asyncio.api(kubeconfig=str(daemon.kubeconfig))


async def _kr8s_apply(
    api: Any, kind: Kind, name: str, labels: dict[str, str], manager: str, force: bool = False
) -> dict[str, Any]:
    """Server-side apply through kr8s's own API call."""
    params = {"fieldManager": manager, **({"force": "true"} if force else {})}
    async with api.call_api(
        "PATCH",
        version=kind.api_version,
        namespace=NAMESPACE,
        url=f"{kind.plural}/{name}",
        params=params,
        content=yaml.safe_dump(kind.applied(name, labels)),
        headers={"Content-Type": APPLY},
    ) as response:
        return response.json()


async def _kr8s_watch(api: Any, kind: Kind, since: str, last: str) -> list[tuple[str, str]]:
    """The events after `since`, up to the one at resourceVersion `last`."""
    seen = []
    async for event, obj in api.watch(
        f"{kind.plural}.{kind.group}", namespace=NAMESPACE, since=since
    ):
        seen.append((event, obj.name))
        if obj.metadata.resourceVersion == last:
            return seen
    return seen


async def _kr8s_too_old(api: Any, kind: Kind) -> dict[str, Any]:
    """The first event of a watch from a resourceVersion the daemon no longer keeps."""
    async with api.call_api(
        "GET",
        version=kind.api_version,
        namespace=NAMESPACE,
        url=kind.plural,
        params={"watch": "true", "resourceVersion": TOO_OLD},
        stream=True,
    ) as response:
        async for line in response.aiter_lines():
            return json.loads(line)
    raise AssertionError("the watch ended without an event")


async def _kr8s_scenario(daemon: Served, kind: Kind) -> None:
    api = await _kr8s_api(daemon)
    a_name, b_name = "kr8s-a", "kr8s-b"
    cls = kr8s.asyncio.objects.new_class(
        kind=kind.kind, version=kind.api_version, namespaced=True, plural=kind.plural
    )
    a = cls(kind.manifest(a_name), api=api)
    await a.create()
    since = a.metadata.resourceVersion
    await cls(kind.manifest(b_name), api=api).create()

    got = await cls.get(a_name, namespace=NAMESPACE, api=api)
    assert got.metadata.uid == a.metadata.uid
    listed = [o.name async for o in api.get(f"{kind.plural}.{kind.group}", namespace=NAMESPACE)]
    assert {a_name, b_name} <= set(listed)

    await got.patch({"metadata": {"labels": {"merged": "yes"}}})
    assert got.labels["merged"] == "yes"
    await got.patch(
        [{"op": "add", "path": "/metadata/annotations", "value": {"json": "yes"}}], type="json"
    )
    assert got.annotations == {"json": "yes"} and got.labels["merged"] == "yes"

    applied = await _kr8s_apply(api, kind, a_name, {"owner": "one"}, "one")
    assert applied["metadata"]["labels"]["owner"] == "one"
    with pytest.raises(ServerError) as conflict:
        await _kr8s_apply(api, kind, a_name, {"owner": "two"}, "two")
    assert conflict.value.response.status_code == 409
    assert "conflict" in str(conflict.value).lower()
    forced = await _kr8s_apply(api, kind, a_name, {"owner": "two"}, "two", force=True)
    assert forced["metadata"]["labels"]["owner"] == "two"

    last = forced["metadata"]["resourceVersion"]
    seen = await asyncio.wait_for(_kr8s_watch(api, kind, since, last), WATCH_SECONDS)
    assert seen == _expected(a_name, b_name)
    gone = await _kr8s_too_old(api, kind)
    assert gone["type"] == "ERROR" and gone["object"]["code"] == 410

    for name in (a_name, b_name):
        await (await cls.get(name, namespace=NAMESPACE, api=api)).delete()
    with pytest.raises(NotFoundError):
        await cls.get(a_name, namespace=NAMESPACE, api=api)


def test_kr8s_connects_and_reads_the_version(daemon: Served) -> None:
    async def version() -> dict[str, Any]:
        return await (await _kr8s_api(daemon)).version()

    assert asyncio.run(version())["gitVersion"].startswith("v1.")


def test_kr8s_whoami_names_the_admin(daemon: Served) -> None:
    async def whoami() -> str:
        return await (await _kr8s_api(daemon)).whoami()

    assert asyncio.run(whoami()) == "diskferry-admin"


@KINDS
def test_kr8s_drives_a_kind(daemon: Served, kind: Kind) -> None:
    asyncio.run(_kr8s_scenario(daemon, kind))


# --- the kubernetes client


@dataclass
class Official:
    """One kind through the official client: typed CoreV1Api for Secrets, CustomObjectsApi
    for the diskferry kinds."""

    kind: Kind
    api: client.ApiClient

    def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def _where(self) -> tuple[str, str, str, str]:
        return (self.kind.group, self.kind.version, NAMESPACE, self.kind.plural)

    def create(self, name: str) -> dict[str, Any]:
        """Create `name`; the object as a dict."""
        body = self.kind.manifest(name)
        if self.kind is SECRET_KIND:
            made = client.CoreV1Api(self.api).create_namespaced_secret(NAMESPACE, body)
            return self.api.sanitize_for_serialization(made)
        return self._custom().create_namespaced_custom_object(*self._where(), body)

    def get(self, name: str) -> dict[str, Any]:
        """Read `name`; the object as a dict."""
        if self.kind is SECRET_KIND:
            found = client.CoreV1Api(self.api).read_namespaced_secret(name, NAMESPACE)
            return self.api.sanitize_for_serialization(found)
        return self._custom().get_namespaced_custom_object(*self._where(), name)

    def names(self) -> list[str]:
        """The names listed in the namespace."""
        if self.kind is SECRET_KIND:
            listed = client.CoreV1Api(self.api).list_namespaced_secret(NAMESPACE)
            return [item.metadata.name for item in listed.items]
        listed = self._custom().list_namespaced_custom_object(*self._where())
        return [item["metadata"]["name"] for item in listed["items"]]

    def patch(self, name: str, body: Any, content_type: str, **options: Any) -> dict[str, Any]:
        """Patch `name` with `body` sent as `content_type`; the object as a dict."""
        if self.kind is SECRET_KIND:
            done = client.CoreV1Api(self.api).patch_namespaced_secret(
                name, NAMESPACE, body, _content_type=content_type, **options
            )
            return self.api.sanitize_for_serialization(done)
        return self._custom().patch_namespaced_custom_object(
            *self._where(), name, body, _content_type=content_type, **options
        )

    def delete(self, name: str) -> None:
        """Delete `name`."""
        if self.kind is SECRET_KIND:
            client.CoreV1Api(self.api).delete_namespaced_secret(name, NAMESPACE)
        else:
            self._custom().delete_namespaced_custom_object(*self._where(), name)

    def watch(self, since: str, seconds: int) -> Iterator[dict[str, Any]]:
        """The events after `since`, for `seconds` at most."""
        if self.kind is SECRET_KIND:
            lister, args = client.CoreV1Api(self.api).list_namespaced_secret, (NAMESPACE,)
        else:
            lister, args = self._custom().list_namespaced_custom_object, self._where()
        return watch.Watch().stream(lister, *args, resource_version=since, timeout_seconds=seconds)


@pytest.fixture
def official(daemon: Served) -> Iterator[client.ApiClient]:
    """The official client configured from the daemon's kubeconfig."""
    api = config.new_client_from_config(str(daemon.kubeconfig))
    yield api
    api.close()


def test_kubernetes_client_reads_version_and_discovery(official: client.ApiClient) -> None:
    assert client.VersionApi(official).get_code().git_version.startswith("v1.")
    groups = client.ApisApi(official).get_api_versions()
    assert "diskferry.io" in {g.name for g in groups.groups}
    core = client.CoreApi(official).get_api_versions()
    assert core.versions == ["v1"]
    resources = client.CoreV1Api(official).get_api_resources()
    assert "secrets" in {r.name for r in resources.resources}


@KINDS
def test_kubernetes_client_drives_a_kind(official: client.ApiClient, kind: Kind) -> None:
    objects = Official(kind, official)
    a_name, b_name = "client-a", "client-b"
    a = objects.create(a_name)
    since = a["metadata"]["resourceVersion"]
    objects.create(b_name)
    assert objects.get(a_name)["metadata"]["uid"] == a["metadata"]["uid"]
    assert {a_name, b_name} <= set(objects.names())

    merged = objects.patch(a_name, {"metadata": {"labels": {"merged": "yes"}}}, MERGE)
    assert merged["metadata"]["labels"]["merged"] == "yes"
    op = {"op": "add", "path": "/metadata/annotations", "value": {"json": "yes"}}
    patched = objects.patch(a_name, [op], "application/json-patch+json")
    assert patched["metadata"]["annotations"] == {"json": "yes"}

    config_one = kind.applied(a_name, {"owner": "one"})
    applied = objects.patch(a_name, config_one, APPLY, field_manager="one")
    assert applied["metadata"]["labels"]["owner"] == "one"
    config_two = kind.applied(a_name, {"owner": "two"})
    with pytest.raises(ApiException) as conflict:
        objects.patch(a_name, config_two, APPLY, field_manager="two")
    assert conflict.value.status == 409
    forced = objects.patch(a_name, config_two, APPLY, field_manager="two", force=True)
    assert forced["metadata"]["labels"]["owner"] == "two"

    last = forced["metadata"]["resourceVersion"]
    seen = []
    for event in objects.watch(since, WATCH_SECONDS):
        seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
        if event["raw_object"]["metadata"]["resourceVersion"] == last:
            break
    assert seen == _expected(a_name, b_name)
    with pytest.raises(ApiException) as gone:
        list(objects.watch(TOO_OLD, WATCH_SECONDS))
    assert gone.value.status == 410

    objects.delete(a_name)
    objects.delete(b_name)
    with pytest.raises(ApiException) as missing:
        objects.get(a_name)
    assert missing.value.status == 404
