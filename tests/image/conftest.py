"""The image `make image` builds, built once for the whole test run (once across xdist
workers too: the first builds it under a lock, the others read what it made)."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from dataclasses import asdict

import pytest
from image_support import BUILD_SECONDS, ENV, ROOT, Built


@pytest.fixture(scope="session")
def built(tmp_path_factory, worker_id) -> Built:
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
