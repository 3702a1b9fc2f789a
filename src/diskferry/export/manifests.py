"""The manifests an export serves: the VM's own, and a Secret carrying the token header."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from diskferry.export.errors import ExportError
from diskferry.export.token import TOKEN_HEADER


def load_manifest(path: str | os.PathLike[str]) -> str:
    """The manifest file's text, checked to be YAML."""
    try:
        text = Path(path).read_text()
        list(yaml.safe_load_all(text))
    except (OSError, yaml.YAMLError) as e:
        raise ExportError(f"cannot read the manifest {path}: {str(e).splitlines()[0]}") from e
    return text


def secret_manifest(export_name: str, token: str) -> str:
    """A Secret whose value is the token header line, as CDI's secretExtraHeaders reads it."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"header-secret-{export_name}"},
        "type": "Opaque",
        "stringData": {"token": f"{TOKEN_HEADER}:{token}"},
    }
    return yaml.safe_dump(secret, sort_keys=False)
