"""`kubectl apply -f` of a `kind: List` and of a file mixing kinds, with client-side validation
on (kubectl's default, `--validate=strict`): kubectl reads `/openapi/v2` in protobuf for a List
and validates each item against it, as it does against kube-apiserver."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from daemon_support import Served, kubectl, start_daemon

LIST = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: listed}
- apiVersion: v1
  kind: Secret
  metadata: {name: listed-secret, namespace: default}
  stringData: {key: value}
- apiVersion: diskferry.io/v1alpha1
  kind: VirtualDisk
  metadata: {name: listed-disk, namespace: default}
  spec:
    persistentVolumeClaim: {size: 64Mi}
"""
MIXED = """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {name: mixed-disk, namespace: default}
spec:
  persistentVolumeClaim: {size: 64Mi}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Secret
  metadata: {name: mixed-secret, namespace: default}
  stringData: {key: value}
- apiVersion: diskferry.io/v1alpha1
  kind: VirtualDiskSnapshot
  metadata: {name: mixed-snapshot, namespace: default}
  spec: {virtualDiskName: mixed-disk}
"""
UNKNOWN_FIELD = """\
apiVersion: v1
kind: List
items:
- apiVersion: diskferry.io/v1alpha1
  kind: VirtualDisk
  metadata: {name: wrong-disk, namespace: default}
  spec:
    persistentVolumeClaim: {size: 64Mi, bogus: 1}
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One daemon, without controllers, for the module's tests."""
    base = tmp_path_factory.mktemp("kubectl-list")
    served = start_daemon(base / "data", base / "daemon.log")
    yield served
    assert served.stop() == 0


def _names(daemon: Served, resource: str) -> set[str]:
    listed = json.loads(kubectl(daemon, "get", resource, "-n", "default", "-o", "json"))
    return {item["metadata"]["name"] for item in listed["items"]}


def test_apply_of_a_list_validates_and_creates_each_item(daemon: Served) -> None:
    out = kubectl(daemon, "apply", "--validate=strict", "-f", "-", stdin=LIST)
    assert "namespace/listed created" in out
    assert "secret/listed-secret created" in out
    assert "virtualdisk.diskferry.io/listed-disk created" in out
    namespaces = json.loads(kubectl(daemon, "get", "namespaces", "-o", "json"))["items"]
    assert "listed" in {item["metadata"]["name"] for item in namespaces}
    assert "listed-disk" in _names(daemon, "vd")


def test_apply_of_a_file_mixing_kinds_and_a_list(daemon: Served) -> None:
    out = kubectl(daemon, "apply", "-f", "-", stdin=MIXED)
    assert "virtualdisk.diskferry.io/mixed-disk created" in out
    assert "secret/mixed-secret created" in out
    assert "virtualdisksnapshot.diskferry.io/mixed-snapshot created" in out
    assert "mixed-snapshot" in _names(daemon, "vdsnapshot")


def test_a_list_item_with_an_unknown_field_is_refused_by_kubectl(daemon: Served) -> None:
    out = kubectl(daemon, "apply", "-f", "-", stdin=UNKNOWN_FIELD, ok=False)
    assert 'unknown field "bogus"' in out
    assert "wrong-disk" not in _names(daemon, "vd")
