"""Operator benchmark: what `diskferry operator` holds and spends for 1,000 and 10,000 resources.

The stand-in cluster's API (tests/standin.py) serves a state file made beforehand with the
store benchmark's objects (bench_store: names s000000..., an app and a shard label each),
here VirtualMachineClasses: the operator follows only diskferry's kinds (the store benchmark's
Secrets it reads by name alone, so they would cost it nothing), and a class's reconcile reads
and writes nothing but the class. Each is made as `kubectl apply` leaves it (its
last-applied-configuration annotation) and as the operator leaves it (the finalizer and Ready
status the reconciler gave the first, copied), so that a reconcile reads it and writes nothing.
Then `diskferry operator --runner local` starts against the stand-in, and the stand-in's request
counts (its /metrics) tell when the operator began (its first read of a class, once it holds
the Lease), when every class was read once (the first full pass: the listing, the queue and a
reconcile of each), and how long the manager's first periodic resync (asked for a minute
after the listing, with --resync-period) took to read every class again, from its first read.
The operator's peak RSS (VmHWM) is read then, and its CPU seconds once it has stopped. The
ratio of the peaks says whether the operator's memory grows with the objects it holds, and by
how much for each. One run of each size, whatever --rounds says; everything runs on tmpfs when
there is one.

`python -m benchmarks.bench_operator [--objects 1000,10000]`
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.bench_import import DISKFERRY
from benchmarks.bench_store import labels
from benchmarks.load import LoadWatch
from benchmarks.measure import Comparison, proc_status
from benchmarks.nginx import free_port
from benchmarks.options import as_installed
from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.reconcilers.vms.vmclass import (
    VirtualMachineClassReconciler,
    ensure_generic_class,
)
from diskferry.control.resources.core import NAMESPACES
from diskferry.control.resources.foreign import with_foreign_kinds
from diskferry.control.resources.model import API_VERSION
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualmachineclass import (
    GENERIC,
    VIRTUAL_MACHINE_CLASSES,
    VirtualMachineClass,
)
from diskferry.control.runtime.client import EmbeddedClient
from diskferry.control.runtime.runner.stop import stop_data_dir

COUNTS = (1_000, 10_000)
STANDIN = Path(__file__).parents[1] / "tests" / "standin.py"
NAMESPACE = "diskferry-system"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
SPEC = {"cpu": {"type": "Host"}}
READS = 'diskferry_api_requests_total{verb="get",resource="virtualmachineclasses",code="200"}'
TIMEOUT = 1800.0  # seconds for the stand-in to start, and for each pass
POLL = 0.25
STOP_SECONDS = 60
SHM = Path("/dev/shm")
RESYNC = "1m"  # the operator's resync here, so that a run sees one soon after its first pass


def applied(i: int, finalizers: list[str]) -> dict[str, Any]:
    """Class `i` as `kubectl apply` leaves it, with the store benchmark's name and labels, and
    `finalizers`."""
    meta = {"name": f"s{i:06d}", "labels": labels(i)}
    body = {"apiVersion": API_VERSION, "kind": VIRTUAL_MACHINE_CLASSES.kind, "metadata": meta}
    body["spec"] = SPEC
    last = json.dumps(body, separators=(",", ":"))
    return {
        **body,
        "metadata": {**meta, "annotations": {LAST_APPLIED: last}, "finalizers": finalizers},
    }


def prepare(state: Path, count: int) -> None:
    """The stand-in's state file: the operator's namespace, the class `generic` and `count`
    classes, each as kubectl apply and the operator leave it (the reconciler settles `generic`
    and the first class; the others are given the first's finalizers and status)."""
    service = ObjectService(state, with_foreign_kinds(REGISTRY))
    try:
        service.create(NAMESPACES, None, {"metadata": {"name": NAMESPACE}})
        client = EmbeddedClient(service, service.registry)
        ensure_generic_class(client)
        first = service.create(VIRTUAL_MACHINE_CLASSES, None, applied(0, []))[0]
        reconciler = VirtualMachineClassReconciler(client)
        for name in (GENERIC, first["metadata"]["name"]):
            reconciler.reconcile(client.get(VirtualMachineClass, None, name))
        settled = service.get(VIRTUAL_MACHINE_CLASSES, None, first["metadata"]["name"])
        status = {"status": settled["status"]}
        for i in range(1, count):
            body = applied(i, settled["metadata"]["finalizers"])
            service.create(VIRTUAL_MACHINE_CLASSES, None, body)
            name = body["metadata"]["name"]
            service.patch(
                VIRTUAL_MACHINE_CLASSES, None, name, status, "merge", subresource="status"
            )
    finally:
        service.close()


@dataclass
class StandIn:
    """The stand-in's process, and how to read its metrics."""

    process: subprocess.Popen[bytes]
    url: str
    token: str
    tls: ssl.SSLContext

    def reads(self) -> int:
        """How many GETs of a VirtualMachineClass the stand-in answered 200 so far."""
        request = urllib.request.Request(
            f"{self.url}/metrics", headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=60, context=self.tls) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith(READS):
                    return int(line.split()[-1])
        return 0


def start_standin(data_dir: Path, log: Path) -> StandIn:
    """tests/standin.py on a free port over `data_dir`, once it wrote its kubeconfig."""
    kubeconfig = data_dir / "kubeconfig"
    with log.open("ab") as out:
        command = [sys.executable, str(STANDIN), "--data-dir", str(data_dir), "--port", "0"]
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + TIMEOUT
    while not kubeconfig.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the stand-in did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    config = yaml.safe_load(kubeconfig.read_text())
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    tls = ssl.create_default_context(cadata=ca)
    return StandIn(process, cluster["server"], user["token"], tls)


def start_operator(kubeconfig: Path, data_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    """`diskferry operator --runner local` against the stand-in, its state in `data_dir`."""
    command = [
        *DISKFERRY,
        "operator",
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        NAMESPACE,
        "--data-dir",
        str(data_dir),
        "--identity",
        "bench",
        "--health-address",
        "127.0.0.1",
        "--health-port",
        str(free_port()),
        "--proxy-port",
        str(free_port()),
        "--runner",
        "local",
        "--resync-period",
        RESYNC,
    ]
    with log.open("ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen[bytes]) -> os.struct_rusage | None:
    """SIGTERM, SIGKILL when it lingers; its resource usage, None when it was reaped already."""
    if process.poll() is not None:
        return None
    process.send_signal(signal.SIGTERM)
    killer = threading.Timer(STOP_SECONDS, process.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        killer.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)
    return usage


def cpu_seconds(usage: os.struct_rusage | None) -> float:
    """User and system CPU seconds of a process that ended."""
    return usage.ru_utime + usage.ru_stime if usage else float("nan")


def wait_reads(standin: StandIn, operator: subprocess.Popen[bytes], at_least: int) -> float:
    """The monotonic time once the stand-in answered `at_least` reads of a class; the operator
    ending, or TIMEOUT passing, first is an error."""
    deadline = time.monotonic() + TIMEOUT
    while standin.reads() < at_least:
        if operator.poll() is not None:
            raise RuntimeError(f"the operator ended ({operator.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {at_least} reads after {TIMEOUT:.0f} s")
        time.sleep(POLL)
    return time.monotonic()


@dataclass
class Held:
    """One run: what the operator spent holding `count` classes."""

    count: int
    prepare_seconds: float
    startup_seconds: float
    first_pass_seconds: float
    resync_seconds: float
    peak_rss: int
    operator_cpu: float
    standin_cpu: float


def scratch(workdir: Path) -> Path:
    """A fresh directory for one run: on tmpfs when there is one (the stand-in syncs every
    commit, and its disk is not what is measured), else under `workdir`."""
    base = SHM if SHM.is_dir() else workdir.resolve()
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="bench-operator-", dir=base))


def tail(log: Path) -> str:
    """The last lines of a log, to say why a run failed."""
    return log.read_text(errors="replace")[-2000:] if log.exists() else ""


def hold(root: Path, standin: StandIn, objects: int) -> tuple[list[float], int, float]:
    """Run the operator over the stand-in's `objects` classes through its first resync: the
    times it started, read its first class, every class, the first of its resync and every
    class again; its peak RSS then; its CPU seconds."""
    before = standin.reads()
    started = time.monotonic()
    operator = start_operator(root / "standin" / "kubeconfig", root / "data", root / "op.log")
    try:
        # the operator reads `generic` once as it starts, then each class once a pass
        marks = [started, wait_reads(standin, operator, before + 1)]
        marks.append(wait_reads(standin, operator, before + 1 + objects))
        marks.append(wait_reads(standin, operator, standin.reads() + 1))
        marks.append(wait_reads(standin, operator, before + 1 + 2 * objects))
        peak = proc_status(operator.pid, "VmHWM")
    finally:
        usage = stop(operator)
        if (root / "data").is_dir():
            stop_data_dir(root / "data", STOP_SECONDS)
    if operator.returncode not in (0, -signal.SIGTERM):
        raise RuntimeError(f"the operator exited {operator.returncode}: {tail(root / 'op.log')}")
    return marks, peak, cpu_seconds(usage)


def measure(workdir: Path, count: int) -> Held:
    """Prepare `count` classes and hold them with the operator; everything removed after."""
    root = scratch(workdir)
    try:
        (root / "standin").mkdir(mode=0o700)
        start = time.monotonic()
        prepare(root / "standin" / "state.db", count)
        prepared = time.monotonic() - start
        standin = start_standin(root / "standin", root / "standin.log")
        try:
            marks, peak, operator_cpu = hold(root, standin, count + 1)  # and `generic`
        except RuntimeError as error:
            log = tail(root / "standin.log")
            raise RuntimeError(f"{error}\nthe stand-in's log: {log}") from None
        finally:
            standin_cpu = cpu_seconds(stop(standin.process))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    started, leading, first, resync, done = marks
    return Held(
        count,
        prepared,
        leading - started,
        first - leading,
        done - resync,
        peak,
        operator_cpu,
        standin_cpu,
    )


def print_held(runs: list[Held], load: LoadWatch) -> None:
    """The runs as a Markdown table, the growth of the peak between the first and the last."""
    print("\n### operator\n")
    print(
        "| classes held | start-up (s) | first full pass (s) | resync pass (s) "
        "| operator peak RSS | operator CPU (s) | stand-in CPU (s) | state file made in (s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        print(
            f"| {r.count:,} | {r.startup_seconds:.1f} | {r.first_pass_seconds:.1f} "
            f"| {r.resync_seconds:.1f} "
            f"| {r.peak_rss / 2**20:.0f} MiB | {r.operator_cpu:.1f} | {r.standin_cpu:.1f} "
            f"| {r.prepare_seconds:.1f} |",
            flush=True,
        )
    if len(runs) > 1:
        low, high = runs[0], runs[-1]
        per_object = (high.peak_rss - low.peak_rss) / (high.count - low.count)
        print(
            f"\nPeak RSS at {high.count:,} over that at {low.count:,}: "
            f"{high.peak_rss / low.peak_rss:.2f}, {per_object / 1024:.2f} KiB more for each "
            "class held.",
            flush=True,
        )
    print(f"\n{load.summary()}", flush=True)


def run(
    workdir: Path, rounds: int, counts: tuple[int, ...] = COUNTS
) -> list[tuple[Comparison, str]]:
    """One run for each count, its table printed here (so no rows are returned)."""
    with LoadWatch() as load:
        runs = [measure(workdir, count) for count in counts]
    print_held(runs, load)
    return []


def main() -> None:
    """Run the benchmark for the counts asked and print its table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, default=Path("benchmarks/work"))
    parser.add_argument("--objects", default=",".join(map(str, COUNTS)))
    args = parser.parse_args()
    as_installed()
    run(args.workdir, 1, tuple(int(n) for n in args.objects.split(",") if n))


if __name__ == "__main__":
    main()
