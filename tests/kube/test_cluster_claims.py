"""A claim of no disk, image or snapshot (a KubeVirt VM's, restored under its own name) against the
stand-in: a PVC of its name that the storage provisions at once, owned by nothing and with no
prime, which a worker may write once it is bound."""

from __future__ import annotations

from control_support import wait_until
from daemon_support import kubectl
from standin_support import StandIn

from diskferry.control.host.volumes import VolumeClass
from diskferry.kube.api import KubeApi
from diskferry.kube.volumes import PVC, ClusterVolumes

MiB = 1 << 20
STORAGE = "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: fast}\n"


def test_a_claim_of_its_own_name_is_provisioned_with_no_prime(
    standin: StandIn, api: KubeApi
) -> None:
    kubectl(standin, "apply", "-f", "-", stdin=STORAGE)
    volumes = ClusterVolumes(api)
    claim = volumes.claim(VolumeClass("fast"), "default", "root", 16 * MiB)
    pvc = api.get(*PVC, "default", "root") or {}
    assert "ownerReferences" not in pvc["metadata"] and "dataSourceRef" not in pvc["spec"]
    bound = wait_until(
        lambda: volumes.claim(VolumeClass("fast"), "default", "root", 16 * MiB).ready, 30, 0.3
    )
    assert bound and volumes.writable(claim)
    assert claim.path == "/claims/default/root/disk.img"
    names = [p["metadata"]["name"] for p in api.list(*PVC, "default")[0]]
    assert names == ["root"]  # no prime
