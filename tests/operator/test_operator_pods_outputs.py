"""`diskferry operator --runner pods` reading what its worker Pods write: a BackupStorageLocation
on moto's S3 server becomes Available once a backup worker Pod opened (made) its repository and
listed its metadata, which the Pod writes into its log (its job folder is read-only, and it has
no API access), and which the location's status and the users' log tail do not show."""

from __future__ import annotations

import base64
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS
from operator_support import Cluster
from pods_support import STEP, get_object, pods_operator

sys.path.insert(0, str(Path(__file__).parents[1] / "objstore"))

from s3server import ACCESS_KEY, SECRET_KEY, make_bucket, running_moto

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 600)]
BUCKET = "pods-outputs"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with running_moto() as endpoint:
        make_bucket(endpoint, BUCKET)
        yield endpoint


def _secret(name: str, **data: str) -> str:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return json.dumps(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}
    )


def _location(endpoint: str) -> str:
    spec = {
        "provider": "aws",
        "objectStorage": {"bucket": BUCKET, "prefix": uuid.uuid4().hex},
        "config": {"region": "us-east-1", "s3Url": endpoint},
        "credential": {"name": "s3-keys", "key": "cloud"},
        "encryptionSecretRef": {"name": "repo-pass", "key": "password"},
    }
    body = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "BackupStorageLocation",
        "metadata": {"name": "repo", "namespace": "default"},
        "spec": spec,
    }
    return json.dumps(body)


def test_a_location_is_available_once_its_worker_pod_listed_its_repository(
    pods_cluster: Cluster, pinned: str, s3_endpoint: str
) -> None:
    running = pods_operator(pods_cluster, pinned)
    standin = pods_cluster.standin
    keys = f"[default]\naws_access_key_id={ACCESS_KEY}\naws_secret_access_key={SECRET_KEY}\n"
    for body in (_secret("repo-pass", password="outputs"), _secret("s3-keys", cloud=keys)):
        kubectl(standin, "apply", "-f", "-", stdin=body)
    kubectl(standin, "apply", "-f", "-", stdin=_location(s3_endpoint))

    def available() -> dict | None:
        found = get_object(pods_cluster, "backupstoragelocation", "repo") or {}
        return found if (found.get("status") or {}).get("phase") == "Available" else None

    location = wait_until(available, 600, STEP)
    assert location["status"].get("lastSyncedTime"), location["status"]
    assert "diskferry-output" not in running.log.read_text()
