"""The stand-in cluster (tests/standin.py) in a subprocess, and kubectl pointed at it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from daemon_support import STARTUP_SECONDS

TESTS = Path(__file__).parents[1]
SRC = TESTS.parent / "src"
STOP_SECONDS = 30
NODE_CLASSES = """\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: on-a}
provisioner: diskferry.io/standin
allowedTopologies:
- matchLabelExpressions: [{key: kubernetes.io/hostname, values: [node-a]}]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: on-b}
provisioner: diskferry.io/standin
allowedTopologies:
- matchLabelExpressions: [{key: kubernetes.io/hostname, values: [node-b]}]
"""
"""StorageClasses `on-a` and `on-b`, whose volumes only node-a or node-b reaches (a stand-in
started with `--nodes node-a,node-b`)."""
EXPANSION_CLASSES = """\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: growing}
provisioner: diskferry.io/standin
allowVolumeExpansion: true
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fixed}
provisioner: diskferry.io/standin
allowVolumeExpansion: false
"""
"""StorageClasses `growing`, whose volumes the stand-in's storage expands, and `fixed`, whose
volumes it does not."""


def environment() -> dict[str, str]:
    """This environment, with the checkout's sources first on PYTHONPATH."""
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


@dataclass
class StandIn:
    """A running stand-in: its process, data directory and log."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    log: Path

    @property
    def kubeconfig(self) -> Path:
        """The kubeconfig the stand-in wrote."""
        return self.data_dir / "kubeconfig"

    def stop(self) -> int:
        """SIGTERM, and the exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=STOP_SECONDS)


def start_standin(data_dir: Path, log: Path, *options: str) -> StandIn:
    """Start tests/standin.py on a free port (and `options`) and wait for its kubeconfig."""
    kubeconfig = data_dir / "kubeconfig"
    kubeconfig.unlink(missing_ok=True)
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                str(TESTS / "standin.py"),
                "--data-dir",
                str(data_dir),
                "--port",
                "0",
                *options,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environment(),
        )
    deadline = time.monotonic() + STARTUP_SECONDS
    while not kubeconfig.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the stand-in did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    return StandIn(process, data_dir, log)
