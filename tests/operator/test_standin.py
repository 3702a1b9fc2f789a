"""The stand-in cluster through kubectl, as a cluster admin and an operator meet it: what is
applied (Namespaces, RBAC, Deployments, Services, Leases, CRDs, `kubectl apply -k deploy/`) is
stored and read back, runs nothing, is watched, and is checked against Kubernetes' schemas;
SIGTERM stops it."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from daemon_support import kubectl
from standin_support import StandIn, environment, start_standin

WATCH_SECONDS = 30
DEPLOY = Path(__file__).parents[2] / "deploy"
OPERATOR = """\
apiVersion: v1
kind: Namespace
metadata: {name: diskferry-system}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: diskferry-operator, namespace: diskferry-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: diskferry-operator}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: diskferry-operator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: diskferry-operator}
subjects:
- {kind: ServiceAccount, name: diskferry-operator, namespace: diskferry-system}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: diskferry-operator, namespace: diskferry-system}
spec:
  replicas: 2
  selector:
    matchLabels: {app: diskferry-operator}
  template:
    metadata:
      labels: {app: diskferry-operator}
    spec:
      serviceAccountName: diskferry-operator
      containers:
      - name: operator
        image: localhost/diskferry:0.1.0
        args: [operator]
        ports: [{name: health, containerPort: 8081}]
        readinessProbe:
          httpGet: {path: /readyz, port: health}
---
apiVersion: v1
kind: Service
metadata: {name: diskferry-proxy, namespace: diskferry-system}
spec:
  selector: {app: diskferry-proxy}
  ports: [{port: 443, targetPort: 8443}]
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: diskferry-operator, namespace: diskferry-system}
spec: {holderIdentity: first, leaseDurationSeconds: 15}
"""


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    """One stand-in for the module's tests; SIGTERM ends it with 0."""
    base = tmp_path_factory.mktemp("standin")
    started = start_standin(base / "data", base / "standin.log")
    yield started
    assert started.stop() == 0


@pytest.fixture(scope="module")
def applied(standin: StandIn) -> StandIn:
    """The stand-in with the operator's objects and the diskferry.io CRDs applied."""
    out = kubectl(standin, "apply", "-f", "-", stdin=OPERATOR)
    for made in (
        "namespace/diskferry-system",
        "serviceaccount/diskferry-operator",
        "clusterrole.rbac.authorization.k8s.io/diskferry-operator",
        "clusterrolebinding.rbac.authorization.k8s.io/diskferry-operator",
        "deployment.apps/diskferry-operator",
        "service/diskferry-proxy",
        "lease.coordination.k8s.io/diskferry-operator",
    ):
        assert f"{made} created" in out
    crds = subprocess.run(
        [sys.executable, "-m", "diskferry.cli.main", "crds"],
        capture_output=True,
        text=True,
        check=True,
        env=environment(),
    ).stdout
    out = kubectl(standin, "apply", "-f", "-", stdin=crds)
    assert "customresourcedefinition.apiextensions.k8s.io/virtualdisks.diskferry.io created" in out
    return standin


def _json(standin: StandIn, *args: str) -> dict:
    return json.loads(kubectl(standin, "get", *args, "-o", "json"))


def test_what_is_applied_is_read_back_as_given(applied: StandIn) -> None:
    sent = {doc["kind"]: doc for doc in yaml.safe_load_all(OPERATOR)}
    deployment = _json(applied, "deployment", "diskferry-operator", "-n", "diskferry-system")
    assert deployment["spec"] == sent["Deployment"]["spec"]
    service = _json(applied, "svc", "diskferry-proxy", "-n", "diskferry-system")
    assert service["spec"]["ports"] == [{"port": 443, "targetPort": 8443}]
    binding = _json(applied, "clusterrolebinding", "diskferry-operator")
    assert binding["subjects"] == sent["ClusterRoleBinding"]["subjects"]
    crd = _json(applied, "crd", "virtualdisks.diskferry.io")
    assert crd["spec"]["names"]["kind"] == "VirtualDisk"


def test_applying_again_changes_nothing(applied: StandIn) -> None:
    out = kubectl(applied, "apply", "-f", "-", stdin=OPERATOR)
    assert "deployment.apps/diskferry-operator unchanged" in out
    assert "lease.coordination.k8s.io/diskferry-operator unchanged" in out


def test_a_deployment_is_stored_and_runs_nothing(applied: StandIn) -> None:
    deployment = _json(applied, "deployment", "diskferry-operator", "-n", "diskferry-system")
    assert "status" not in deployment
    assert _json(applied, "pods", "-A")["items"] == []


def test_a_field_the_kind_does_not_have_is_refused_by_its_path(applied: StandIn) -> None:
    bad = OPERATOR.split("---\n")[4].replace("replicas: 2", "replicas: 2\n  replicaz: 3")
    out = kubectl(applied, "apply", "-f", "-", stdin=bad.replace("operator}", "bad}"), ok=False)
    assert "spec.replicaz" in out
    where = ("-n", "diskferry-system")
    missing = kubectl(applied, "get", "deployment", "diskferry-bad", *where, ok=False)
    assert "NotFound" in missing


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


def test_a_watch_of_leases_sees_the_holder_change(applied: StandIn) -> None:
    command = [
        "kubectl",
        "--kubeconfig",
        str(applied.kubeconfig),
        "get",
        "leases",
        "-n",
        "diskferry-system",
        "-w",
    ]
    watcher = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        lines = _lines(watcher)
        assert _wait_for(lines, "diskferry-operator").split()[:2] == ["diskferry-operator", "first"]
        kubectl(
            applied,
            "patch",
            "lease",
            "diskferry-operator",
            "-n",
            "diskferry-system",
            "--type",
            "merge",
            "-p",
            '{"spec": {"holderIdentity": "second"}}',
        )
        assert _wait_for(lines, "second").split()[:2] == ["diskferry-operator", "second"]
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)


def test_a_status_is_written_through_the_subresource(applied: StandIn) -> None:
    kubectl(
        applied,
        "patch",
        "deployment",
        "diskferry-operator",
        "-n",
        "diskferry-system",
        "--subresource=status",
        "--type",
        "merge",
        "-p",
        '{"status": {"availableReplicas": 1}}',
    )
    table = kubectl(applied, "get", "deployment", "diskferry-operator", "-n", "diskferry-system")
    assert table.split("\n")[1].split()[:3] == ["diskferry-operator", "2", "1"]


def test_server_side_apply_takes_ownership_and_delete_removes(applied: StandIn) -> None:
    config_map = (
        "apiVersion: v1\nkind: ConfigMap\n"
        "metadata: {name: settings, namespace: diskferry-system}\ndata: {level: info}\n"
    )
    out = kubectl(
        applied, "apply", "--server-side", "--field-manager=admin", "-f", "-", stdin=config_map
    )
    assert "configmap/settings serverside-applied" in out
    changed = config_map.replace("level: info", "level: debug")
    kubectl(applied, "apply", "--server-side", "--field-manager=admin", "-f", "-", stdin=changed)
    stored = json.loads(
        kubectl(
            applied,
            "get",
            "cm",
            "settings",
            "-n",
            "diskferry-system",
            "-o",
            "json",
            "--show-managed-fields",
        )
    )
    assert stored["data"] == {"level": "debug"}
    assert [(f["manager"], f["operation"]) for f in stored["metadata"]["managedFields"]] == [
        ("admin", "Apply")
    ]
    assert "deleted" in kubectl(applied, "delete", "cm", "settings", "-n", "diskferry-system")
    gone = kubectl(applied, "get", "cm", "settings", "-n", "diskferry-system", ok=False)
    assert "NotFound" in gone


def test_the_manifests_a_cluster_admin_applies_are_taken(tmp_path: Path) -> None:
    started = start_standin(tmp_path / "data", tmp_path / "standin.log")
    try:
        out = kubectl(started, "apply", "-k", str(DEPLOY))
        assert "deployment.apps/diskferry-operator created" in out
        assert "customresourcedefinition.apiextensions.k8s.io/virtualdisks.diskferry.io" in out
        out = kubectl(started, "apply", "-k", str(DEPLOY / "ingress"))
        assert "ingress.networking.k8s.io/" in out
        assert _json(started, "pods", "-A")["items"] == []
    finally:
        assert started.stop() == 0


def test_sigterm_stops_it(tmp_path: Path) -> None:
    started = start_standin(tmp_path / "data", tmp_path / "standin.log")
    assert started.stop() == 0
    assert "stopped" in started.log.read_text()
