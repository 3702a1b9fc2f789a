"""`diskferry operator --runner pods` reading what its worker Pods write: a BackupStorageLocation
on moto's S3 server becomes Available once a backup worker Pod opened (made) its repository and
listed its metadata, which the Pod writes into its log (its job folder is read-only, and it has
no API access), and which the location's status and the users' log tail do not show."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from control_support import wait_until
from image_support import BUILD_SECONDS
from location_support import apply_s3_location
from operator_support import Cluster
from pods_support import STEP, get_object, pods_operator

sys.path.insert(0, str(Path(__file__).parents[1] / "objstore"))

from s3server import make_bucket, running_moto

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 600)]
BUCKET = "pods-outputs"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with running_moto() as endpoint:
        make_bucket(endpoint, BUCKET)
        yield endpoint


def test_a_location_is_available_once_its_worker_pod_listed_its_repository(
    pods_cluster: Cluster, pinned: str, s3_endpoint: str
) -> None:
    running = pods_operator(pods_cluster, pinned)
    standin = pods_cluster.standin
    apply_s3_location(standin, s3_endpoint, BUCKET, "outputs")

    def available() -> dict | None:
        found = get_object(pods_cluster, "backupstoragelocation", "repo") or {}
        return found if (found.get("status") or {}).get("phase") == "Available" else None

    wait_until(available, 600, STEP)
    # the Backups' sync, which sets lastSyncedTime, may follow the phase Available
    wait_until(lambda: ((available() or {}).get("status") or {}).get("lastSyncedTime"), 120, STEP)
    assert "diskferry-output" not in running.log.read_text()
