"""The real kubectl against a real `diskferry serve`: apply, get, watch, describe, patch, wait."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator

import pytest
from daemon_support import Served, kubectl, start_daemon

KUBECTL = shutil.which("kubectl")
assert KUBECTL, "these tests drive the real kubectl: install kubectl 1.32 on PATH"

MANIFESTS = """\
apiVersion: v1
kind: Secret
metadata: {name: s1}
stringData: {token: not-the-daemon-token}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {name: vd1, namespace: default}
spec:
  persistentVolumeClaim: {size: 64Mi}
  dataSource:
    type: HTTP
    http: {url: "https://example.org/disk.qcow2"}
"""
BAD = """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {name: bad}
spec:
  persistentVolumeClaim: {size: 64Mi, bogus: 1}
"""
WATCH_SECONDS = 30


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One daemon for the module's tests; on the way out, SIGTERM ends it with 0."""
    base = tmp_path_factory.mktemp("kubectl")
    served = start_daemon(base / "data", base / "daemon.log")
    yield served
    assert served.stop() == 0
    assert served.token() not in served.log.read_text()


@pytest.fixture(scope="module")
def applied(daemon: Served) -> Served:
    """The daemon with a Secret and a VirtualDisk applied, client-side validation on."""
    out = kubectl(daemon, "apply", "--validate=strict", "-f", "-", stdin=MANIFESTS)
    assert "secret/s1 created" in out
    assert "virtualdisk.diskferry.io/vd1 created" in out
    return daemon


def test_apply_again_is_unchanged_or_configured(applied: Served) -> None:
    out = kubectl(applied, "apply", "-f", "-", stdin=MANIFESTS)
    assert "virtualdisk.diskferry.io/vd1 unchanged" in out


def test_get_table_with_print_columns(applied: Served) -> None:
    lines = kubectl(applied, "get", "vd").splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "CAPACITY", "VIRTUALMACHINE", "AGE"]
    assert lines[1].split()[0] == "vd1"
    wide = kubectl(applied, "get", "virtualdisks", "-o", "wide").splitlines()[0].split()
    assert wide[:3] == ["NAME", "PHASE", "CAPACITY"] and "PROGRESS" in wide and "TARGETPVC" in wide
    everywhere = kubectl(applied, "get", "virtualdisk", "-A").splitlines()
    assert everywhere[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert everywhere[1].split()[:2] == ["default", "vd1"]
    secrets = kubectl(applied, "get", "secrets").splitlines()
    assert secrets[0].split() == ["NAME", "TYPE", "AGE"] and secrets[1].split()[:2] == [
        "s1",
        "Opaque",
    ]


def test_get_as_yaml_json_and_jsonpath(applied: Served) -> None:
    obj = json.loads(kubectl(applied, "get", "vd", "vd1", "-o", "json"))
    assert obj["spec"]["dataSource"]["http"]["url"] == "https://example.org/disk.qcow2"
    assert "kind: VirtualDisk" in kubectl(applied, "get", "vd", "vd1", "-o", "yaml")
    size = kubectl(applied, "get", "vd", "vd1", "-o", "jsonpath={.spec.persistentVolumeClaim.size}")
    assert size == "64Mi"
    listed = json.loads(kubectl(applied, "get", "vd", "-o", "json"))
    assert [i["metadata"]["name"] for i in listed["items"]] == ["vd1"]


def test_bad_manifest_refused_with_field_path(applied: Served) -> None:
    out = kubectl(applied, "apply", "-f", "-", stdin=BAD, ok=False)
    assert "spec.persistentVolumeClaim.bogus" in out
    assert "NotFound" in kubectl(applied, "get", "vd", "bad", ok=False)


def _lines(process: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _wait_for(lines: queue.Queue[str], text: str) -> str:
    while True:
        line = lines.get(timeout=WATCH_SECONDS)
        if text in line:
            return line


def test_watch_sees_status_update_and_wait_for_jsonpath(applied: Served) -> None:
    command = ["kubectl", "--kubeconfig", str(applied.kubeconfig), "get", "vd", "vd1", "-w"]
    watcher = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        lines = _lines(watcher)
        assert _wait_for(lines, "vd1").split()[0] == "vd1"
        kubectl(
            applied,
            "patch",
            "vd",
            "vd1",
            "--subresource=status",
            "--type",
            "merge",
            "-p",
            '{"status": {"phase": "Ready", "capacity": "64Mi", "progress": "100%"}}',
        )
        assert _wait_for(lines, "Ready").split()[:3] == ["vd1", "Ready", "64Mi"]
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)
    out = kubectl(
        applied, "wait", "vd/vd1", "--for=jsonpath={.status.phase}=Ready", "--timeout=30s"
    )
    assert "condition met" in out


def test_patch_merge_and_describe_with_events(applied: Served) -> None:
    out = kubectl(
        applied,
        "patch",
        "vd",
        "vd1",
        "--type",
        "merge",
        "-p",
        '{"metadata":{"labels":{"tier":"gold"}}}',
    )
    assert "patched" in out
    labels = kubectl(applied, "get", "vd", "-l", "tier=gold", "-o", "name")
    assert labels.strip() == "virtualdisk.diskferry.io/vd1"
    uid = kubectl(applied, "get", "vd", "vd1", "-o", "jsonpath={.metadata.uid}")
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "vd1.import"},
        "involvedObject": {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "VirtualDisk",
            "name": "vd1",
            "namespace": "default",
            "uid": uid,
        },
        "reason": "ImportStarted",
        "message": "importing from https://example.org/disk.qcow2",
        "type": "Normal",
        "source": {"component": "diskferry"},
    }
    kubectl(applied, "create", "-f", "-", stdin=json.dumps(event))
    described = kubectl(applied, "describe", "vd", "vd1")
    assert "Events:" in described
    assert "ImportStarted" in described and "importing from" in described
    assert "gold" in described


def test_delete(daemon: Served) -> None:
    manifest = MANIFESTS.split("---\n")[1].replace("vd1", "gone")
    kubectl(daemon, "apply", "-f", "-", stdin=manifest)
    assert 'virtualdisk.diskferry.io "gone" deleted' in kubectl(daemon, "delete", "vd", "gone")
    assert "NotFound" in kubectl(daemon, "get", "vd", "gone", ok=False)


def test_server_side_apply_creates_then_updates(daemon: Served) -> None:
    manifest = MANIFESTS.split("---\n")[1].replace("vd1", "ssa")
    first = kubectl(daemon, "apply", "--server-side", "-f", "-", stdin=manifest)
    assert "virtualdisk.diskferry.io/ssa serverside-applied" in first
    labelled = manifest.replace("namespace: default}", "namespace: default, labels: {a: b}}")
    kubectl(daemon, "apply", "--server-side", "-f", "-", stdin=labelled)
    assert kubectl(daemon, "get", "vd", "ssa", "-o", "jsonpath={.metadata.labels.a}") == "b"
    refused = kubectl(daemon, "apply", "--server-side", "-f", "-", stdin=BAD, ok=False)
    assert "spec.persistentVolumeClaim.bogus" in refused

    kubectl(daemon, "apply", "--server-side", "-f", "-", stdin=manifest)
    shown = json.loads(kubectl(daemon, "get", "vd", "ssa", "-o", "json", "--show-managed-fields"))
    assert "labels" not in shown["metadata"]
    (entry,) = shown["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["fieldsType"]) == (
        "kubectl",
        "Apply",
        "FieldsV1",
    )
    assert "f:labels" not in entry["fieldsV1"].get("f:metadata", {})
    assert "managedFields" not in kubectl(daemon, "get", "vd", "ssa", "-o", "yaml")

    bigger = manifest.replace("size: 64Mi", "size: 128Mi")
    other = ("apply", "--server-side", "--field-manager=other", "-f", "-")
    conflict = kubectl(daemon, *other, stdin=bigger, ok=False)
    assert "Apply failed with 1 conflict" in conflict
    assert '"kubectl"' in conflict and ".spec.persistentVolumeClaim.size" in conflict
    kubectl(daemon, *other[:-2], "--force-conflicts", "-f", "-", stdin=bigger)
    size = kubectl(daemon, "get", "vd", "ssa", "-o", "jsonpath={.spec.persistentVolumeClaim.size}")
    assert size == "128Mi"


def test_imperative_create_of_core_kinds_in_protobuf(daemon: Served) -> None:
    assert "namespace/team created" in kubectl(daemon, "create", "namespace", "team")
    meta = json.loads(kubectl(daemon, "get", "ns", "team", "-o", "json"))["metadata"]
    assert "generateName" not in meta
    created = kubectl(
        daemon, "-n", "team", "create", "secret", "generic", "s", "--from-literal=a=b"
    )
    assert "secret/s created" in created
    secret = json.loads(kubectl(daemon, "-n", "team", "get", "secret", "s", "-o", "json"))
    assert secret["data"] == {"a": "Yg=="} and secret["type"] == "Opaque"
    assert 'secret "s" deleted' in kubectl(daemon, "-n", "team", "delete", "secret", "s")
    assert 'namespace "team" deleted' in kubectl(daemon, "delete", "namespace", "team")


def _open_watches(daemon: Served) -> int:
    metrics = kubectl(daemon, "get", "--raw", "/metrics").splitlines()
    return int(
        next(line for line in metrics if line.startswith("diskferry_api_watches ")).split()[1]
    )


def test_a_watch_ends_when_its_client_goes(daemon: Served) -> None:
    command = ["kubectl", "--kubeconfig", str(daemon.kubeconfig), "get", "vd", "-w"]
    watcher = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            if _open_watches(daemon) == 1:
                break
        else:
            raise AssertionError("the watch did not open")
    finally:
        watcher.kill()
        watcher.wait(timeout=10)
    for _ in range(100):
        if _open_watches(daemon) == 0:
            break
    else:
        raise AssertionError("the watch outlived its client")


def test_validate_warn_creates_and_warns(daemon: Served) -> None:
    command = ["kubectl", "--kubeconfig", str(daemon.kubeconfig), "apply", "--validate=warn"]
    manifest = BAD.replace("name: bad", "name: warned")
    done = subprocess.run(
        [*command, "-f", "-"], input=manifest, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "virtualdisk.diskferry.io/warned created" in done.stdout
    assert "Warning: unknown field 'spec.persistentVolumeClaim.bogus'" in done.stderr


@pytest.mark.parametrize("mode", [(), ("--server-side",)], ids=["client-side", "server-side"])
def test_server_dry_run_apply_changes_nothing(daemon: Served, mode: tuple[str, ...]) -> None:
    name = f"dry{len(mode)}"
    manifest = MANIFESTS.split("---\n")[1].replace("vd1", name)
    kubectl(daemon, "apply", *mode, "-f", "-", stdin=manifest)
    before = json.loads(kubectl(daemon, "get", "vd", name, "-o", "json"))
    bigger = manifest.replace("size: 64Mi", "size: 128Mi")
    out = kubectl(daemon, "apply", *mode, "--dry-run=server", "-o", "json", "-f", "-", stdin=bigger)
    answer = json.loads(out)
    assert answer["spec"]["persistentVolumeClaim"]["size"] == "128Mi"
    assert answer["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert json.loads(kubectl(daemon, "get", "vd", name, "-o", "json")) == before


def test_explain_reads_openapi_v3(daemon: Served) -> None:
    spec = kubectl(daemon, "explain", "vd.spec")
    assert "KIND:       VirtualDisk" in spec and "VERSION:    v1alpha1" in spec
    assert "dataSource\t<Object>" in spec and "persistentVolumeClaim\t<Object>" in spec
    claim = kubectl(daemon, "explain", "virtualdisks.spec.persistentVolumeClaim.size")
    assert "FIELD: size" in claim
    assert "data\t<map[string]string>" in kubectl(daemon, "explain", "secret")


def test_server_side_apply_takes_over_a_client_side_apply(daemon: Served) -> None:
    manifest = MANIFESTS.split("---\n")[1].replace("vd1", "moved")
    labelled = manifest.replace("namespace: default}", "namespace: default, labels: {a: b}}")
    kubectl(daemon, "apply", "-f", "-", stdin=labelled)
    shown = json.loads(kubectl(daemon, "get", "vd", "moved", "-o", "json", "--show-managed-fields"))
    (entry,) = shown["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"]) == ("kubectl-client-side-apply", "Update")
    kubectl(daemon, "apply", "--server-side", "-f", "-", stdin=manifest)
    shown = json.loads(kubectl(daemon, "get", "vd", "moved", "-o", "json", "--show-managed-fields"))
    assert "labels" not in shown["metadata"]
    managers = {(e["manager"], e["operation"]) for e in shown["metadata"]["managedFields"]}
    assert ("kubectl", "Apply") in managers and (
        "kubectl-client-side-apply",
        "Update",
    ) not in managers

    size = '{"spec":{"persistentVolumeClaim":{"size":"96Mi"}}}'
    kubectl(daemon, "patch", "vd", "moved", "--type", "merge", "-p", size)
    bigger = manifest.replace("size: 64Mi", "size: 128Mi")
    refused = kubectl(daemon, "apply", "--server-side", "-f", "-", stdin=bigger, ok=False)
    assert 'conflict with "kubectl-patch"' in refused


def test_a_field_selector_the_kind_does_not_support_is_refused(applied: Served) -> None:
    refused = kubectl(applied, "get", "vd", "--field-selector", "spec.foo=x", ok=False)
    assert "field label not supported: spec.foo" in refused
    selector = "status.phase!=Failed,metadata.name=vd1"
    phase = kubectl(applied, "get", "vd", "--field-selector", selector, "-o", "name")
    assert phase.strip() == "virtualdisk.diskferry.io/vd1"


STORAGE_CLASSES = """\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: fast
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: diskferry.io/local
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: slow}
provisioner: diskferry.io/local
reclaimPolicy: Retain
"""


def test_get_storageclass_marks_the_default_and_expansion(daemon: Served) -> None:
    kubectl(daemon, "apply", "-f", "-", stdin=STORAGE_CLASSES)
    lines = kubectl(daemon, "get", "storageclass").splitlines()
    assert lines[0].split() == [
        "NAME",
        "PROVISIONER",
        "RECLAIMPOLICY",
        "VOLUMEBINDINGMODE",
        "ALLOWVOLUMEEXPANSION",
        "AGE",
    ]
    rows = {line.split()[0]: line.split()[1:-1] for line in lines[1:]}
    assert rows["fast"] == ["(default)", "diskferry.io/local", "Delete", "Immediate", "true"]
    assert rows["slow"] == ["diskferry.io/local", "Retain", "Immediate", "true"]
    assert kubectl(daemon, "get", "sc", "-o", "name").split() == [
        "storageclass.storage.k8s.io/fast",
        "storageclass.storage.k8s.io/slow",
    ]


def test_a_field_with_no_effect_here_warns(daemon: Served) -> None:
    manifest = STORAGE_CLASSES.split("---\n")[1].replace("slow", "fixed")
    fixed = f"{manifest}allowVolumeExpansion: false\n"
    command = ["kubectl", "--kubeconfig", str(daemon.kubeconfig), "apply", "-f", "-"]
    done = subprocess.run(command, input=fixed, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "storageclass.storage.k8s.io/fixed created" in done.stdout
    assert "Warning: allowVolumeExpansion: has no effect here: " in done.stderr
    again = subprocess.run(command, input=fixed, capture_output=True, text=True, timeout=60)
    assert "unchanged" in again.stdout and "Warning" not in again.stderr
