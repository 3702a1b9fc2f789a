"""deploy/ as a cluster admin applies it: what `kubectl kustomize` renders validates against
Kubernetes 1.30 and 1.32, its CRDs are the ones the models make, its Pods meet the restricted
Pod Security Standard, and its ports, image and RBAC agree with the code."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from crd_support import example_documents, schema_errors

import diskferry
from diskferry.control.apiserver.crd import crds, crds_yaml
from diskferry.control.apiserver.http.app import PUBLIC
from diskferry.control.resources.model import GROUP
from diskferry.control.resources.registry import REGISTRY
from diskferry.serving import EXPORT_PORT, OPERATOR_HEALTH_PORT

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CRDS = DEPLOY / "base" / "crds.yaml"
KUBERNETES = ("1.30", "1.32")
OVERLAYS = ("", "ingress")
NAMESPACE = "diskferry-system"


@functools.cache
def render(overlay: str = "") -> list[dict[str, Any]]:
    """The objects `kubectl kustomize deploy/OVERLAY` renders (once a run: not to be changed)."""
    proc = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / overlay)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The object of `kind` named `name`."""
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def deployments() -> list[dict[str, Any]]:
    """The Deployments of deploy/."""
    return [d for d in render() if d["kind"] == "Deployment"]


def test_the_crds_in_deploy_are_the_ones_the_models_make() -> None:
    made = crds_yaml(crds(REGISTRY))
    assert CRDS.read_text() == made, (
        "deploy/base/crds.yaml is stale: run `diskferry crds > deploy/base/crds.yaml`"
    )
    labels = {"app.kubernetes.io/part-of": "diskferry"}
    rendered = {
        d["metadata"]["name"]: d for d in render() if d["kind"] == "CustomResourceDefinition"
    }
    assert rendered == {
        crd["metadata"]["name"]: {**crd, "metadata": {**crd["metadata"], "labels": labels}}
        for crd in yaml.safe_load_all(made)
    }


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_validates_against_kubernetes(overlay: str, version: str) -> None:
    docs = render(overlay)
    for doc in docs:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{where} against {version}: {'.'.join(map(str, e.path))}: {e.message}")
    kinds = {doc["kind"] for doc in docs}
    assert ("Ingress" in kinds) == (overlay == "ingress")


def test_every_namespaced_object_is_in_diskferry_system() -> None:
    docs = render("ingress")
    assert one(docs, "Namespace", NAMESPACE)
    cluster_wide = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for doc in docs:
        assert doc["metadata"].get("namespace") == (
            None if doc["kind"] in cluster_wide else NAMESPACE
        ), doc["metadata"]


@pytest.mark.parametrize("version", KUBERNETES)
def test_every_example_validates_against_the_crds_in_deploy(version: str) -> None:
    schemas = {
        crd["spec"]["names"]["kind"]: crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for crd in render()
        if crd["kind"] == "CustomResourceDefinition"
    }
    examples = example_documents()
    assert {doc["kind"] for doc in examples} & schemas.keys()
    for doc in examples:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["apiVersion"].startswith(f"{GROUP}/"):
            assert schema_errors(schemas[doc["kind"]], doc) == [], where
        else:
            kubernetes_validate.validate(doc, version, strict=True)


def test_every_container_runs_the_image_of_this_version() -> None:
    images = {
        container["image"]
        for deployment in deployments()
        for container in deployment["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"localhost/diskferry:{diskferry.__version__}"}, (
        "set images[].newTag in deploy/base/kustomization.yaml to the version"
    )


def test_every_pod_meets_the_restricted_pod_security_standard() -> None:
    labels = one(render(), "Namespace", NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    for deployment in deployments():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        scratch = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert security["readOnlyRootFilesystem"] is True
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert mounts["/tmp"] in scratch
            assert container["resources"]["requests"].keys() == {"cpu", "memory"}
            assert container["livenessProbe"] and container["readinessProbe"]


def _port(container: dict[str, Any], name: str) -> int:
    [port] = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return port


def test_the_operator_probes_the_health_port_on_the_paths_serve_answers() -> None:
    docs = render()
    operator = one(docs, "Deployment", "diskferry-operator")["spec"]["template"]["spec"]
    [container] = operator["containers"]
    assert container["args"][0] == "operator"
    assert _port(container, "health") == OPERATOR_HEALTH_PORT
    probes = {kind: container[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe")}
    assert probes == {
        "livenessProbe": {"path": "/healthz", "port": "health"},
        "readinessProbe": {"path": "/readyz", "port": "health"},
    }
    assert {"/healthz", "/readyz"} <= set(PUBLIC)
    assert operator["serviceAccountName"] == "diskferry-operator"


def test_the_operator_s_data_directory_is_a_volume_it_may_write() -> None:
    """Its root is read-only, so the data directory the local runner keeps jobs in is given
    and mounted: without it the operator would fall back to ./diskferry-data, unwritable."""
    operator = one(render(), "Deployment", "diskferry-operator")["spec"]["template"]["spec"]
    [container] = operator["containers"]
    args = container["args"]
    data_dir = args[args.index("--data-dir") + 1]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in operator["volumes"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "emptyDir" in volumes[mounts[data_dir]]


def test_the_proxy_service_takes_443_to_the_export_port() -> None:
    docs = render("ingress")
    proxy = one(docs, "Deployment", "diskferry-export-proxy")["spec"]["template"]["spec"]
    [container] = proxy["containers"]
    assert container["args"][:2] == ["proxy", "serve"]
    assert f"--port={EXPORT_PORT}" in container["args"]
    assert _port(container, "https") == EXPORT_PORT
    assert proxy["automountServiceAccountToken"] is True
    settings = next(a for a in container["args"] if a.startswith("--tls-settings="))
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    [source] = [v["configMap"] for v in proxy["volumes"] if v["name"] == "tls-settings"]
    assert settings == f"--tls-settings={mounts['tls-settings']}/settings.yaml"
    assert source == {"name": "diskferry-export-proxy-tls-settings", "optional": True}
    service = one(docs, "Service", "diskferry-export-proxy")["spec"]
    assert service["ports"] == [{"name": "https", "port": 443, "targetPort": "https"}]
    template = one(docs, "Deployment", "diskferry-export-proxy")["spec"]["template"]
    assert service["selector"].items() <= template["metadata"]["labels"].items()
    [rule] = one(docs, "Ingress", "diskferry-export-proxy")["spec"]["rules"]
    [path] = rule["http"]["paths"]
    backend = {"name": "diskferry-export-proxy", "port": {"name": "https"}}
    assert path["backend"]["service"] == backend


def _rules(
    docs: list[dict[str, Any]], kind: str, name: str = "diskferry-operator"
) -> dict[tuple[str, str], set[str]]:
    """The verbs the role `name` of `kind` grants, by (group, resource)."""
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in one(docs, kind, name)["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def test_the_operator_may_reconcile_every_kind_and_elect_a_leader_in_its_namespace() -> None:
    docs = render()
    cluster = _rules(docs, "ClusterRole")
    plurals = {info.plural for info in REGISTRY.kinds if info.group == GROUP}
    assert {resource for group, resource in cluster if group == GROUP} == plurals | {
        "*/status",
        "*/finalizers",
    }
    assert all("watch" in cluster[(GROUP, plural)] for plural in plurals)
    assert "*" not in {verb for verbs in cluster.values() for verb in verbs}
    assert {"list", "watch"}.isdisjoint(cluster[("", "secrets")])
    local = _rules(docs, "Role")
    assert local[("coordination.k8s.io", "leases")] == {"get", "create", "update"}
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        binding = one(docs, kind, "diskferry-operator")
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "diskferry-operator", "namespace": NAMESPACE}
        ]


def test_the_proxy_may_read_services_by_name_and_nothing_else() -> None:
    """It tells an export whose Service has no address yet (503) from none (404)."""
    docs = render()
    assert _rules(docs, "ClusterRole", "diskferry-export-proxy") == {("", "services"): {"get"}}
    binding = one(docs, "ClusterRoleBinding", "diskferry-export-proxy")
    assert binding["roleRef"]["name"] == "diskferry-export-proxy"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "diskferry-export-proxy", "namespace": NAMESPACE}
    ]


def test_every_rule_says_why() -> None:
    lines = (DEPLOY / "base" / "rbac.yaml").read_text().splitlines()
    for number, line in enumerate(lines):
        if re.match(r"\s*- apiGroups:", line):
            assert lines[number - 1].lstrip().startswith("#"), f"rbac.yaml:{number + 1}: {line}"
