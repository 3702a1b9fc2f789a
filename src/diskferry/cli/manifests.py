"""Manifests as `apply -f` reads them: files, directories or stdin, YAML with many documents."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from diskferry.base import DiskferryError

SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Manifest:
    """One object to apply and where it came from."""

    source: str
    body: dict[str, Any]


def _files(source: str) -> Iterator[tuple[str, str]]:
    if source == "-":
        yield "-", sys.stdin.read()
        return
    path = Path(source)
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
        if not found:
            raise DiskferryError(f"{source}: no .yaml, .yml or .json files in the directory")
    else:
        found = [path]
    for file in found:
        try:
            yield str(file), file.read_text()
        except OSError as e:
            raise DiskferryError(f"{file}: {e.strerror}") from None


def _documents(source: str, text: str) -> Iterator[dict[str, Any]]:
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        raise DiskferryError(f"{source}: not YAML: {' '.join(str(e).split())}") from None
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise DiskferryError(f"{source}: a document is not a mapping")
        if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            yield from doc["items"]
        else:
            yield doc


def check(manifest: Manifest) -> None:
    """Refuse a manifest without apiVersion, kind or a name, saying which is missing."""
    body = manifest.body
    metadata = body.get("metadata")
    missing = [key for key in ("apiVersion", "kind") if not body.get(key)]
    if not isinstance(metadata, dict) or not (metadata.get("name") or metadata.get("generateName")):
        missing.append("metadata.name")
    if missing:
        raise DiskferryError(f"{', '.join(missing)} not set")


def load(sources: list[str]) -> list[Manifest]:
    """Every document in the files, directories (their .yaml, .yml and .json files) or `-`."""
    manifests = [
        Manifest(name, doc)
        for source in sources
        for name, text in _files(source)
        for doc in _documents(name, text)
    ]
    if not manifests:
        raise DiskferryError(f"no objects passed to apply in {', '.join(sources)}")
    return manifests
