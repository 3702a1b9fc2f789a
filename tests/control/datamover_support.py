"""The backup tests' daemon: the controllers with a moto S3 server, Secrets and storage
locations at hand, and stand-in VirtualMachine and DataMoverConfig kinds until those land."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

from reconcile_support import Daemon

sys.path.insert(0, str(Path(__file__).parent.parent / "objstore"))

from s3server import ACCESS_KEY, SECRET_KEY, make_bucket, running_moto

from diskferry.control.resources.core import SECRETS

PASSWORD = "bars-secret"
CREDENTIALS = f"[default]\naws_access_key_id={ACCESS_KEY}\naws_secret_access_key={SECRET_KEY}\n"

__all__ = ["CREDENTIALS", "PASSWORD", "make_bucket", "running_moto"]


def secret(daemon: Daemon, name: str, **data: str) -> None:
    """Create the Secret `name` in the default namespace holding `data`."""
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}
    daemon.objects.create(SECRETS, "default", body)


def filesystem_bsl(directory: Path, **extra: Any) -> dict[str, Any]:
    """The spec of a filesystem location in `directory`, its password in the Secret repo-pass."""
    return {
        "provider": "filesystem",
        "objectStorage": {"bucket": str(directory)},
        "encryptionSecretRef": {"name": "repo-pass", "key": "password"},
        **extra,
    }


def s3_bsl(endpoint: str, bucket: str, prefix: str) -> dict[str, Any]:
    """The spec of an aws location on the S3 server at `endpoint`, keys in the Secret s3-keys."""
    return {
        "provider": "aws",
        "objectStorage": {"bucket": bucket, "prefix": prefix},
        "config": {"region": "us-east-1", "s3Url": endpoint},
        "credential": {"name": "s3-keys", "key": "cloud"},
        "encryptionSecretRef": {"name": "repo-pass", "key": "password"},
    }
