"""The Pod runner against the stand-in cluster, whose kubelet runs its Pods in podman from the
built image: a job runs in a Pod of its own (restartPolicy Never, restricted, the job and its
files in a Secret it mounts, no credential in the Pod's spec), its progress read from /progress
on the Pod's IP, its result from the termination message and its log from pods/log; a
succeeded Pod is removed with its Secret, a failed one kept, a cancelled one stopped with
SIGTERM; a runner made afresh finds the Pods it started."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS

from diskferry.backup import Chores, ChoresJob, MetadataListing, MetadataRead
from diskferry.control.runtime.runner.base import JobFile, JobState
from diskferry.control.runtime.runner.jobs import CANCELLED
from diskferry.importer import ImportJob
from diskferry.kube.api import KubeApi
from diskferry.kube.pods import FINALIZER, KEPT, pod_name
from diskferry.kube.runner import PodRunner
from diskferry.kube.volumes import ClusterVolumes
from diskferry.serving.defaults import WORKER_STATUS_PORT
from diskferry.worker.output import is_frame

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 600)]
NAMESPACE = "diskferry-system"
MiB = 1 << 20
SECRET_HEADER = b"X-Token: not-for-the-pod-spec\n"


@pytest.fixture(scope="module")
def made(standin, pinned: str) -> str:
    """The stand-in with the operator's namespace; the image its Pods run."""
    kubectl(standin, "create", "namespace", NAMESPACE)
    return pinned


@pytest.fixture
def runner(api: KubeApi, made: str) -> PodRunner:
    return PodRunner(api, made, ClusterVolumes(api), NAMESPACE)


def _ended(runner: PodRunner, job_id: str, timeout: float = 180) -> JobState:
    return wait_until(
        lambda: (state := runner.state(job_id)) and not state.running and state, timeout, 0.3
    )


def _pod(api: KubeApi, job_id: str) -> dict[str, Any] | None:
    return api.get("v1", "Pod", NAMESPACE, pod_name(job_id))


def _secret(api: KubeApi, job_id: str) -> dict[str, Any] | None:
    return api.get("v1", "Secret", NAMESPACE, pod_name(job_id))


def test_a_job_runs_in_a_restricted_pod_with_its_job_in_a_secret(
    runner: PodRunner, api: KubeApi, nginx, images
) -> None:
    url = nginx.publish(images.reference, "runner.raw")
    job = ImportJob(source=url, target="/tmp/disk.img", headers_file="headers")
    runner.start("imp-1", job, [JobFile("headers", SECRET_HEADER, credential=True)])
    pod = _pod(api, "imp-1")
    assert pod is not None
    spec = pod["spec"]
    [container] = spec["containers"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["image"] == runner.image
    assert container["command"][:3] == ["python", "-m", "diskferry.importer.worker"]
    assert container["ports"] == [{"name": "progress", "containerPort": WORKER_STATUS_PORT}]
    assert b"not-for-the-pod-spec" not in json.dumps(pod).encode()
    assert FINALIZER in pod["metadata"]["finalizers"]
    secret = _secret(api, "imp-1")
    assert secret is not None
    job_file = json.loads(base64.b64decode(secret["data"]["job.json"]))
    assert (job_file["jobId"], job_file["port"]) == ("imp-1", WORKER_STATUS_PORT)
    assert base64.b64decode(secret["data"]["headers"]) == SECRET_HEADER

    state = _ended(runner, "imp-1")
    assert state.succeeded, (state, runner.log_tail("imp-1"))
    assert (state.exit_code, state.result["virtualSize"]) == (0, images.disk_size)
    assert "headers" not in (_secret(api, "imp-1") or {})["data"]  # gone once it ended
    tail = runner.log_tail("imp-1", 3)
    # stdout and stderr, one stream: the result line is among the last, not always last
    assert 0 < len(tail) <= 3 and any('"ok": true' in line for line in tail), tail
    assert runner.purge("imp-1", keep_scratch=False)
    wait_until(lambda: _pod(api, "imp-1") is None, 30, 0.3)
    assert _secret(api, "imp-1") is None
    assert runner.state("imp-1") is None


def test_a_failed_job_keeps_its_pod_until_forgotten(runner: PodRunner, api: KubeApi, nginx) -> None:
    job = ImportJob(source=f"{nginx.url}/no-such.raw", target="/tmp/disk.img", retries=0)
    runner.start("imp-2", job)
    state = _ended(runner, "imp-2")
    assert state.failed and state.exit_code == 1
    assert state.result["reason"] == "HttpError" or state.result["ok"] is False
    assert any("404" in line for line in runner.log_tail("imp-2"))
    assert runner.purge("imp-2", keep_scratch=True)
    kept = _pod(api, "imp-2")
    assert kept is not None and kept["metadata"]["labels"][KEPT] == "true"
    assert FINALIZER not in (kept["metadata"].get("finalizers") or [])
    assert runner.state("imp-2").kept  # type: ignore[union-attr]
    assert runner.forget("imp-2")
    assert _pod(api, "imp-2") is None and runner.state("imp-2") is None


def test_progress_comes_from_the_pod_ip_and_cancel_stops_it(
    runner: PodRunner, api: KubeApi, nginx, tmp_path: Path
) -> None:
    source = tmp_path / "slow.raw"
    source.write_bytes(os.urandom(8 * MiB))
    url = nginx.publish(source, "runner.raw", slow=True)
    runner.start("imp-3", ImportJob(source=url, target="/tmp/disk.img"))
    running = wait_until(
        lambda: (state := runner.state("imp-3")) and state.progress and state, 120, 0.3
    )
    assert running.running and running.progress["jobId"] == "imp-3"
    pod = _pod(api, "imp-3")
    assert pod is not None and pod["status"]["podIP"].startswith("127.")
    assert not runner.purge("imp-3", keep_scratch=False)  # running: cancelled instead
    state = _ended(runner, "imp-3", timeout=60)
    assert state.result["reason"] == CANCELLED
    assert runner.purge("imp-3", keep_scratch=True)  # a cancelled Pod is not kept
    wait_until(lambda: _pod(api, "imp-3") is None, 30, 0.3)


def test_a_runner_made_afresh_finds_its_pods_and_starts_none_again(
    runner: PodRunner, api: KubeApi, made: str, nginx, tmp_path: Path
) -> None:
    source = tmp_path / "again.raw"
    source.write_bytes(os.urandom(4 * MiB))
    url = nginx.publish(source, "again.raw", slow=True)
    job = ImportJob(source=url, target="/tmp/disk.img")
    runner.start("imp-4", job)
    first = _pod(api, "imp-4")["metadata"]["uid"]  # type: ignore[index]
    fresh = PodRunner(api, made, ClusterVolumes(api), NAMESPACE)
    assert fresh.state("imp-4") is not None
    fresh.start("imp-4", job)
    assert _pod(api, "imp-4")["metadata"]["uid"] == first  # type: ignore[index]
    fresh.write_file("imp-4", "token", b"one")
    assert fresh.read_file("imp-4", "token") == b"one"
    assert fresh.read_file("imp-4", "missing") is None
    assert _ended(fresh, "imp-4").succeeded
    assert fresh.forget("imp-4")


def test_a_start_never_rewrites_the_secret_of_a_pod_it_did_not_see(
    runner: PodRunner, api: KubeApi, made: str, nginx, images
) -> None:
    unaware = PodRunner(api, made, ClusterVolumes(api), NAMESPACE)  # listed before the Pod
    url = nginx.publish(images.reference, "unseen.raw")
    runner.start("imp-5", ImportJob(source=url, target="/tmp/disk.img"))
    secret = _secret(api, "imp-5")
    assert secret is not None
    unaware.start("imp-5", ImportJob(source=url, target="/tmp/other.img"))
    again = _secret(api, "imp-5")
    assert again is not None and again["metadata"] == secret["metadata"]
    assert again["data"] == secret["data"]
    assert unaware.state("imp-5") is not None
    assert _ended(unaware, "imp-5").succeeded and unaware.forget("imp-5")


def test_a_secret_left_by_a_start_that_made_no_pod_is_made_anew(
    runner: PodRunner, api: KubeApi, nginx, images
) -> None:
    left = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": pod_name("imp-6"), "namespace": NAMESPACE},
        "data": {"job.json": base64.b64encode(b"{}").decode()},
    }
    api.create("v1", "Secret", NAMESPACE, left)
    url = nginx.publish(images.reference, "left.raw")
    runner.start("imp-6", ImportJob(source=url, target="/tmp/disk.img"))
    assert _pod(api, "imp-6") is not None
    secret = _secret(api, "imp-6")
    assert secret is not None
    assert json.loads(base64.b64decode(secret["data"]["job.json"]))["jobId"] == "imp-6"
    assert _ended(runner, "imp-6").succeeded and runner.forget("imp-6")


def test_an_output_the_worker_wrote_is_read_from_its_pod_s_log(
    runner: PodRunner, api: KubeApi, made: str
) -> None:
    chores = Chores(read=["absent"], listing=MetadataListing(prefix=""))
    job = ChoresJob(repo="/tmp/repo", create=True, chores=chores, output="read.json")
    runner.start("out-1", job)
    assert _ended(runner, "out-1").succeeded
    read = MetadataRead.model_validate_json(runner.read_file("out-1", "read.json") or b"")
    assert (read.documents, read.names) == ({"absent": None}, [])
    assert "read.json" not in (_secret(api, "out-1") or {})["data"]
    fresh = PodRunner(api, made, ClusterVolumes(api), NAMESPACE)
    assert fresh.read_file("out-1", "read.json") == runner.read_file("out-1", "read.json")
    assert fresh.read_file("out-1", "other.json") is None
    assert fresh.read_file("out-1", "output.key") is None
    logged = api.pod_log(NAMESPACE, pod_name("out-1"), tail_lines=100, limit_bytes=MiB)
    assert any(is_frame(line) for line in logged.splitlines())
    tail = runner.log_tail("out-1")
    assert tail and not any(is_frame(line) for line in tail)
    assert runner.forget("out-1")
    assert runner.read_file("out-1", "read.json") is None


def test_a_job_for_a_claim_it_does_not_mount_goes_with_that_claim_s_object(
    runner: PodRunner, api: KubeApi, nginx, images
) -> None:
    disk = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualDisk",
        "metadata": {"name": "copy", "namespace": NAMESPACE},
        "spec": {"persistentVolumeClaim": {"size": "64Mi"}},
    }
    uid = api.create("diskferry.io/v1alpha1", "VirtualDisk", NAMESPACE, disk)["metadata"]["uid"]
    job = ImportJob(source=nginx.publish(images.reference, "owned.raw"), target="/tmp/disk.img")
    # a claim of another namespace names no owner: none can be there
    runner.start(f"elsewhere-vd-{uid}", job, for_claim=("default", f"vd-copy-{uid}"))
    assert "ownerReferences" not in (_pod(api, f"elsewhere-vd-{uid}") or {})["metadata"]
    serve_id = f"serve-vd-{uid}"
    runner.start(serve_id, job, for_claim=(NAMESPACE, f"vd-copy-{uid}"))
    for owned in _pod(api, serve_id), _secret(api, serve_id):
        [ref] = (owned or {})["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("VirtualDisk", "copy", uid)
    api.delete("diskferry.io/v1alpha1", "VirtualDisk", NAMESPACE, "copy")
    # deleting the disk deletes them (the Pod once the runner has read its end)
    wait_until(lambda: _secret(api, serve_id) is None, 30, 0.3)
    wait_until(lambda: (_pod(api, serve_id) or {}).get("metadata", {}).get("deletionTimestamp"), 30)
    for job_id in serve_id, f"elsewhere-vd-{uid}":
        _ended(runner, job_id)
        runner.purge(job_id, keep_scratch=False)
        wait_until(lambda job_id=job_id: _pod(api, job_id) is None, 30, 0.3)
