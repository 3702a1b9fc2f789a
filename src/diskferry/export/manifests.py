"""The manifests an export serves, as KubeVirt's virt-exportserver serves them: the VM's own
(`all`) and a Secret carrying the token header (`secret`), as a JSON v1 List, or as YAML
documents each ended by `---` when the client accepts application/yaml (as virtctl asks).

The VM's manifest is given as documents; a document whose `spec.dataSource.http.url` is a
path relative to the export (`volumes/<vol>/disk.img.gz`, a disk the VM brings along) is
pointed at the side asked for: the URL made absolute under that side's base URL with the
token in its query (a VirtualDisk has no header Secret to name, unlike CDI's DataVolume), and
that side's CA as its `caBundle`.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from diskferry.export.errors import ExportError
from diskferry.export.token import TOKEN_HEADER

YAML_TYPE = "application/yaml"
JSON_TYPE = "application/json"
Document = dict[str, Any]


@dataclass(frozen=True)
class Side:
    """One way in to the export: its base URL and the CA (PEM) that verifies it."""

    base_url: str
    ca_pem: str


def load_manifest(path: str | os.PathLike[str]) -> list[Document]:
    """The manifest file's documents, each a mapping."""
    try:
        documents = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        raise ExportError(f"cannot read the manifest {path}: {str(e).splitlines()[0]}") from e
    if not all(isinstance(d, dict) for d in documents):
        raise ExportError(f"the manifest {path} holds a document that is not a mapping")
    return documents


def secret_manifest(export_name: str, token: str) -> Document:
    """A Secret whose value is the token header line, as CDI's secretExtraHeaders reads it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"header-secret-{export_name}"},
        "stringData": {"token": f"{TOKEN_HEADER}:{token}"},
    }


def pointed(documents: list[Document], side: Side, token: str) -> list[Document]:
    """The documents with each relative `spec.dataSource.http.url` pointed at `side`."""
    out = []
    for document in documents:
        http = ((document.get("spec") or {}).get("dataSource") or {}).get("http")
        url = http.get("url") if isinstance(http, dict) else None
        if not isinstance(url, str) or "://" in url:
            out.append(document)
            continue
        absolute = f"{side.base_url.rstrip('/')}/{url.lstrip('/')}"
        query = f"{TOKEN_HEADER}={quote(token, safe='')}"
        source = {
            **http,
            "url": f"{absolute}{'&' if '?' in absolute else '?'}{query}",
            "caBundle": base64.b64encode(side.ca_pem.encode()).decode(),
        }
        data_source = {**document["spec"]["dataSource"], "http": source}
        out.append({**document, "spec": {**document["spec"], "dataSource": data_source}})
    return out


def manifest_body(documents: list[Document], accept: str | None) -> tuple[str, str]:
    """The documents as the client asked (`accept`): YAML documents each ended by `---`, or
    else a JSON v1 List; and the body's content type."""
    if accept is not None and YAML_TYPE in accept:
        text = "".join(yaml.safe_dump(d, sort_keys=False) + "---\n" for d in documents)
        return text, YAML_TYPE
    listed = {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": documents}
    return json.dumps(listed, indent=4), JSON_TYPE
