"""`diskferry operator` in a subprocess against the stand-in cluster (a Cluster: the stand-in and
the operators started on it), and what tests read of it: its probes, the Lease's holder, the
Events it wrote."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from control_support import stop_workers_under, wait_until
from daemon_support import free_port, kubectl
from standin_support import StandIn, environment, start_standin

from diskferry.control.runtime.runner.stop import stop_data_dir

NAMESPACE = "diskferry-system"
LEASE = "diskferry-operator"
STARTUP_SECONDS = 60
STOP_SECONDS = 60
KUBECTL_SECONDS = 60  # for kubectl itself, beyond what it waits for
# short enough for a test to see a takeover, long enough for a busy machine to renew in time
LEASE_OPTIONS = ("--lease-duration", "8", "--renew-deadline", "6", "--retry-period", "1")


@dataclass
class RunningOperator:
    """One operator instance: its process, name in the Lease, log and probes' port."""

    process: subprocess.Popen[bytes]
    identity: str
    log: Path
    health_port: int

    def probe(self, path: str) -> int:
        """The status code of GET `path` on the probes' port (0 when nothing answers)."""
        url = f"http://127.0.0.1:{self.health_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return answer.status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return 0

    def stop(self) -> int:
        """SIGTERM, and the exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=STOP_SECONDS)

    def kill(self) -> None:
        """SIGKILL: gone without releasing anything."""
        self.process.kill()
        self.process.wait(timeout=STOP_SECONDS)


def start_operator(
    standin: StandIn, data_dir: Path, log: Path, identity: str, *options: str
) -> RunningOperator:
    """Start `diskferry operator` for the stand-in as `identity`, its workers under `data_dir`,
    and wait until its probes answer."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "diskferry.cli.main",
        "operator",
        "--kubeconfig",
        str(standin.kubeconfig),
        "--namespace",
        NAMESPACE,
        "--data-dir",
        str(data_dir),
        "--identity",
        identity,
        "--health-address",
        "127.0.0.1",
        "--health-port",
        str(port),
        "--proxy-port",
        str(free_port()),
        *LEASE_OPTIONS,
        *options,
    ]
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=environment())
    running = RunningOperator(process, identity, log, port)
    deadline = time.monotonic() + STARTUP_SECONDS
    while running.probe("/healthz") != 200:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the operator did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    return running


def lease(standin: StandIn) -> dict[str, Any]:
    """The operators' Lease ({} when there is none yet)."""
    out = kubectl(
        standin, "get", "lease", LEASE, "-n", NAMESPACE, "-o", "json", "--ignore-not-found"
    )
    return json.loads(out) if out.strip() else {}


def holder(standin: StandIn) -> str | None:
    """Who holds the operators' Lease now."""
    return (lease(standin).get("spec") or {}).get("holderIdentity")


def wait_holder(standin: StandIn, identity: str, timeout: float = 60) -> dict[str, Any]:
    """The Lease once `identity` holds it."""
    return wait_until(lambda: holder(standin) == identity and lease(standin), timeout, step=0.2)


def reporters(standin: StandIn, name: str) -> set[str]:
    """The instances that reported Events about the object `name` in `default`."""
    events = json.loads(kubectl(standin, "get", "events", "-n", "default", "-o", "json"))
    return {
        event.get("reportingInstance", "")
        for event in events["items"]
        if event["involvedObject"].get("name") == name
    }


def blank_disk(name: str) -> str:
    """A blank VirtualDisk of 64 MiB, as a manifest."""
    return (
        "apiVersion: diskferry.io/v1alpha1\n"
        "kind: VirtualDisk\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        "spec:\n"
        "  persistentVolumeClaim: {size: 64Mi}\n"
    )


def wait_ready(standin: StandIn, name: str, timeout: str = "120s", kind: str = "vd") -> None:
    """Wait (with kubectl, for `timeout` in seconds) until the VirtualDisk (or the object of
    `kind`) `name` is Ready."""
    out = kubectl(
        standin,
        "wait",
        f"{kind}/{name}",
        "--for=jsonpath={.status.phase}=Ready",
        f"--timeout={timeout}",
        timeout=float(timeout.removesuffix("s")) + KUBECTL_SECONDS,
    )
    assert "condition met" in out


class Cluster:
    """A stand-in with the operators' namespace, and the operators started on it."""

    def __init__(self, base: Path, *options: str) -> None:
        self.base = base
        self.data_dir = base / "operator"
        self.standin = start_standin(base / "standin", base / "standin.log", *options)
        kubectl(self.standin, "create", "namespace", NAMESPACE)
        self.operators: list[RunningOperator] = []

    def start(self, identity: str, *options: str) -> RunningOperator:
        """An operator named `identity`, its workers in the data directory all share."""
        log = self.base / f"{identity}.log"
        running = start_operator(self.standin, self.data_dir, log, identity, *options)
        self.operators.append(running)
        return running

    def close(self) -> None:
        """Kill the operators left, stop their local workers, and stop the stand-in."""
        for running in self.operators:
            if running.process.poll() is None:
                running.kill()
        if self.data_dir.exists():
            stop_data_dir(self.data_dir, 30)
            stop_workers_under(self.data_dir)
        assert self.standin.stop() == 0
