"""`diskferry operator` against the stand-in cluster, driven with kubectl as a user would: a
blank VirtualDisk becomes Ready; of two operators only the Lease's holder reconciles, and the
other takes over within the lease's duration when the leader is killed; a leader that loses
the Lease stops; watches that fell behind (410 Gone) list again and go on."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from control_support import wait_until
from daemon_support import kubectl
from operator_support import (
    LEASE,
    LEASE_OPTIONS,
    NAMESPACE,
    Cluster,
    blank_disk,
    holder,
    lease,
    reporters,
    wait_holder,
    wait_ready,
)

LEASE_SECONDS = float(LEASE_OPTIONS[LEASE_OPTIONS.index("--lease-duration") + 1])
RETRY_SECONDS = float(LEASE_OPTIONS[LEASE_OPTIONS.index("--retry-period") + 1])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path)
    yield made
    made.close()


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_a_blank_disk_applied_with_kubectl_becomes_ready(cluster: Cluster) -> None:
    running = cluster.start("solo")
    wait_holder(cluster.standin, "solo")
    kubectl(cluster.standin, "apply", "-f", "-", stdin=blank_disk("blank"))
    wait_ready(cluster.standin, "blank")
    assert reporters(cluster.standin, "blank") == {"solo"}
    classes = kubectl(cluster.standin, "get", "storageclasses", "-o", "name")
    assert classes.strip()  # the defaults the operator made, as diskferry serve makes them
    assert running.probe("/healthz") == 200
    assert running.probe("/readyz") == 200
    assert running.stop() == 0
    assert holder(cluster.standin) is None  # released on the way out


def test_only_the_leader_reconciles_and_the_other_takes_over_when_it_is_killed(
    cluster: Cluster,
) -> None:
    first = cluster.start("first")
    wait_holder(cluster.standin, "first")
    second = cluster.start("second")
    wait_until(lambda: "held by first" in second.log.read_text(), 60)
    assert second.probe("/readyz") == 200  # waiting, and ready to take over
    kubectl(cluster.standin, "apply", "-f", "-", stdin=blank_disk("led"))
    wait_ready(cluster.standin, "led")
    assert reporters(cluster.standin, "led") == {"first"}
    assert "reconciling" not in second.log.read_text()

    before = lease(cluster.standin)["spec"]
    first.kill()
    last = lease(cluster.standin)["spec"]  # the last renewal before it died
    assert _time(last["renewTime"]) >= _time(before["renewTime"])
    taken = wait_holder(cluster.standin, "second", timeout=10 * LEASE_SECONDS)["spec"]
    waited = (_time(taken["acquireTime"]) - _time(last["renewTime"])).total_seconds()
    # never before the dead leader's lease ran out; within its duration once it has, give or
    # take the tries in between
    assert LEASE_SECONDS <= waited <= LEASE_SECONDS + 3 * RETRY_SECONDS
    assert taken["leaseTransitions"] == before["leaseTransitions"] + 1

    kubectl(cluster.standin, "apply", "-f", "-", stdin=blank_disk("after"))
    wait_ready(cluster.standin, "after")
    assert reporters(cluster.standin, "after") == {"second"}


def test_a_leader_that_finds_another_in_its_lease_stops_reconciling(cluster: Cluster) -> None:
    running = cluster.start("ousted")
    wait_holder(cluster.standin, "ousted")
    kubectl(
        cluster.standin,
        "patch",
        "lease",
        LEASE,
        "-n",
        NAMESPACE,
        "--type",
        "merge",
        "-p",
        '{"spec": {"holderIdentity": "intruder"}}',
    )
    assert running.process.wait(timeout=60) == 1
    assert "lost the lease diskferry-system/diskferry-operator" in running.log.read_text()


@pytest.fixture
def compacting(tmp_path: Path) -> Iterator[Cluster]:
    """A stand-in that keeps few changes (64), as an etcd compacted often."""
    made = Cluster(tmp_path, "--keep-changes", "64")
    yield made
    made.close()


def test_watches_that_fell_behind_list_again_and_go_on(compacting: Cluster) -> None:
    running = compacting.start("watcher", "--watch-seconds", "2")
    wait_holder(compacting.standin, "watcher")
    kubectl(compacting.standin, "apply", "-f", "-", stdin=blank_disk("early"))
    wait_ready(compacting.standin, "early")
    # changes no reconciled kind's watch sees, until what followed their last ones is gone
    churn = "".join(
        f"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: churn-{n}, namespace: default}}\n"
        for n in range(200)
    )
    kubectl(compacting.standin, "apply", "-f", "-", stdin=churn)
    wait_until(lambda: "expired" in running.log.read_text(), 60)
    kubectl(compacting.standin, "apply", "-f", "-", stdin=blank_disk("late"))
    wait_ready(compacting.standin, "late")
    assert running.process.poll() is None
