"""The export proxy in the cluster-shape tests: its Pod run as deploy/ runs it (the stand-in
runs no Deployment), its Route, the export CA it verifies servers with, and curl through it by
its Service's name."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from control_support import wait_until
from daemon_support import kubectl
from operator_support import NAMESPACE, Cluster
from pods_support import STEP, get_object

DEPLOY = Path(__file__).parents[2] / "deploy"
PROXY = "diskferry-export-proxy"


def export_ca(cluster: Cluster) -> str:
    """The export CA, as its Secret holds it."""
    secret = get_object(cluster, "secret", "diskferry-export-ca", "-n", NAMESPACE)
    assert secret is not None
    return base64.b64decode(secret["data"]["tls.crt"]).decode()


def proxy_route(cluster: Cluster) -> dict[str, Any] | None:
    """The export proxy's Route, once the operator made it."""
    return get_object(cluster, "route", PROXY, "-n", NAMESPACE)


def proxy_pod(cluster: Cluster, image: str) -> dict[str, Any]:
    """A Pod of the export proxy's Deployment as deploy/ has it (the stand-in runs no
    Deployment), of the image tested; once it runs."""
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY)], capture_output=True, text=True, check=True
    ).stdout
    [deployment] = [
        doc
        for doc in yaml.safe_load_all(rendered)
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == PROXY
    ]
    template = deployment["spec"]["template"]
    template["spec"]["containers"][0]["image"] = image
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template["metadata"], "name": f"{PROXY}-0", "namespace": NAMESPACE},
        "spec": template["spec"],
    }
    kubectl(cluster.standin, "apply", "-f", "-", stdin=json.dumps(pod))
    return wait_until(
        lambda: (
            (found := get_object(cluster, "pod", f"{PROXY}-0", "-n", NAMESPACE))
            and (found.get("status") or {}).get("phase") == "Running"
            and _listens(cluster, found)
            and found
        ),
        300,
        STEP,
    )


def _listens(cluster: Cluster, pod: dict[str, Any]) -> bool:
    """Whether the proxy Pod's log says it listens."""
    out = kubectl(cluster.standin, "logs", pod["metadata"]["name"], "-n", NAMESPACE)
    return "listening on" in out


def proxy_curl(ca: Path, address: str, path: str, *args: str) -> subprocess.CompletedProcess[str]:
    """curl of `path` on the export proxy's Service name, resolved to `address`."""
    name = f"{PROXY}.{NAMESPACE}.svc"
    command = [
        "curl", "--silent", "--show-error", "--max-time", "120", "--cacert", str(ca),
        "--resolve", f"{name}:8443:{address}", *args, f"https://{name}:8443{path}",
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
