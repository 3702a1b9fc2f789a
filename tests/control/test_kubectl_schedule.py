"""The real kubectl against `diskferry serve` with its controllers: Schedules applied, listed
with their print columns, a bad cron expression shown as FailedValidation."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_support import Served, free_port, kubectl, start_daemon

assert shutil.which("kubectl"), "these tests drive the real kubectl: install kubectl 1.32 on PATH"

EXAMPLE = Path(__file__).parents[2] / "examples" / "schedule.yaml"
BROKEN = """\
apiVersion: diskferry.io/v1alpha1
kind: Schedule
metadata: {name: broken, namespace: default}
spec:
  schedule: "every night"
  template: {storageLocation: repo}
"""


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Served]:
    served = start_daemon(
        tmp_path / "data", tmp_path / "daemon.log", options=("--proxy-port", str(free_port()))
    )
    yield served
    assert served.stop() == 0


def test_kubectl_applies_lists_and_waits_for_schedules(daemon: Served) -> None:
    applied = kubectl(daemon, "apply", "--validate=strict", "-f", str(EXAMPLE))
    assert "schedule.diskferry.io/nightly created" in applied
    kubectl(daemon, "apply", "-f", "-", stdin=BROKEN)
    kubectl(
        daemon,
        "wait",
        "schedule/broken",
        "--for=jsonpath={.status.phase}=FailedValidation",
        "--timeout=30s",
    )
    kubectl(
        daemon,
        "wait",
        "schedule/nightly",
        "--for=jsonpath={.status.phase}=Enabled",
        "--timeout=30s",
    )
    lines = kubectl(daemon, "get", "schedules").splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "SCHEDULE", "LASTBACKUP", "PAUSED", "AGE"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["nightly"][1:7] == ["Enabled", "0", "2", "*", "*", "*"]
    assert rows["broken"][1] == "FailedValidation"
    broken = json.loads(kubectl(daemon, "get", "schedule", "broken", "-o", "json"))
    [error] = broken["status"]["validationErrors"]
    assert error.startswith("spec.schedule: invalid cron expression 'every night'")
    nightly = json.loads(kubectl(daemon, "get", "schedules", "nightly", "-o", "json"))
    assert nightly["spec"]["keep"] == {"keepLast": 7, "keepDaily": 0, "keepWeekly": 4}
    assert nightly["status"]["nextRun"].endswith("T02:00:00Z")
    header, row = kubectl(daemon, "get", "schedule", "nightly", "-o", "wide").splitlines()
    assert "NEXT RUN" in header
    assert nightly["status"]["nextRun"] in row.split() and "<invalid>" not in row
