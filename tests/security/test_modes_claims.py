"""What the root daemon keeps of disks and images is its own: the data directory is 0700 even
when it was there before, and every claim, staging file and image-store entry under it or
under a class's own root is a 0600 file in 0700 folders, whatever the umask the daemon
started with; another local user (nobody) reads none of it. A data directory an earlier
version left open keeps its claims and is made private."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "control"))

from daemon_support import Served, free_port, kubectl, start_daemon

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
WAIT = "--timeout=60s"


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder every user may enter, as /var/lib is, for the data directory and a class root."""
    path = Path(tempfile.mkdtemp(prefix="dfmodes", dir="/tmp"))
    path.chmod(0o755)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def serve(base: Path, umask: int = 0o022) -> Served:
    """The daemon over base/data with its controllers, started with `umask`."""
    before = os.umask(umask)
    try:
        options = ("--proxy-port", str(free_port()))
        return start_daemon(base / "data", base / "daemon.log", options=options)
    finally:
        os.umask(before)


def apply(daemon: Served, manifest: str) -> None:
    kubectl(daemon, "apply", "-f", "-", stdin=manifest)


def wait(daemon: Served, what: str, phase: str) -> None:
    jsonpath = f"--for=jsonpath={{.status.phase}}={phase}"
    assert "condition met" in kubectl(daemon, "wait", what, jsonpath, WAIT)


def readable_by_nobody(root: Path) -> list[str]:
    """The files under `root` the user nobody can reach and read."""
    done = subprocess.run(
        [*NOBODY, "find", str(root), "-type", "f", "-readable"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.split()


def open_to_others(root: Path) -> list[str]:
    """What lies below `root` and is not 0600 (a file) or 0700 (a folder): each with its mode."""
    found = []
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            wanted = 0o700 if stat.S_ISDIR(mode) else 0o600
            if stat.S_IMODE(mode) != wanted:
                found.append(f"{path} {stat.S_IMODE(mode):o}")
    return found


def test_disks_images_uploads_and_the_store_are_the_daemons_alone(
    base: Path, nginx, images
) -> None:
    (base / "data").mkdir(mode=0o755)  # a data directory that was there before
    own = base / "own"
    own.mkdir(mode=0o755)  # a class root an administrator made
    daemon = serve(base, umask=0)
    try:
        url = nginx.publish(images.get("qcow2"), "modes.qcow2")
        apply(
            daemon,
            f"""\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: own}}
provisioner: diskferry.io/local
parameters: {{path: "{own}"}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: web, namespace: default}}
spec:
  dataSource: {{type: HTTP, http: {{url: "{url}"}}}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: fast, namespace: default}}
spec: {{persistentVolumeClaim: {{size: 1Mi, storageClassName: own}}}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualImage
metadata: {{name: stored, namespace: default}}
spec:
  dataSource: {{type: HTTP, http: {{url: "{url}"}}}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualImage
metadata: {{name: kept, namespace: default}}
spec:
  storage: PersistentVolumeClaim
  dataSource:
    type: ObjectRef
    objectRef: {{kind: VirtualDisk, name: web}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualImage
metadata: {{name: awaited, namespace: default}}
spec:
  dataSource: {{type: Upload}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: awaited, namespace: default}}
spec:
  persistentVolumeClaim: {{size: 1Mi}}
  dataSource: {{type: Upload}}
""",
        )
        for what in ("vd/web", "vd/fast", "vi/stored", "vi/kept"):
            wait(daemon, what, "Ready")
        for what in ("vi/awaited", "vd/awaited"):
            wait(daemon, what, "WaitForUserUpload")
        data = base / "data"
        for kept in ("volumes", "images", "staging"):
            assert (data / kept).is_dir()
            assert open_to_others(data / kept) == []
        assert open_to_others(own) == []
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert readable_by_nobody(data) == readable_by_nobody(own) == []
    finally:
        assert daemon.stop() == 0


def test_an_earlier_data_directory_keeps_its_claims_and_is_made_private(base: Path) -> None:
    daemon = serve(base)
    try:
        apply(
            daemon,
            """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {name: earlier, namespace: default}
spec: {persistentVolumeClaim: {size: 1Mi}}
""",
        )
        wait(daemon, "vd/earlier", "Ready")
    finally:
        assert daemon.stop() == 0
    data = base / "data"
    for folder, _, files in os.walk(data / "volumes"):  # as an earlier version left it
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    data.chmod(0o755)
    assert readable_by_nobody(data / "volumes") != []

    daemon = serve(base)
    try:
        apply(
            daemon,
            """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualImage
metadata: {name: from-earlier, namespace: default}
spec:
  storage: PersistentVolumeClaim
  dataSource:
    type: ObjectRef
    objectRef: {kind: VirtualDisk, name: earlier}
""",
        )
        wait(daemon, "vi/from-earlier", "Ready")
        wait(daemon, "vd/earlier", "Ready")
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert open_to_others(data / "volumes") == []
        assert readable_by_nobody(data) == []
    finally:
        assert daemon.stop() == 0
