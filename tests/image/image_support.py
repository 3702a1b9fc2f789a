"""What the image tests share (and the tests that run Pods from the image): the repository's
podman settings, podman run with them, and the image `make image` builds, built once for the
whole test run (once across xdist workers too: the first builds it under a lock, the others
read what it made)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "CONTAINERS_CONF": str(ROOT / "image" / "containers.conf")}
# a build downloads Debian's packages and the wheels: minutes, more on a loaded machine
BUILD_SECONDS = 1200


@dataclass(frozen=True)
class Built:
    """The image's OCI archive and its name in podman's store."""

    archive: str
    name: str


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`podman ARGS` with the repository's containers.conf; fails the test when it fails."""
    proc = subprocess.run(
        ["podman", *args], env=ENV, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Built:
    """The image, built by image/build.sh into this run's temporary folder."""
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":  # each xdist worker's folder sits in the run's
        shared = shared.parent
    with open(shared / "image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = shared / "image.json"
        if not made.exists():
            proc = subprocess.run(
                ["bash", str(ROOT / "image" / "build.sh"), str(shared / "image")],
                env={**ENV, "PYTHON": sys.executable},
                capture_output=True,
                text=True,
                timeout=BUILD_SECONDS,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr[-5000:]
            archive, name = proc.stdout.splitlines()[-2:]
            made.write_text(json.dumps(asdict(Built(archive, name))))
        return Built(**json.loads(made.read_text()))


def image_id(archive: str) -> str:
    """The ID podman gives the image in `archive` (its config's digest)."""
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", f"oci-archive:{archive}"],
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(raw)["config"]["digest"].removeprefix("sha256:")


@pytest.fixture(scope="session")
def pinned(built: Built) -> str:
    """The built image under a name of its own, made of its ID, that another build of the same
    version (which takes the version's tag) does not move; loaded again if it left the store."""
    found = image_id(built.archive)
    if subprocess.run(["podman", "image", "exists", found], env=ENV, check=False).returncode:
        podman("load", "--quiet", "--input", built.archive)
    name = f"localhost/diskferry-tested:{found[:12]}"
    podman("tag", found, name)
    return name
