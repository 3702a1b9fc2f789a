"""The worker Pod of a job, the Secret that carries its job, and the Service of its server:
what the Pod runner creates.

One Pod a job, `diskferry-<job>` (the job's id when it is a DNS label short enough, else a
digest of it), restartPolicy Never, owned by the object whose job it is; it runs the operator's
own image as `python -m <engine>.worker job.json`, in the folder where the Secret of the same
name is mounted read-only: `job.json` and the files given to the job, credentials among them,
never in the Pod's spec or environment, and OUTPUT_KEY, the key its worker tags the output
files it writes into its log with (`diskferry.worker.output`), named in its environment. It
runs as the image's user under the restricted Pod Security Standard, with no service account
token, a scratch emptyDir as its TMPDIR and its cache's home (a repository's index cache lives
as long as the Pod), and the claims the job names mounted (Filesystem) or mapped (Block) where
the job finds them (`claims`), read-only those it only reads. Its worker answers /progress on
WORKER_STATUS_PORT of the Pod's IP, which the Pod passes down, and writes its result to the
Pod's termination message; a finalizer keeps a Pod deleted while it ran (a cancelled job)
until the runner has read how it ended.

A job that serves (an upload or export server) listens on a port of its Pod's address, which a
headless Service selects (its job's label), as Deckhouse's uploader and KubeVirt's export
server are reached: by `<service>.<namespace>.svc` and the port, names its certificate is issued
for (`service_names`). The Service is named by the first of them (the Pod's name for an upload
server, KubeVirt's `virt-export-<name>` for an export's), kept in the Pod's annotation
SERVICE; the Pod opens that port on an OVN primary user-defined network too (OPEN_PORTS), and
is ready once it accepts there.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diskferry.kube.claims import DEVICE, folder
from diskferry.serving.defaults import WORKER_STATUS_PORT
from diskferry.worker.output import OUTPUT_KEY_ENV
from diskferry.worker.pod import ADDRESS_ENV, RESULT_FILE_ENV

CONTAINER = "worker"
JOB_FOLDER = "/var/run/diskferry/job"
JOB_FILE = "job.json"
OUTPUT_KEY = "output.key"
"""The key of the job's Secret its worker tags its outputs with: never a job's file's name."""
SCRATCH = "/tmp"
MESSAGE_PATH = "/dev/termination-log"
USER = 65532
"""The image's user, diskferry, by number so that runAsNonRoot can check it."""
GRACE_SECONDS = 30
"""How long a worker has to stop (and clean up what it made) once its Pod is deleted."""
FINALIZER = "diskferry.io/worker"
JOB_LABEL = "diskferry.io/job"
KEPT = "diskferry.io/kept"
"""The label of a failed worker's Pod kept for debugging."""
JOB_ID = "diskferry.io/job-id"
CREDENTIALS = "diskferry.io/credentials"
"""The annotation of a job's Secret naming its keys that are credentials, removed once the job
has ended, however it ended."""
WORKERS = {"app.kubernetes.io/name": "diskferry", "app.kubernetes.io/component": "worker"}
"""The labels every worker Pod and its Secret carry (and the selector that finds them)."""
SERVER_PORT_NAME = "server"
"""The name of the port of a job's server, in its Pod and its Service."""
SERVICE = "diskferry.io/service"
"""The annotation of a serving job's Pod naming its Service."""
OPEN_PORTS = "k8s.ovn.org/open-default-ports"
"""The annotation by which a Pod on an OVN primary user-defined network opens ports of its
default network, where the export proxy and other namespaces reach it."""
CLUSTER_DOMAIN = "cluster.local"
READY_PERIOD_SECONDS = 2
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$")


@dataclass(frozen=True)
class Mount:
    """A claim given to a Pod: its name in the job's paths, the PVC that backs it now, whether
    it is a Block claim, and whether the Pod only reads it (given read-only)."""

    namespace: str
    claim: str
    pvc: str
    block: bool
    read_only: bool = False


def job_key(job_id: str) -> str:
    """What names the job's Pod and Secret and labels them: its id, when that is a DNS label
    short enough, else a digest of it."""
    if _LABEL.match(job_id):
        return job_id
    return "j" + hashlib.sha256(job_id.encode()).hexdigest()[:40]


def pod_name(job_id: str) -> str:
    """The name of the job's Pod and of its Secret."""
    return f"diskferry-{job_key(job_id)}"


def service_names(name: str, namespace: str) -> tuple[str, ...]:
    """The names the Service `name` of `namespace` is reached by in the cluster, the shortest
    (its own) first."""
    return (
        name,
        f"{name}.{namespace}",
        f"{name}.{namespace}.svc",
        f"{name}.{namespace}.svc.{CLUSTER_DOMAIN}",
    )


def selector() -> str:
    """The label selector of every worker Pod."""
    return ",".join(f"{key}={value}" for key, value in WORKERS.items())


def _metadata(job_id: str, namespace: str, owner: Mapping[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": pod_name(job_id),
        "namespace": namespace,
        "labels": {**WORKERS, JOB_LABEL: job_key(job_id)},
        "annotations": {JOB_ID: job_id},
    }
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    return meta


def job_secret(
    job_id: str,
    namespace: str,
    files: Mapping[str, bytes],
    credentials: Sequence[str],
    owner: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The Secret holding the job's files (`job.json` among them)."""
    meta = _metadata(job_id, namespace, owner)
    meta["annotations"][CREDENTIALS] = ",".join(sorted(credentials))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {name: base64.b64encode(data).decode() for name, data in files.items()},
    }


def job_service(
    job_id: str, namespace: str, name: str, port: int, owner: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The headless Service `name` of the job's server, on `port` of its Pod, which it names
    before the Pod is ready, so that the export proxy tells a server that is starting (it
    refuses) from no server at all (the name resolves to nothing)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**_metadata(job_id, namespace, owner), "name": name},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {JOB_LABEL: job_key(job_id)},
            "ports": [
                {"name": SERVER_PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}
            ],
        },
    }


def _claims(mounts: Sequence[Mount]) -> tuple[list[Any], list[Any], list[Any]]:
    """The Pod's volumes, volumeMounts and volumeDevices of `mounts`."""
    volumes, mounted, mapped = [], [], []
    for number, mount in enumerate(mounts):
        name = f"claim-{number}"
        only_read = {"readOnly": True} if mount.read_only else {}
        volumes.append(
            {"name": name, "persistentVolumeClaim": {"claimName": mount.pvc, **only_read}}
        )
        where = folder(mount.namespace, mount.claim)
        if mount.block:
            mapped.append({"name": name, "devicePath": f"{where}/{DEVICE}"})
        else:
            mounted.append({"name": name, "mountPath": where, **only_read})
    return volumes, mounted, mapped


@dataclass(frozen=True)
class Served:
    """A job's server: its port, and the name of the Service in front of it."""

    port: int
    service: str


def open_ports(port: int) -> str:
    """The value of OPEN_PORTS that opens the TCP `port`."""
    return f"- protocol: tcp\n  port: {port}\n"


def worker_pod(
    job_id: str,
    namespace: str,
    module: str,
    image: str,
    mounts: Sequence[Mount],
    owner: Mapping[str, Any] | None,
    serves: Served | None = None,
) -> dict[str, Any]:
    """The Pod that runs the job's worker `module` from `image`, with `mounts`, its server as
    `serves` says when it runs one."""
    meta = _metadata(job_id, namespace, owner)
    meta["finalizers"] = [FINALIZER]
    volumes, mounted, mapped = _claims(mounts)
    server_ports = []
    if serves is not None:
        meta["annotations"].update({SERVICE: serves.service, OPEN_PORTS: open_ports(serves.port)})
        server_ports.append({"name": SERVER_PORT_NAME, "containerPort": serves.port})
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", module, JOB_FILE],
        "workingDir": JOB_FOLDER,
        "env": [
            {"name": "TMPDIR", "value": SCRATCH},
            {"name": "XDG_RUNTIME_DIR", "value": SCRATCH},
            {"name": "XDG_CACHE_HOME", "value": SCRATCH},
            {"name": RESULT_FILE_ENV, "value": MESSAGE_PATH},
            {"name": OUTPUT_KEY_ENV, "value": f"{JOB_FOLDER}/{OUTPUT_KEY}"},
            {"name": ADDRESS_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "ports": [
            {"name": "progress", "containerPort": WORKER_STATUS_PORT},
            *server_ports,
        ],
        "terminationMessagePath": MESSAGE_PATH,
        "terminationMessagePolicy": "File",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "job", "mountPath": JOB_FOLDER, "readOnly": True},
            {"name": "scratch", "mountPath": SCRATCH},
            *mounted,
        ],
    }
    if mapped:
        container["volumeDevices"] = mapped
    if serves is not None:
        container["readinessProbe"] = {
            "tcpSocket": {"port": SERVER_PORT_NAME},
            "periodSeconds": READY_PERIOD_SECONDS,
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": GRACE_SECONDS,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": USER,
                "runAsGroup": USER,
                "fsGroup": USER,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
            "volumes": [
                {"name": "job", "secret": {"secretName": pod_name(job_id), "defaultMode": 0o440}},
                {"name": "scratch", "emptyDir": {}},
                *volumes,
            ],
        },
    }
