"""What the image tests share: the repository's podman settings, and podman run with them."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

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
