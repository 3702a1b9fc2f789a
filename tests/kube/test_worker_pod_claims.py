"""The claims a worker Pod is given: each claim a job names by its path in a Pod, once, mounted
(Filesystem) or mapped (Block), read-only the ones the job only reads (its READS fields)."""

from __future__ import annotations

from diskferry.importer import ImportJob, ServeJob
from diskferry.kube.claims import NamedClaim, claim_path, named_claims
from diskferry.kube.pods import Mount, worker_pod
from diskferry.worker.job import job_file

SOURCE = claim_path("default", "vd-a-1", block=False)
TARGET = claim_path("default", "vd-b-2", block=True)


def test_a_claim_only_read_is_named_read_only() -> None:
    copy = job_file(ImportJob(source=SOURCE, target=TARGET))
    assert named_claims(copy, ImportJob.READS) == [
        NamedClaim("default", "vd-a-1", read_only=True),
        NamedClaim("default", "vd-b-2", read_only=False),
    ]
    both = job_file(ImportJob(source=SOURCE, target=SOURCE))
    assert named_claims(both, ImportJob.READS) == [NamedClaim("default", "vd-a-1")]
    served = job_file(ServeJob(source=TARGET))
    assert named_claims(served, ServeJob.READS) == [NamedClaim("default", "vd-b-2", True)]
    assert named_claims(served) == [NamedClaim("default", "vd-b-2")]


def test_a_read_only_claim_is_given_read_only() -> None:
    mounts = [
        Mount("default", "vd-a-1", "vd-a-1", block=False, read_only=True),
        Mount("default", "vd-b-2", "vd-b-2", block=True, read_only=True),
        Mount("default", "vd-c-3", "prime-3", block=False),
    ]
    pod = worker_pod("j-1", "default", ServeJob.WORKER, "image", mounts, None)
    claims = {
        v["persistentVolumeClaim"]["claimName"]: v["persistentVolumeClaim"]
        for v in pod["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims["vd-a-1"]["readOnly"] and claims["vd-b-2"]["readOnly"]
    assert "readOnly" not in claims["prime-3"]
    [container] = pod["spec"]["containers"]
    mounted = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
    assert mounted["/claims/default/vd-a-1"] is True
    assert mounted["/claims/default/vd-c-3"] is False
    assert [d["devicePath"] for d in container["volumeDevices"]] == ["/claims/default/vd-b-2/disk"]
