"""The stand-in cluster's kubelet: it runs each Pod stored in the stand-in's API in podman, from
the image the Pod names, and writes the Pod's status back, as a kubelet does on a node.

- It registers the stand-in's nodes (Nodes labelled with their hostname, Ready) and runs the
  Pods the scheduler bound to one of them (`spec.nodeName`, see standin_scheduler): all on this
  host, each Pod told its node's name.

- One container a Pod (no init containers), run with Debian's podman under the repository's
  containers.conf (runc, the cgroupfs manager, no default ulimits), `--pull never`: the image
  must be in podman's store (`make image`).
- Host networking, the Pod's IP a loopback address of its own from 127.0.0.0/8 (not 127.0.0.x),
  which the container learns as `status.podIP` through the downward API: nothing a Pod serves
  leaves loopback, and two Pods may listen on the same port. Its /etc/hosts and
  /etc/resolv.conf are the cluster's DNS (standin_dns): a headless Service's name leads to the
  Pods it selects, and no name is looked up beyond loopback.
- The Pod's security context as podman flags: runAsUser and runAsGroup (--user), fsGroup and
  supplementalGroups (--group-add), readOnlyRootFilesystem (--read-only), capabilities dropped,
  allowPrivilegeEscalation false (no-new-privileges).
- Volumes: a Secret's or a ConfigMap's keys as files (defaultMode, group fsGroup; an optional
  one missing as an empty folder), kept up to date while the Pod runs, as the kubelet
  refreshes them; an emptyDir; a claim once it is Bound, through its
  volume's hostPath: a directory mounted (volumeMounts, Filesystem; its group made fsGroup) or a
  file behind a loop device (volumeDevices, Block; the device owned by the container's user, as
  containerd's device_ownership_from_security_context does), read-only where the Pod's volume
  or mount says `readOnly`. A Pod waits Pending until each of its claims is bound; one whose
  claim's volume is not usable on its node (its nodeAffinity) fails to start, saying so.
- Its ServiceAccount's token, the API's CA and its namespace under
  /var/run/secrets/kubernetes.io/serviceaccount, and KUBERNETES_SERVICE_HOST and _PORT naming
  the stand-in's API, unless `automountServiceAccountToken` (the Pod's, else its
  ServiceAccount's) is false. The stand-in checks no RBAC: the token is the API's one token.
- Status: Pending while its volumes are made, Running with its IP, then Succeeded or Failed
  with the container's exit code and its termination message (terminationMessagePath, 4096
  bytes at most); its output (stdout and stderr, one stream) is served as `pods/log`.
- A Pod deleted is stopped (SIGTERM, SIGKILL after its grace period): one without finalizers is
  gone at once; one held by a finalizer gets its final status, and goes once the finalizer is
  removed. SIGTERM to the stand-in stops every container it started.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import shutil
import socket
import subprocess
import threading
from base64 import b64decode
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from standin_dns import ClusterDns
from standin_loop import Loop, kind
from standin_scheduler import DEFAULT_NODE, node_labels, volume_allows
from standin_storage import MERGE, backing

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.errors import AlreadyExistsError, ApiError, NotFoundError
from diskferry.control.resources.kinds import KindInfo
from diskferry.control.runtime.runner.tail import tail_lines

log = logging.getLogger("standin.kubelet")
CONTAINERS_CONF = Path(__file__).resolve().parents[1] / "image" / "containers.conf"
LABEL = "io.diskferry.standin"
MESSAGE_LIMIT = 4096
LOG_LINES = 10_000
DEFAULT_GRACE = 30
SHUTDOWN_GRACE = 10
DEFAULT_MESSAGE_PATH = "/dev/termination-log"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
START_FAILED = 128  # the exit code containerd reports for a container that could not start
LOST = 137
FIELDS = {
    "metadata.name": lambda pod, ip: pod["metadata"]["name"],
    "metadata.namespace": lambda pod, ip: pod["metadata"]["namespace"],
    "metadata.uid": lambda pod, ip: pod["metadata"]["uid"],
    "spec.serviceAccountName": lambda pod, ip: pod["spec"].get("serviceAccountName", "default"),
    "spec.nodeName": lambda pod, ip: pod["spec"].get("nodeName", DEFAULT_NODE),
    "status.podIP": lambda pod, ip: ip,
    "status.hostIP": lambda pod, ip: "127.0.0.1",
}
Obj = dict[str, Any]


class PodRefused(Exception):
    """The Pod asks for something the stand-in kubelet cannot give it."""


def _podman_env() -> dict[str, str]:
    return {
        **os.environ,
        "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(CONTAINERS_CONF)),
    }


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`podman ARGS` under the repository's containers.conf, its output captured."""
    return subprocess.run(
        ["podman", *args],
        env=_podman_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _pod_address(taken: set[str]) -> str:
    """A loopback address no Pod of this kubelet has and nothing on this host listens on."""
    while True:
        address = f"127.{random.randint(1, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"
        if address in taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((address, 0))
            except OSError:
                continue
        return address


def _losetup(*args: str) -> str:
    done = subprocess.run(["losetup", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PodRefused(f"losetup {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def container_status(container: Obj, state: Obj) -> Obj:
    """The status of `container` in `state` (waiting, running or terminated)."""
    return {
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "ready": "running" in state,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
    }


@dataclass(frozen=True)
class ApiAccess:
    """What a Pod is given to reach the API: its address, the CA that verifies it, a token."""

    host: str
    port: int
    ca: bytes
    token: bytes


@dataclass
class Prepared:
    """What a Pod's container is given: podman's flags for its volumes and devices, and the
    loop devices attached for it."""

    flags: list[str] = field(default_factory=list)
    loops: list[str] = field(default_factory=list)


class PodWorker:
    """Runs one Pod: its volumes made, its container run to its end, its status written."""

    def __init__(self, kubelet: Kubelet, pod: Obj) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.uid = meta["uid"]
        self.namespace = meta["namespace"]
        self.name = meta["name"]
        self.directory = kubelet.root / self.uid
        self.container_name = f"standin-{self.uid}"
        [self.container] = pod["spec"]["containers"]
        self.log_path = self.directory / f"{self.container['name']}.log"
        self.address: str | None = None
        self.stopping = threading.Event()
        self.grace = int(pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE))
        self.process: subprocess.Popen[bytes] | None = None
        self.sources: dict[str, str] = {}  # a Secret or ConfigMap volume's: the version written
        self.thread = threading.Thread(target=self._run, name=f"pod-{self.name}", daemon=True)

    # --- status

    def _status(self, status: Obj) -> None:
        with contextlib.suppress(NotFoundError):  # deleted meanwhile: nothing to tell
            self.kubelet.write_status(self.pod, status)

    def _container_status(self, state: Obj) -> Obj:
        return container_status(self.container, state)

    def _waiting(self, message: str) -> None:
        state = {"waiting": {"reason": "ContainerCreating", "message": message}}
        self._status({"phase": "Pending", "containerStatuses": [self._container_status(state)]})

    def ended(
        self, code: int, message: str, started: str | None, reason: str | None = None
    ) -> None:
        terminated: Obj = {
            "exitCode": code,
            "reason": reason or ("Completed" if code == 0 else "Error"),
            "finishedAt": self.kubelet.service.clock.stamp(),
        }
        if started:
            terminated["startedAt"] = started
        if message:
            terminated["message"] = message
        self._status(
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [self._container_status({"terminated": terminated})],
            }
        )

    # --- volumes

    def _fs_group(self) -> int | None:
        return (self.pod["spec"].get("securityContext") or {}).get("fsGroup")

    def _owned(self, path: Path, mode: int) -> None:
        """`path` made `mode` and given the Pod's fsGroup, as the kubelet applies it to a
        volume."""
        group = self._fs_group()
        if group is not None:
            os.chown(path, -1, group)
        os.chmod(path, mode)

    def _claim_path(self, claim: str) -> tuple[Path, bool] | None:
        """The hostPath of the volume the Pod's claim `claim` is bound to, and whether it is a
        Block volume; None while it is not bound."""
        try:
            pvc = self.kubelet.service.get(self.kubelet.claims, self.namespace, claim)
        except NotFoundError:
            return None
        volume = pvc["spec"].get("volumeName")
        if not volume or (pvc.get("status") or {}).get("phase") != "Bound":
            return None
        pv = self.kubelet.service.get(self.kubelet.volumes, None, volume)
        path = backing(pv)
        if path is None:
            raise PodRefused(f"the volume {volume} of claim {claim} has no hostPath")
        node = self.pod["spec"].get("nodeName", DEFAULT_NODE)
        if not volume_allows(pv, node):
            raise PodRefused(f"the volume {volume} of claim {claim} is not usable on {node}")
        return path, pv["spec"].get("volumeMode") == "Block"

    def _write_source(self, volume: Obj) -> bool:
        """Write the keys of the volume's Secret or ConfigMap into its folder, replacing each
        changed file at once; whether it was found (an optional one missing is found empty)."""
        secret = "secret" in volume
        source = volume["secret" if secret else "configMap"]
        try:
            found = self.kubelet.service.get(
                self.kubelet.secrets if secret else self.kubelet.config_maps,
                self.namespace,
                source["secretName" if secret else "name"],
            )
        except NotFoundError:
            if not source.get("optional"):
                return False
            found = {"metadata": {"resourceVersion": ""}}
        version = found["metadata"]["resourceVersion"]
        if self.sources.get(volume["name"]) == version:
            return True
        if secret:
            data = {key: b64decode(value) for key, value in (found.get("data") or {}).items()}
        else:
            data = {key: value.encode() for key, value in (found.get("data") or {}).items()}
        self._write_files(Path("volumes") / volume["name"], data, source.get("defaultMode", 0o644))
        self.sources[volume["name"]] = version
        return True

    def _write_files(self, folder: Path, data: dict[str, bytes], mode: int) -> Path:
        """`data` as the files of the Pod's `folder`, each replaced at once and readable by its
        fsGroup, and no other file; the folder."""
        where = self.directory / folder
        where.mkdir(parents=True, exist_ok=True, mode=0o750)
        self._owned(where, 0o2750)
        for key, value in data.items():
            temporary = where / f"..{key}.tmp"
            temporary.write_bytes(value)
            self._owned(temporary, mode | (0o040 if self._fs_group() is not None else 0))
            os.replace(temporary, where / key)
        for left in where.iterdir():
            if left.name not in data:
                left.unlink()
        return where

    def _service_account(self) -> list[str]:
        """podman's flags that give the container its ServiceAccount's token, the API's CA and
        its namespace at SERVICE_ACCOUNT, and the API's address in its environment, as the
        kubelet mounts them unless the Pod, or else its ServiceAccount, says not to; none
        then."""
        spec = self.pod["spec"]
        automount = spec.get("automountServiceAccountToken")
        if automount is None:
            try:
                account = self.kubelet.service.get(
                    self.kubelet.accounts, self.namespace, spec.get("serviceAccountName", "default")
                )
            except NotFoundError:
                account = {}
            automount = account.get("automountServiceAccountToken", True)
        if not automount:
            return []
        api = self.kubelet.api()
        files = {"token": api.token, "ca.crt": api.ca, "namespace": self.namespace.encode()}
        where = self._write_files(Path("serviceaccount"), files, 0o644)
        return [
            "-v", f"{where}:{SERVICE_ACCOUNT}:ro",
            "--env", f"KUBERNETES_SERVICE_HOST={api.host}",
            "--env", f"KUBERNETES_SERVICE_PORT={api.port}",
        ]  # fmt: skip

    def refresh_sources(self) -> None:
        """Bring the Secret and ConfigMap volumes up to date with their sources."""
        for volume in self.pod["spec"].get("volumes") or []:
            if volume["name"] in self.sources:
                self._write_source(volume)

    def _prepare(self) -> Prepared | None:
        """podman's flags for every volume of the Pod, each made ready; None while one waits
        (a claim not bound, a Secret missing)."""
        spec = self.pod["spec"]
        mounts = {m["name"]: m for m in self.container.get("volumeMounts") or []}
        devices = {d["name"]: d for d in self.container.get("volumeDevices") or []}
        prepared = Prepared()
        for volume in spec.get("volumes") or []:
            name = volume["name"]
            if "secret" in volume or "configMap" in volume:
                if not self._write_source(volume):
                    source = volume.get("secret") or volume["configMap"]
                    missing = source.get("secretName") or source.get("name")
                    self._waiting(f"the {'Secret' if 'secret' in volume else 'ConfigMap'} "
                                  f"{missing} is missing")  # fmt: skip
                    return None
                where: Path = self.directory / "volumes" / name
            elif "emptyDir" in volume:
                where = self.directory / "volumes" / name
                where.mkdir(parents=True, exist_ok=True, mode=0o770)
                self._owned(where, 0o2770)
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                only_read = bool(volume["persistentVolumeClaim"].get("readOnly"))
                found = self._claim_path(claim)
                if found is None:
                    self._waiting(f"waiting for the claim {claim} to be bound")
                    return None
                where, is_block = found
                if is_block != (name in devices):
                    raise PodRefused(
                        f"the claim {claim} is {'Block' if is_block else 'Filesystem'}: "
                        f"give it in {'volumeDevices' if is_block else 'volumeMounts'}"
                    )
                if is_block:
                    loop = _losetup("--find", "--show", str(where))
                    prepared.loops.append(loop)
                    user = self._user()
                    os.chown(loop, user[0] if user else 0, user[1] if user else 0)
                    access = "rm" if only_read else "rwm"
                    prepared.flags += ["--device", f"{loop}:{devices[name]['devicePath']}:{access}"]
                    continue
                self._owned(where, 0o2770)
            else:
                raise PodRefused(f"the stand-in kubelet gives no volume of the kind of {name}")
            if name in mounts:
                mount = mounts[name]
                read_only = (
                    mount.get("readOnly")
                    or "secret" in volume
                    or "configMap" in volume
                    or (volume.get("persistentVolumeClaim") or {}).get("readOnly")
                )
                prepared.flags += [
                    "-v",
                    f"{where}:{mount['mountPath']}:{'ro' if read_only else 'rw'}",
                ]
        return prepared

    # --- the container

    def _user(self) -> tuple[int, int] | None:
        context = {
            **(self.pod["spec"].get("securityContext") or {}),
            **(self.container.get("securityContext") or {}),
        }
        user = context.get("runAsUser")
        return None if user is None else (user, context.get("runAsGroup", user))

    def _env(self) -> list[str]:
        flags = []
        for variable in self.container.get("env") or []:
            if "value" in variable or "valueFrom" not in variable:
                value = variable.get("value", "")
            else:
                path = ((variable["valueFrom"].get("fieldRef")) or {}).get("fieldPath")
                if path not in FIELDS:
                    raise PodRefused(f"the stand-in kubelet cannot give {variable['name']}")
                value = FIELDS[path](self.pod, self.address)
            flags += ["--env", f"{variable['name']}={value}"]
        return flags

    def _security(self) -> list[str]:
        pod_context = self.pod["spec"].get("securityContext") or {}
        context = self.container.get("securityContext") or {}
        flags = []
        user = self._user()
        if user is not None:
            flags += ["--user", f"{user[0]}:{user[1]}"]
        groups = [pod_context.get("fsGroup"), *(pod_context.get("supplementalGroups") or [])]
        for group in filter(lambda g: g is not None, groups):
            flags += ["--group-add", str(group)]
        if context.get("readOnlyRootFilesystem"):
            flags.append("--read-only")
        if "ALL" in ((context.get("capabilities") or {}).get("drop") or []):
            flags += ["--cap-drop", "all"]
        if context.get("allowPrivilegeEscalation") is False:
            flags += ["--security-opt", "no-new-privileges"]
        return flags

    def _message_file(self) -> tuple[Path, str]:
        path = self.directory / f"{self.container['name']}.termination-log"
        path.touch(mode=0o600)
        user = self._user()
        if user is not None:
            os.chown(path, *user)
        return path, self.container.get("terminationMessagePath") or DEFAULT_MESSAGE_PATH

    def _command(self, prepared: Prepared, message: tuple[Path, str]) -> list[str]:
        container = self.container
        command = ["podman", "run", "--rm", "--name", self.container_name]
        command += ["--label", f"{LABEL}={self.kubelet.tag}", "--pull", "never"]
        command += ["--network", "host", *self.kubelet.dns.flags()]
        command += [*self._security(), *self._env(), *self._service_account(), *prepared.flags]
        command += ["-v", f"{message[0]}:{message[1]}:rw"]
        if container.get("workingDir"):
            command += ["--workdir", container["workingDir"]]
        if container.get("command"):
            command += ["--entrypoint", json.dumps(container["command"])]
        return [*command, container["image"], *(container.get("args") or [])]

    def _run(self) -> None:
        prepared: Prepared | None = None
        try:
            self.directory.mkdir(mode=0o700, exist_ok=True)
            while prepared is None:
                prepared = self._prepare()
                if prepared is None and self.stopping.wait(0.5):
                    self.ended(LOST, "the Pod was deleted before it started", None, "Deleted")
                    return
            self.address = _pod_address(self.kubelet.addresses())
            message = self._message_file()
            command = self._command(prepared, message)
            if self.stopping.is_set():
                self.ended(LOST, "the Pod was deleted before it started", None, "Deleted")
                return
            self._contain(command, message[0])
        except PodRefused as refused:
            log.warning("pod %s/%s: %s", self.namespace, self.name, refused)
            self.ended(START_FAILED, str(refused), None, "StartError")
        except Exception as e:  # the Pod fails, not the kubelet
            log.exception("pod %s/%s", self.namespace, self.name)
            self.ended(START_FAILED, f"the stand-in kubelet failed: {e}", None, "StartError")
        finally:
            for loop in prepared.loops if prepared else []:
                with contextlib.suppress(PodRefused):
                    _losetup("--detach", loop)
            self.address = None

    def _contain(self, command: list[str], message: Path) -> None:
        started = self.kubelet.service.clock.stamp()
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=_podman_env(),
            )
        log.info(
            "pod %s/%s (uid %s) started in podman at %s",
            self.namespace,
            self.name,
            self.uid,
            self.address,
        )
        self._status(
            {
                "phase": "Running",
                "hostIP": "127.0.0.1",
                "podIP": self.address,
                "podIPs": [{"ip": self.address}],
                "startTime": started,
                "containerStatuses": [self._container_status({"running": {"startedAt": started}})],
            }
        )
        code = self.process.wait()
        text = message.read_bytes()[:MESSAGE_LIMIT].decode(errors="replace")
        if code in (125, 126, 127) and not text:  # podman's own: it could not start it
            last = tail_lines(self.log_path, 1)
            self.ended(START_FAILED, last[0] if last else "podman failed", started, "StartError")
        else:
            self.ended(code, text, started)
        log.info("pod %s/%s ended with %d", self.namespace, self.name, code)

    def stop(self, grace: int) -> None:
        """Stop the container: SIGTERM, then SIGKILL after `grace` seconds."""
        self.stopping.set()
        while self.thread.is_alive():
            process = self.process
            if process is not None and process.poll() is None:
                podman("stop", "--time", str(grace), self.container_name, timeout=grace + 60)
            self.thread.join(0.5)


class Kubelet:
    """Runs the stand-in's Pods in podman; their files under DATA_DIR/kubelet/<pod uid>."""

    def __init__(
        self, service: ObjectService, data_dir: Path, nodes: tuple[str, ...] = (DEFAULT_NODE,)
    ) -> None:
        self.service = service
        self.nodes = nodes
        self.root = data_dir / "kubelet"
        self.kubeconfig = data_dir / "kubeconfig"
        self.root.mkdir(mode=0o700, exist_ok=True)
        self.tag = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
        self.pods = kind(service, "Pod")
        self.claims = kind(service, "PersistentVolumeClaim")
        self.volumes = kind(service, "PersistentVolume")
        self.secrets = kind(service, "Secret")
        self.config_maps = kind(service, "ConfigMap")
        self.accounts = kind(service, "ServiceAccount")
        self.services = kind(service, "Service")
        self.node_kind = kind(service, "Node")
        self.dns = ClusterDns(self.root)
        self.workers: dict[str, PodWorker] = {}
        self._lock = threading.Lock()
        self.loop = Loop(service, "standin-kubelet", self.sync, period=0.5)

    def api(self) -> ApiAccess:
        """How a Pod reaches the stand-in's API, as its kubeconfig says: the stand-in checks no
        RBAC, so every ServiceAccount's token is the API's one token."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        [cluster] = config["clusters"]
        [user] = config["users"]
        server = urlsplit(cluster["cluster"]["server"])
        return ApiAccess(
            host=server.hostname or "",
            port=server.port or 443,
            ca=b64decode(cluster["cluster"]["certificate-authority-data"]),
            token=user["user"]["token"].encode(),
        )

    def addresses(self) -> set[str]:
        """The Pod IPs given now."""
        with self._lock:
            return {w.address for w in self.workers.values() if w.address}

    def start(self) -> None:
        """Register the nodes, remove what a stand-in killed before left of its containers, and
        begin running Pods."""
        self._register()
        self._remove_left()
        self.loop.start()

    def _register(self) -> None:
        """Make each node a Node, Ready, as a kubelet registers its own."""
        for node in self.nodes:
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": node_labels(node)},
            }
            with contextlib.suppress(AlreadyExistsError):
                self.service.create(self.node_kind, None, body)
            ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
            self.service.patch(
                self.node_kind,
                None,
                node,
                {"status": {"conditions": [ready]}},
                MERGE,
                subresource="status",
            )

    def _remove_left(self) -> None:
        if shutil.which("podman") is None:
            log.warning("podman is not installed: no Pod will start")
            return
        found = podman("ps", "--all", "--quiet", "--filter", f"label={LABEL}={self.tag}")
        for container in found.stdout.split():
            podman("rm", "--force", container)

    def sync(self) -> None:
        """Start the Pods not started, stop the deleted ones, refresh Secret and ConfigMap
        volumes and the cluster's names."""
        pods = {pod["metadata"]["uid"]: pod for pod in self.service.list(self.pods, None).items}
        self.dns.sync(self.service.list(self.services, None).items, list(pods.values()))
        with self._lock:
            workers = dict(self.workers)
        for uid, worker in workers.items():
            pod = pods.get(uid)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                if not worker.stopping.is_set():
                    grace = (pod or {}).get("metadata", {}).get("deletionGracePeriodSeconds")
                    threading.Thread(
                        target=worker.stop,
                        args=(int(grace if grace is not None else worker.grace),),
                        daemon=True,
                    ).start()
            elif worker.thread.is_alive():
                worker.refresh_sources()
            if pod is None and not worker.thread.is_alive():
                shutil.rmtree(worker.directory, ignore_errors=True)
                with self._lock:
                    del self.workers[uid]
        for uid, pod in pods.items():
            if uid in workers:
                continue
            try:
                self._admit(pod)
            except ApiError as e:
                log.info("pod %s: %s", pod["metadata"]["name"], e.message)

    def _admit(self, pod: Obj) -> None:
        phase = (pod.get("status") or {}).get("phase")
        deleted = bool(pod["metadata"].get("deletionTimestamp"))
        if phase in ("Succeeded", "Failed"):
            return
        if pod["spec"].get("nodeName") not in self.nodes and not deleted:
            return  # not bound to a node of this kubelet yet
        if len(pod["spec"]["containers"]) != 1 or pod["spec"].get("initContainers"):
            self._refuse(pod, START_FAILED, "StartError", "the stand-in kubelet runs one container")
            return
        worker = PodWorker(self, pod)
        if phase == "Running":  # its container went with the stand-in that ran it
            why = "the stand-in that ran its container stopped"
            worker.ended(LOST, why, None, "ContainerStatusUnknown")
            return
        if deleted:  # one never bound to a node too, as the Pod garbage collector ends it
            worker.ended(LOST, "the Pod was deleted before it started", None, "Deleted")
            return
        with self._lock:
            self.workers[pod["metadata"]["uid"]] = worker
        worker.thread.start()

    def write_status(self, pod: Obj, status: Obj) -> None:
        """Merge `status` into the Pod's, through its status subresource."""
        meta = pod["metadata"]
        self.service.patch(
            self.pods,
            meta["namespace"],
            meta["name"],
            {"status": status},
            MERGE,
            subresource="status",
        )

    def _refuse(self, pod: Obj, code: int, reason: str, message: str) -> None:
        """End a Pod this kubelet will not run, saying why."""
        state = {"terminated": {"exitCode": code, "reason": reason, "message": message}}
        statuses = [container_status(c, state) for c in pod["spec"]["containers"]]
        self.write_status(
            pod,
            {
                "phase": "Failed",
                "reason": reason,
                "message": message,
                "containerStatuses": statuses,
            },
        )

    def log_text(self, info: KindInfo, obj: Obj) -> str | None:
        """A Pod's log (its container's output), None for another kind or a Pod not run here."""
        if (info.group, info.kind) != ("", "Pod"):
            return None
        with self._lock:
            worker = self.workers.get(obj["metadata"]["uid"])
        if worker is None or not worker.log_path.exists():
            return None
        return "".join(f"{line}\n" for line in tail_lines(worker.log_path, LOG_LINES))

    def stop(self) -> None:
        """Stop running Pods: every container SIGTERMed, SIGKILLed after a short grace."""
        self.loop.stop()
        with self._lock:
            workers = list(self.workers.values())
        stoppers = [
            threading.Thread(target=w.stop, args=(min(w.grace, SHUTDOWN_GRACE),), daemon=True)
            for w in workers
        ]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
