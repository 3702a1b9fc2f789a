"""PodRunner: the reconcilers' Runner over a cluster, each job a worker Pod (see `pods`).

A job is started by creating its Secret, then its Pod, in the namespace of the claims it names
(the operator's own when it names none), owned by the object whose job it is; the Pod's
existence is the record that the job was started, so no gate is needed: a job whose Pod was
never created never ran, and one whose Pod exists is found again by a runner made afresh
(which lists the worker Pods once, when it is made, and learns of those it creates).

- State comes from the Pod: running until its container has ended (its progress from the
  worker's /progress on the Pod's IP), then its exit code and its result, read from the
  container's termination message; a job's credential files are removed from its Secret as
  soon as it is seen ended.
- The log tail comes from `pods/log`, bounded in lines and bytes, the lines that carry output
  files left out.
- Cancel deletes the Pod: its worker gets SIGTERM and the Pod's grace period to stop; the Pod's
  finalizer keeps it, with its final status, until it is purged.
- Purge removes a succeeded or cancelled job's Pod and Secret; a failed job's Pod is kept
  (labelled `diskferry.io/kept`, its finalizer gone) with its Secret, for debugging, until the
  job is forgotten. Once its Pod is gone a job's log tail is gone too: the reconcilers put it in
  the operator's log before they purge.
- read_file and write_file read and replace a key of the job's Secret, which the kubelet brings
  into the running Pod's folder (within its sync period) where the worker reads it anew. A file
  the worker writes (an output: its folder is read-only, and it has no API access) it writes
  into its log, framed and tagged with a key made for the job and kept in its Secret
  (`diskferry.worker.output`): read_file reads it from `pods/log`, from the log's start and
  within OUTPUT_LOG_BYTES, the lines it can check only; an output not whole there (the log
  rotated) is None.
- A job whose server listens on every address of its Pod (its worker takes the Pod's), on
  SERVER_PORT as `server_address` gives them, is behind a headless Service made with its Pod
  and removed when it is purged, named by the first of the names its certificate is for (the
  Pod's, as `server_address` gives them, or the one its reconciler chose), and reached at
  `https://<service>.<namespace>.svc:SERVER_PORT`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import secrets
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from pydantic import ValidationError

from diskferry.control.errors import AlreadyExistsError, BadRequestError, NotFoundError
from diskferry.control.runtime.runner.base import LOG_LINES, JobFile, JobState, ServerAddress
from diskferry.control.runtime.runner.local import JobStartError
from diskferry.control.runtime.runner.progress import worker_progress
from diskferry.control.runtime.runner.tail import LINE_CHARS, TAIL_BYTES
from diskferry.kube.api import KubeApi
from diskferry.kube.claims import named_claims, owner
from diskferry.kube.pods import (
    CONTAINER,
    CREDENTIALS,
    FINALIZER,
    JOB_FILE,
    JOB_ID,
    KEPT,
    OUTPUT_KEY,
    Mount,
    Served,
    job_secret,
    job_service,
    pod_name,
    selector,
    service_names,
    worker_pod,
)
from diskferry.kube.pods import SERVICE as SERVICE_ANNOTATION
from diskferry.serving.defaults import EXPORT_PORT, WORKER_STATUS_PORT
from diskferry.serving.listening import Listening
from diskferry.worker.job import (
    JOB_ID_PATTERN,
    WorkerJob,
    job_file,
    validate_job,
    validation_message,
)
from diskferry.worker.output import framed_output, is_frame
from diskferry.worker.pod import EVERY_ADDRESS

log = logging.getLogger("diskferry.kube")
POD = ("v1", "Pod")
SECRET = ("v1", "Secret")
SERVICE = ("v1", "Service")
SERVER_PORT = EXPORT_PORT
"""The port a job's server listens on in its Pod, and its Service's: CDI's upload server's."""
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SERVICE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS-1035 label
ENDED = ("Succeeded", "Failed")
OUTPUT_LOG_BYTES = 16 << 20
"""The bytes of a Pod's log read for an output: more than the kubelet keeps of a log before it
rotates it (10 MiB by default), so that a log not rotated is read whole, and a bound on what one
read costs the operator (it keeps only the output's lines)."""
_RESERVED = {JOB_FILE, OUTPUT_KEY}
Obj = dict[str, Any]


class ClaimMounts(Protocol):
    """Which PVC backs a claim now, for a Pod to mount."""

    def mount(self, namespace: str, claim: str) -> Mount | None:
        """The PVC that backs the claim `claim` of `namespace` now, None when it has none."""


def _job_data(job: WorkerJob, job_id: str) -> Obj:
    """What `job.json` holds for `job` in a Pod; JobStartError when its engine names no worker,
    or its worker would refuse it (a secret inline)."""
    if not job.WORKER:
        raise JobStartError(f"a {type(job).__name__} names no worker to run it")
    data = {**job_file(job), "jobId": job_id, "port": WORKER_STATUS_PORT}
    try:
        validate_job(type(job), data)
    except ValidationError as e:
        message = f"a {type(job).__name__} cannot go into a job file: {validation_message(e)}"
        raise JobStartError(message) from None
    return data


def _container(pod: Obj) -> Obj:
    """The status of the Pod's worker container ({} before it has one)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            return status
    return {}


def _terminated(pod: Obj) -> Obj | None:
    """How the worker container ended, None while it has not."""
    return (_container(pod).get("state") or {}).get("terminated")


def _result(terminated: Obj) -> Obj | None:
    """The result the worker wrote in its termination message, None when it wrote none."""
    try:
        result = json.loads(terminated.get("message") or "")
    except ValueError:
        return None
    return result if isinstance(result, dict) and "ok" in result else None


def _served(job: WorkerJob, job_id: str) -> Served | None:
    """The job's server when it listens on every address of its Pod (as
    `PodRunner.server_address` has it), behind a Service of its own, named by the first of the
    names its certificate is for (the Pod's when that is no Service's name); None for another
    job."""
    if not (isinstance(job, Listening) and job.listen_address in EVERY_ADDRESS):
        return None
    if not job.listen_port:
        return None
    first = job.sans[0] if job.sans else ""
    return Served(job.listen_port, first if _SERVICE.match(first) else pod_name(job_id))


def _service_of(pod: Obj) -> str | None:
    """The name of the Service of the Pod's server, None when it runs none."""
    service = (pod["metadata"].get("annotations") or {}).get(SERVICE_ANNOTATION)
    return str(service) if service else None


def _owner(
    job_id: str, namespace: str, mounted: Sequence[str], for_claim: tuple[str, str] | None
) -> Obj | None:
    """The owner of a job's Pod and Secret in `namespace`: a job's id ends with the uid of the
    object it works for, so the object of the claim of that uid, among the claims it mounts and
    the one it is `for_claim`; None when none is (or that one is in another namespace, where no
    owner can be)."""
    claims = [*mounted, *([for_claim[1]] if for_claim and for_claim[0] == namespace else [])]
    owners = [owner(claim) for claim in claims]
    return next((o for o in owners if o and job_id.endswith(o["uid"])), None)


class PodRunner:
    """Runs jobs as Pods of `image`, each claim a job names mounted as `claims` says, jobs that
    name none in `namespace`; safe to use from several threads."""

    def __init__(self, api: KubeApi, image: str, claims: ClaimMounts, namespace: str) -> None:
        self.api = api
        self.image = image
        self.claims = claims
        self.namespace = namespace
        self._lock = threading.Lock()
        self._stripped: set[str] = set()
        pods, _ = api.list(*POD, label_selector=selector())
        self._where = {
            pod["metadata"]["annotations"][JOB_ID]: pod["metadata"]["namespace"]
            for pod in pods
            if (pod["metadata"].get("annotations") or {}).get(JOB_ID)
        }

    def _namespace(self, job_id: str) -> str | None:
        with self._lock:
            return self._where.get(job_id)

    def _pod(self, job_id: str) -> tuple[str, Obj] | None:
        """The job's namespace and Pod, None when it has none (it is forgotten then)."""
        namespace = self._namespace(job_id)
        if namespace is None:
            return None
        pod = self.api.get(*POD, namespace, pod_name(job_id))
        if pod is None:
            with self._lock:
                self._where.pop(job_id, None)
            return None
        return namespace, pod

    def _mounts(self, data: Obj, reads: Sequence[str]) -> tuple[str, list[Mount]]:
        """The namespace of the claims the job names, and their mounts (read-only those only
        its fields `reads` name)."""
        named = named_claims(data, reads)
        namespaces = {claim.namespace for claim in named}
        if len(namespaces) > 1:
            raise JobStartError(f"a job's claims are in one namespace, not {sorted(namespaces)}")
        mounts = []
        for claim in named:
            mount = self.claims.mount(claim.namespace, claim.name)
            if mount is None:
                raise JobStartError(f"the claim {claim.namespace}/{claim.name} has no volume")
            mounts.append(replace(mount, read_only=claim.read_only))
        return (namespaces.pop() if namespaces else self.namespace), mounts

    def start(
        self,
        job_id: str,
        job: WorkerJob,
        files: Sequence[JobFile] = (),
        for_claim: tuple[str, str] | None = None,
    ) -> None:
        """Create the job's Secret and Pod, unless its Pod exists; both owned by the object of
        the claim the job works for (see `_owner`)."""
        if not re.match(JOB_ID_PATTERN, job_id):
            raise JobStartError(f"{job_id!r} is not a usable job id")
        data = _job_data(job, job_id)
        given = {JOB_FILE: json.dumps(data).encode(), OUTPUT_KEY: secrets.token_bytes(32)}
        for file in files:
            if not _FILE_NAME.match(file.name) or file.name in given:
                raise JobStartError(f"{file.name!r} is not a usable name for a job's file")
            given[file.name] = file.data
        if self._pod(job_id) is not None:
            return
        namespace, mounts = self._mounts(data, job.READS)
        name = pod_name(job_id)
        with self._lock:
            self._where[job_id] = namespace
        ref = _owner(job_id, namespace, [m.claim for m in mounts], for_claim)
        credentials = [file.name for file in files if file.credential]
        secret = job_secret(job_id, namespace, given, credentials, ref)
        try:
            self.api.create(*SECRET, namespace, secret)
        except AlreadyExistsError:
            if self._pod(job_id) is not None:
                return  # its Pod was made by a start this runner did not see
            # left by a start that stopped before making its Pod: that job never ran
            found = self.api.get(*SECRET, namespace, name) or {}
            secret["metadata"]["resourceVersion"] = found.get("metadata", {}).get("resourceVersion")
            self.api.replace(*SECRET, namespace, name, secret)
            with self._lock:
                self._where[job_id] = namespace
        served = _served(job, job_id)
        if served is not None:
            service = job_service(job_id, namespace, served.service, served.port, ref)
            with contextlib.suppress(AlreadyExistsError):  # made by a start that stopped since
                self.api.create(*SERVICE, namespace, service)
        pod = worker_pod(job_id, namespace, job.WORKER, self.image, mounts, ref, served)
        with contextlib.suppress(AlreadyExistsError):  # started meanwhile, by a start of the job
            self.api.create(*POD, namespace, pod)
        log.info("job %s: Pod %s/%s created", job_id, namespace, name)

    def state(self, job_id: str) -> JobState | None:
        """The job's state as its Pod tells it."""
        found = self._pod(job_id)
        if found is None:
            return None
        namespace, pod = found
        status = pod.get("status") or {}
        terminated = _terminated(pod)
        if terminated is None and status.get("phase") not in ENDED:
            address = status.get("podIP") if status.get("phase") == "Running" else None
            progress = worker_progress(address, WORKER_STATUS_PORT) if address else None
            return JobState(job_id, True, progress=progress, port=WORKER_STATUS_PORT)
        self._strip_credentials(job_id, namespace)
        kept = (pod["metadata"].get("labels") or {}).get(KEPT) == "true"
        return JobState(
            job_id,
            False,
            result=_result(terminated) if terminated else None,
            exit_code=terminated.get("exitCode") if terminated else None,
            port=WORKER_STATUS_PORT,
            kept=kept,
        )

    def _strip_credentials(self, job_id: str, namespace: str) -> None:
        """Remove the credential files from the ended job's Secret, once."""
        if job_id in self._stripped:
            return
        secret = self.api.get(*SECRET, namespace, pod_name(job_id))
        annotations = ((secret or {}).get("metadata") or {}).get("annotations") or {}
        names = [name for name in (annotations.get(CREDENTIALS) or "").split(",") if name]
        if secret is not None and names:
            patch = {
                "metadata": {"annotations": {CREDENTIALS: None}},
                "data": dict.fromkeys(names),
            }
            self.api.patch(*SECRET, namespace, pod_name(job_id), patch)
        with self._lock:
            self._stripped.add(job_id)

    def log_tail(self, job_id: str, lines: int = LOG_LINES) -> list[str]:
        """The last `lines` lines the worker logged, from its Pod's log ([] once it is gone)."""
        namespace = self._namespace(job_id)
        if namespace is None or lines <= 0:
            return []
        try:
            text = self.api.pod_log(
                namespace, pod_name(job_id), tail_lines=lines, limit_bytes=TAIL_BYTES
            )
        except NotFoundError:
            return []
        logged = [line[:LINE_CHARS] for line in text.splitlines() if not is_frame(line)]
        return logged[-lines:]

    def cancel(self, job_id: str) -> None:
        """Delete the job's Pod while it runs: SIGTERM, and its grace period to stop."""
        state = self.state(job_id)
        namespace = self._namespace(job_id)
        if state is not None and state.running and namespace is not None:
            self.api.delete(*POD, namespace, pod_name(job_id))

    def read_file(self, job_id: str, name: str) -> bytes | None:
        """A file of the job's Secret, else the output of that name its worker wrote into its
        Pod's log; None when the job or the file is not there."""
        namespace = self._namespace(job_id)
        if namespace is None or name == OUTPUT_KEY:
            return None
        secret = self.api.get(*SECRET, namespace, pod_name(job_id))
        data = (secret or {}).get("data") or {}
        if name in data:
            return base64.b64decode(data[name])
        if OUTPUT_KEY not in data:
            return None
        key = base64.b64decode(data[OUTPUT_KEY])
        try:
            lines = self.api.pod_log_lines(
                namespace, pod_name(job_id), limit_bytes=OUTPUT_LOG_BYTES
            )
            return framed_output(lines, key, name)
        except (NotFoundError, BadRequestError):  # gone, or not started
            return None

    def write_file(self, job_id: str, name: str, data: bytes) -> None:
        """Replace a file of the job's Secret (the running worker reads it anew)."""
        namespace = self._namespace(job_id)
        if namespace is None or not _FILE_NAME.match(name) or name in _RESERVED:
            raise JobStartError(f"no job {job_id} to write {name} for")
        patch = {"data": {name: base64.b64encode(data).decode()}}
        self.api.patch(*SECRET, namespace, pod_name(job_id), patch)

    def _unhold(self, namespace: str, pod: Obj, labels: Obj) -> None:
        """Take the runner's finalizer off the Pod (gone then, if it was deleted), and add
        `labels`."""
        meta = pod["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        patch = {"metadata": {"finalizers": finalizers or None, "labels": labels or None}}
        with contextlib.suppress(NotFoundError):  # gone meanwhile
            self.api.patch(*POD, namespace, meta["name"], patch)

    def purge(self, job_id: str, keep_scratch: bool) -> bool:
        """Remove an ended job's Pod and Secret, or keep them (`keep_scratch`, not for a
        cancelled Pod); a job still running is cancelled instead and False returned."""
        state = self.state(job_id)
        found = self._pod(job_id)
        if state is None or found is None:
            return True
        if state.running:
            self.cancel(job_id)
            return False
        namespace, pod = found
        service = _service_of(pod)
        if service is not None:
            self.api.delete(*SERVICE, namespace, service)
        if keep_scratch and not pod["metadata"].get("deletionTimestamp"):
            self._unhold(namespace, pod, {KEPT: "true"})
            return True
        self.api.delete(*SECRET, namespace, pod_name(job_id))
        self._unhold(namespace, pod, {})
        self.api.delete(*POD, namespace, pod_name(job_id))
        with self._lock:
            self._stripped.discard(job_id)
        return True

    def forget(self, job_id: str) -> bool:
        """Purge the job, its kept Pod too; False while it runs, or its Pod is not gone yet."""
        if not self.purge(job_id, keep_scratch=False):
            return False
        return self._pod(job_id) is None

    def server_address(self, job_id: str, namespace: str) -> ServerAddress:
        """Every address of the job's Pod (its worker listens on the Pod's), SERVER_PORT, and
        the names of its Service in `namespace`, of its Pod's name."""
        names = service_names(pod_name(job_id), namespace)
        return ServerAddress(EVERY_ADDRESS[0], SERVER_PORT, names)

    def server_url(self, job_id: str, port: int) -> str | None:
        """`https://<service>.<namespace>.svc:port` of the job's Service, None when the job or
        its Service is not known."""
        found = self._pod(job_id)
        service = None if found is None else _service_of(found[1])
        if found is None or service is None:
            return None
        return f"https://{service_names(service, found[0])[2]}:{port}"
