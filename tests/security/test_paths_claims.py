"""A client that rewrites the status of a disk, an image or a snapshot with kubectl cannot point
the root daemon at a file of its choosing: the claim and the image-store entry the daemon reads,
serves and deletes come from the object's kind, name and uid, whatever the status says; and a
class root or folder that others can write, or a symlink below a root, is refused."""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "control"))

from control_support import wait_until
from daemon_support import Served, free_port, kubectl, start_daemon
from reconcile_support import Daemon
from vm_support import ready_disk
from vmexport_support import get_when_up, raw_url

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.host.embedded.imagestore import LayoutImageStore
from diskferry.control.host.embedded.volumes import DirectoryVolumes
from diskferry.control.reconcilers.disks.datasources import claim_of, stored_image
from diskferry.control.resources.model import API_VERSION
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualimage import VirtualImage
from diskferry.control.runtime.client import EmbeddedClient
from diskferry.disk.progress import Progress
from diskferry.importer.image_push import push_image
from diskferry.importer.job import ImportJob

MiB = 1 << 20
WAIT = "--timeout=60s"
SECRET = b"the victim's bytes, which no client may read or delete\n" * 4096


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One daemon with its controllers and its export proxy for the module's tests."""
    base = tmp_path_factory.mktemp("paths")
    options = ("--proxy-port", str(free_port()))
    served = start_daemon(base / "data", base / "daemon.log", options=options)
    yield served
    assert served.stop() == 0


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the host outside the daemon's data directory, named as a claim would be."""
    path = tmp_path / "victim" / "default" / "victim.img"
    path.parent.mkdir(parents=True)
    path.write_bytes(SECRET)
    return path


def traversal(path: Path) -> str:
    """A claim name that, joined below any class folder, leads to `path` without its `.img`."""
    return "../" * 40 + str(path.with_suffix(""))[1:]


def apply(daemon: Served, manifest: str) -> None:
    kubectl(daemon, "apply", "-f", "-", stdin=manifest)


def wait(daemon: Served, what: str, phase: str) -> None:
    jsonpath = f"--for=jsonpath={{.status.phase}}={phase}"
    assert "condition met" in kubectl(daemon, "wait", what, jsonpath, WAIT)


def get(daemon: Served, what: str) -> dict:
    return json.loads(kubectl(daemon, "get", what, "-o", "json"))


def ready_condition(daemon: Served, what: str, reason: str) -> dict:
    """The object's Ready condition once its reason is `reason`."""

    def found() -> dict | None:
        conditions = get(daemon, what)["status"].get("conditions") or []
        ready = next((c for c in conditions if c["type"] == "Ready"), {})
        return ready if ready.get("reason") == reason else None

    return wait_until(found, 60, step=0.5)


def patch_status(daemon: Served, what: str, status: dict) -> None:
    """What the attacker does: a merge patch of the status subresource, which the API takes
    (the daemon may write its own values back soon after)."""
    body = json.dumps({"status": status})
    args = ("--subresource=status", "--type=merge", "-p", body, "-o", "json")
    patched = json.loads(kubectl(daemon, "patch", what, *args))["status"]
    assert all(patched[key] == value for key, value in status.items())


def claim_file(daemon: Served, what: str) -> Path:
    """The file of a disk or image the daemon made in the default class (its status as the
    daemon wrote it, read before any patch)."""
    status = get(daemon, what)["status"]
    claim = status["target"]["persistentVolumeClaimName"]
    return daemon.data_dir / "volumes" / status["storageClassName"] / "default" / f"{claim}.img"


def blank_disk(daemon: Served, name: str) -> Path:
    """A Ready blank disk of 1 MiB; its file."""
    apply(
        daemon,
        f"""\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: {name}, namespace: default}}
spec: {{persistentVolumeClaim: {{size: 1Mi}}}}
""",
    )
    wait(daemon, f"vd/{name}", "Ready")
    return claim_file(daemon, f"vd/{name}")


def disk_from(daemon: Served, name: str, kind: str, source: str) -> Path:
    """A Ready disk made from the object `kind`/`source`; its file."""
    apply(
        daemon,
        f"""\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: {name}, namespace: default}}
spec:
  dataSource:
    type: ObjectRef
    objectRef: {{kind: {kind}, name: {source}}}
""",
    )
    wait(daemon, f"vd/{name}", "Ready")
    return claim_file(daemon, f"vd/{name}")


def test_a_claim_name_in_status_neither_exposes_nor_deletes_a_host_file(
    daemon: Served, victim: Path
) -> None:
    blank_disk(daemon, "patched")
    patch_status(daemon, "vd/patched", {"target": {"persistentVolumeClaimName": traversal(victim)}})
    apply(
        daemon,
        """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualMachineExport
metadata: {name: ex-patched, namespace: default}
spec:
  source: {apiGroup: diskferry.io, kind: VirtualDisk, name: patched}
""",
    )
    wait(daemon, "vmexport/ex-patched", "Ready")
    internal = get(daemon, "vmexport/ex-patched")["status"]["links"]["internal"]
    secret = get(daemon, "secret/export-token-ex-patched")
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert get_when_up(raw_url(internal), internal["cert"], token) == (200, bytes(MiB))
    kubectl(daemon, "delete", "vmexport", "ex-patched", WAIT)
    kubectl(daemon, "delete", "vd", "patched", WAIT)
    assert victim.read_bytes() == SECRET


def test_a_class_and_claim_in_status_neither_expose_nor_delete_a_host_file(
    daemon: Served, victim: Path
) -> None:
    root = victim.parent.parent
    apply(
        daemon,
        f"""\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: elsewhere}}
provisioner: diskferry.io/local
parameters: {{path: "{root}"}}
""",
    )
    own = blank_disk(daemon, "reclassed")
    forged = {"storageClassName": "elsewhere", "target": {"persistentVolumeClaimName": "victim"}}
    patch_status(daemon, "vd/reclassed", forged)
    apply(
        daemon,
        """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualImage
metadata: {name: image-of-reclassed, namespace: default}
spec:
  storage: PersistentVolumeClaim
  dataSource:
    type: ObjectRef
    objectRef: {kind: VirtualDisk, name: reclassed}
""",
    )
    wait(daemon, "vi/image-of-reclassed", "Ready")
    assert claim_file(daemon, "vi/image-of-reclassed").read_bytes() == bytes(MiB)
    kubectl(daemon, "delete", "vd", "reclassed", WAIT)
    assert victim.read_bytes() == SECRET
    assert not own.exists()


def test_a_snapshot_name_in_status_neither_exposes_nor_deletes_a_host_file(
    daemon: Served, victim: Path
) -> None:
    blank_disk(daemon, "snapped")
    apply(
        daemon,
        """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDiskSnapshot
metadata: {name: snap, namespace: default}
spec: {virtualDiskName: snapped}
""",
    )
    wait(daemon, "vds/snap", "Ready")
    patch_status(daemon, "vds/snap", {"volumeSnapshotName": traversal(victim)})
    restored = disk_from(daemon, "from-snap", "VirtualDiskSnapshot", "snap")
    assert restored.read_bytes() == bytes(MiB)
    kubectl(daemon, "delete", "vds", "snap", WAIT)
    assert victim.read_bytes() == SECRET


def test_a_registry_url_in_status_does_not_point_the_daemon_at_another_store(
    daemon: Served, nginx, images, tmp_path: Path
) -> None:
    secret_disk = tmp_path / "secret.raw"
    secret_disk.write_bytes(SECRET)
    elsewhere = f"oci:{tmp_path / 'layout'}:v1"
    push_image(ImportJob(source=str(secret_disk), target=""), elsewhere, Progress())
    url = nginx.publish(images.reference, "paths-stored.raw")
    apply(
        daemon,
        f"""\
apiVersion: diskferry.io/v1alpha1
kind: VirtualImage
metadata: {{name: stored, namespace: default}}
spec:
  storage: ContainerRegistry
  dataSource: {{type: HTTP, http: {{url: "{url}"}}}}
""",
    )
    wait(daemon, "vi/stored", "Ready")
    patch_status(daemon, "vi/stored", {"target": {"registryURL": elsewhere}})
    made = disk_from(daemon, "from-stored", "VirtualImage", "stored")
    assert images.same(made, images.reference)


def test_a_class_root_others_can_write_is_refused(daemon: Served, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    apply(
        daemon,
        f"""\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: shared}}
provisioner: diskferry.io/local
parameters: {{path: "{shared}"}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: in-shared, namespace: default}}
spec: {{persistentVolumeClaim: {{size: 1Mi, storageClassName: shared}}}}
""",
    )
    ready = ready_condition(daemon, "vd/in-shared", "VolumeFailed")
    assert f"{shared} is writable by other users" in ready["message"]
    assert os.listdir(shared) == []
    kubectl(daemon, "delete", "vd", "in-shared", WAIT)


def test_a_symlink_below_a_class_root_is_not_followed(daemon: Served, tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir(mode=0o700)
    outside.mkdir()
    (root / "default").symlink_to(outside)
    apply(
        daemon,
        f"""\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: linked}}
provisioner: diskferry.io/local
parameters: {{path: "{root}"}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: in-linked, namespace: default}}
spec: {{persistentVolumeClaim: {{size: 1Mi, storageClassName: linked}}}}
""",
    )
    ready = ready_condition(daemon, "vd/in-linked", "VolumeFailed")
    assert f"{root / 'default'} is a symlink" in ready["message"]
    assert os.listdir(outside) == []
    kubectl(daemon, "delete", "vd", "in-linked", WAIT)


def test_a_patched_status_is_never_read_back(tmp_path: Path, victim: Path) -> None:
    """With no controller to write it back, the claim and the store entry still come from the
    objects' kind, name and uid."""
    made = Daemon(tmp_path / "d")
    disk = ready_disk(made, "vd-u")
    made.stop()
    objects = ObjectService(tmp_path / "d" / "state.db", REGISTRY)
    try:
        client = EmbeddedClient(objects, objects.registry)
        image = {"apiVersion": API_VERSION, "kind": "VirtualImage", "metadata": {"name": "vi-u"}}
        image["spec"] = {"dataSource": {"type": "Upload"}}
        objects.create(REGISTRY.by_kind("VirtualImage"), "default", image)
        forged = {
            ("VirtualDisk", "vd-u"): {
                "storageClassName": "local-block",
                "target": {"persistentVolumeClaimName": traversal(victim)},
            },
            ("VirtualImage", "vi-u"): {
                "phase": "Ready",
                "target": {"registryURL": f"oci:{victim.parent}:v1"},
            },
        }
        for (kind, name), status in forged.items():
            info = REGISTRY.by_kind(kind)
            objects.patch(info, "default", name, {"status": status}, "merge", subresource="status")
        volumes = DirectoryVolumes(tmp_path / "d")
        store = LayoutImageStore(tmp_path / "d")
        found = client.get(VirtualDisk, "default", "vd-u")
        assert found is not None
        claim = claim_of(client, volumes, found)
        assert claim is not None and claim.file == disk
        stored = client.get(VirtualImage, "default", "vi-u")
        assert stored is not None
        source = stored_image(store, stored)
        assert source is not None
        assert source.location == store.reference(stored)
        assert source.location.startswith(f"oci:{tmp_path / 'd' / 'images' / 'vi' / 'default'}")
    finally:
        objects.close()
