"""The stand-in cluster's kubelet through kubectl: a Pod runs in podman from the built image, as
the user and with the restrictions its security context asks, on a loopback address of its own
that it learns as its IP; it reads its Secret (kept up to date while it runs), writes its
claims (a directory, and a block device), and ends with its exit code and termination message
in its status and its output as its log; it reaches the API with its ServiceAccount's token
unless told not to mount it; a deleted Pod is stopped with SIGTERM, and held by a
finalizer it keeps its final status; SIGTERM to the stand-in stops every container."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS, ENV
from standin_support import StandIn, start_standin

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 600)]
STORAGE = """\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fast}
"""


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory, pinned: str) -> Iterator[StandIn]:
    base = tmp_path_factory.mktemp("standin")
    started = start_standin(base / "data", base / "standin.log")
    kubectl(started, "apply", "-f", "-", stdin=STORAGE)
    yield started
    assert started.stop() == 0


def _pod(name: str, image: str, script: str, **spec: Any) -> str:
    """A Pod running `script` in the image's python, restricted as deploy/ restricts Pods."""
    container = {
        "name": "main",
        "image": image,
        "command": ["python", "-c", script],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        **spec.pop("container", {}),
    }
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", **spec.pop("metadata", {})},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "fsGroup": 65532,
            },
            "containers": [container],
            **spec,
        },
    }
    return json.dumps(body)


def _get(standin: StandIn, *what: str) -> dict[str, Any] | None:
    out = kubectl(standin, "get", *what, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def _phase(standin: StandIn, name: str, *phases: str, timeout: float = 120) -> dict[str, Any]:
    return wait_until(
        lambda: (
            (pod := _get(standin, "pod", name))
            and (pod.get("status") or {}).get("phase") in phases
            and pod
        ),
        timeout,
        step=0.3,
    )


def _terminated(pod: dict[str, Any]) -> dict[str, Any]:
    [status] = pod["status"]["containerStatuses"]
    return status["state"]["terminated"]


def _container(pod: dict[str, Any]) -> bool:
    """Whether podman has the container of `pod`."""
    name = f"standin-{pod['metadata']['uid']}"
    found = subprocess.run(["podman", "container", "exists", name], env=ENV, check=False)
    return found.returncode == 0


def test_a_pod_runs_on_its_own_loopback_address_and_ends_with_its_message(
    standin: StandIn, pinned: str
) -> None:
    script = (
        "import os, socket, sys\n"
        "address = os.environ['POD_IP']\n"
        "socket.socket().bind((address, 8082))\n"
        "print('out', os.getuid(), os.getgid(), os.getgroups(), flush=True)\n"
        "print('err', file=sys.stderr, flush=True)\n"
        "open('/dev/termination-log', 'w').write('bye from ' + address)\n"
        "open('/etc/written', 'w')\n"  # a read-only root refuses
    )
    env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    kubectl(
        standin, "apply", "-f", "-", stdin=_pod("hello", pinned, script, container={"env": env})
    )
    pod = _phase(standin, "hello", "Succeeded", "Failed")
    ip = pod["status"]["podIP"]
    assert ip.startswith("127.") and not ip.startswith("127.0.0.")
    ended = _terminated(pod)
    assert (pod["status"]["phase"], ended["exitCode"]) == ("Failed", 1)
    assert ended["message"] == f"bye from {ip}"
    logged = kubectl(standin, "logs", "hello")
    assert "out 65532 65532 [65532]" in logged and "err" in logged
    assert "Read-only file system" in logged


def test_a_pod_reads_its_secret_and_writes_its_claims(standin: StandIn, pinned: str) -> None:
    claims = "".join(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "storageClassName": "fast",
                    "volumeMode": mode,
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "4Mi"}},
                },
            }
        )
        + "\n"
        for name, mode in (("files", "Filesystem"), ("device", "Block"))
    )
    kubectl(standin, "apply", "-f", "-", stdin=claims)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "job", "namespace": "default"},
        "data": {"job.json": base64.b64encode(b'{"n": 1}').decode()},
    }
    kubectl(standin, "apply", "-f", "-", stdin=json.dumps(secret))
    script = (
        "import os, time\n"
        "first = open('/job/job.json').read()\n"
        "open('/data/disk.img', 'w').write(first)\n"
        "device = os.open('/dev/disk', os.O_WRONLY)\n"
        "os.write(device, b'on the device')\n"
        "os.close(device)\n"
        "open('/scratch/x', 'w')\n"
        "while open('/job/job.json').read() == first:\n"
        "    time.sleep(0.1)\n"
        "open('/dev/termination-log', 'w').write(open('/job/job.json').read())\n"
    )
    spec = {
        "container": {
            "volumeMounts": [
                {"name": "job", "mountPath": "/job", "readOnly": True},
                {"name": "files", "mountPath": "/data"},
                {"name": "scratch", "mountPath": "/scratch"},
            ],
            "volumeDevices": [{"name": "device", "devicePath": "/dev/disk"}],
        },
        "volumes": [
            {"name": "job", "secret": {"secretName": "job", "defaultMode": 0o400}},
            {"name": "files", "persistentVolumeClaim": {"claimName": "files"}},
            {"name": "device", "persistentVolumeClaim": {"claimName": "device"}},
            {"name": "scratch", "emptyDir": {}},
        ],
    }
    kubectl(standin, "apply", "-f", "-", stdin=_pod("worker", pinned, script, **spec))
    _phase(standin, "worker", "Running")
    files = _get(standin, "pv", _get(standin, "pvc", "files")["spec"]["volumeName"])  # type: ignore[index]
    written = Path(files["spec"]["hostPath"]["path"]) / "disk.img"  # type: ignore[index]
    wait_until(lambda: written.exists() and written.read_text() == '{"n": 1}', 60, step=0.3)
    changed = base64.b64encode(b'{"n": 2}').decode()
    kubectl(standin, "patch", "secret", "job", "-p", json.dumps({"data": {"job.json": changed}}))
    pod = _phase(standin, "worker", "Succeeded", "Failed")
    assert (pod["status"]["phase"], _terminated(pod)["message"]) == ("Succeeded", '{"n": 2}')
    device = _get(standin, "pv", _get(standin, "pvc", "device")["spec"]["volumeName"])  # type: ignore[index]
    backing = Path(device["spec"]["hostPath"]["path"])  # type: ignore[index]
    assert backing.read_bytes()[:13] == b"on the device"
    loops = subprocess.run(
        ["losetup", "--associated", str(backing)], capture_output=True, text=True
    )
    assert loops.stdout == ""  # detached once the Pod ended


def test_a_pod_reaches_the_api_with_its_service_account_s_token_unless_told_not_to(
    standin: StandIn, pinned: str
) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "asked", "namespace": "default"},
        "spec": {"clusterIP": "None", "selector": {"app": "none"}},
    }
    kubectl(standin, "apply", "-f", "-", stdin=json.dumps(service))
    script = (
        "import json, os, ssl, urllib.request\n"
        "folder = '/var/run/secrets/kubernetes.io/serviceaccount'\n"
        "if not os.path.exists(folder):\n"
        "    told = 'none ' + str('KUBERNETES_SERVICE_HOST' in os.environ)\n"
        "    open('/dev/termination-log', 'w').write(told)\n"
        "    raise SystemExit\n"
        "token = open(folder + '/token').read()\n"
        "namespace = open(folder + '/namespace').read()\n"
        "env = os.environ\n"
        "host = env['KUBERNETES_SERVICE_HOST'] + ':' + env['KUBERNETES_SERVICE_PORT']\n"
        "url = f'https://{host}/api/v1/namespaces/{namespace}/services/asked'\n"
        "asked = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + token})\n"
        "context = ssl.create_default_context(cafile=folder + '/ca.crt')\n"
        "found = json.load(urllib.request.urlopen(asked, context=context, timeout=30))\n"
        "open('/dev/termination-log', 'w').write(found['metadata']['name'])\n"
    )
    kubectl(standin, "apply", "-f", "-", stdin=_pod("asking", pinned, script))
    told = _pod("unmounted", pinned, script, automountServiceAccountToken=False)
    kubectl(standin, "apply", "-f", "-", stdin=told)
    asking = _phase(standin, "asking", "Succeeded", "Failed")
    assert _terminated(asking).get("message") == "asked", kubectl(standin, "logs", "asking")
    unmounted = _phase(standin, "unmounted", "Succeeded", "Failed")
    assert _terminated(unmounted).get("message") == "none False"


def test_a_deleted_pod_is_stopped_with_sigterm_and_a_finalizer_keeps_its_status(
    standin: StandIn, pinned: str
) -> None:
    script = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    open('/dev/termination-log', 'w').write('stopped')\n"
        "    sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('waiting', flush=True)\n"
        "time.sleep(600)\n"
    )
    held = {"finalizers": ["example.com/keep"]}
    kubectl(standin, "apply", "-f", "-", stdin=_pod("held", pinned, script, metadata=held))
    kubectl(standin, "apply", "-f", "-", stdin=_pod("free", pinned, script))
    running = {}
    for name in ("held", "free"):
        running[name] = _phase(standin, name, "Running")
        wait_until(lambda name=name: "waiting" in kubectl(standin, "logs", name), 60, step=0.3)
    kubectl(standin, "delete", "pod", "held", "--wait=false")
    pod = _phase(standin, "held", "Failed")
    assert (_terminated(pod)["exitCode"], _terminated(pod)["message"]) == (3, "stopped")
    unheld = '{"metadata": {"finalizers": null}}'
    kubectl(standin, "patch", "pod", "held", "--type", "merge", "-p", unheld)
    wait_until(lambda: _get(standin, "pod", "held") is None, 30, step=0.3)
    assert _container(running["free"])
    kubectl(standin, "delete", "pod", "free")
    wait_until(lambda: not _container(running["free"]), 60, step=0.3)


def test_sigterm_to_the_stand_in_stops_every_container(tmp_path: Path, pinned: str) -> None:
    standin = start_standin(tmp_path / "data", tmp_path / "standin.log")
    script = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
    kubectl(standin, "apply", "-f", "-", stdin=_pod("sleeper", pinned, script))
    pod = _phase(standin, "sleeper", "Running")
    wait_until(lambda: _container(pod), 60, step=0.3)
    assert standin.stop() == 0
    assert not _container(pod)
