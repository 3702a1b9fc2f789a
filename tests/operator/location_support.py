"""A BackupStorageLocation `repo` in the namespace default on moto's S3 server, as the operator
tests make it: its password and S3 keys in Secrets, its prefix a fresh one in `bucket`."""

from __future__ import annotations

import base64
import json
import sys
import uuid
from pathlib import Path

from daemon_support import kubectl
from standin_support import StandIn

sys.path.insert(0, str(Path(__file__).parents[1] / "objstore"))

from s3server import ACCESS_KEY, SECRET_KEY

LOCATION = "repo"


def _secret(name: str, **data: str) -> str:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}
    return json.dumps(body)


def apply_s3_location(standin: StandIn, endpoint: str, bucket: str, password: str) -> None:
    """Apply the location LOCATION on `endpoint`'s `bucket`, encrypted with `password`."""
    keys = f"[default]\naws_access_key_id={ACCESS_KEY}\naws_secret_access_key={SECRET_KEY}\n"
    for body in (_secret("repo-pass", password=password), _secret("s3-keys", cloud=keys)):
        kubectl(standin, "apply", "-f", "-", stdin=body)
    spec = {
        "provider": "aws",
        "objectStorage": {"bucket": bucket, "prefix": uuid.uuid4().hex},
        "config": {"region": "us-east-1", "s3Url": endpoint},
        "credential": {"name": "s3-keys", "key": "cloud"},
        "encryptionSecretRef": {"name": "repo-pass", "key": "password"},
    }
    location = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "BackupStorageLocation",
        "metadata": {"name": LOCATION, "namespace": "default"},
        "spec": spec,
    }
    kubectl(standin, "apply", "-f", "-", stdin=json.dumps(location))
