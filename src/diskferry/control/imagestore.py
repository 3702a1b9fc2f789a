"""The embedded image store (the DVCR role): DATA_DIR/images, one OCI image layout per
repository, as `diskferry image serve DATA_DIR/images` serves it; an image of a VirtualImage is
`vi/<namespace>/<name>`, of a ClusterVirtualImage `cvi/<name>`, tagged with the object's uid,
as Deckhouse names them in DVCR. A reference is made only from the object's kind and metadata,
each part a valid Kubernetes name, never from a URL a status names. A VM opens an image's disk
in place (`disk`): a slice of the image's layer blob, read-only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from diskferry.control.model import Resource
from diskferry.control.volumes import checked_name
from diskferry.registry.disk_in_layer import DiskInLayer, disk_in_layout
from diskferry.registry.layout import REF_NAME, parse_layout_reference

STORE_DIR = "images"
REPOSITORIES = {"VirtualImage": "vi", "ClusterVirtualImage": "cvi"}
"""The kinds kept in the store, and the repository each one's images are under."""


class ImageStore:
    """Where images are kept, and their references (`oci:DIR:TAG`)."""

    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / STORE_DIR

    def reference(self, obj: Resource) -> str:
        """The `oci:` reference of the image of a VirtualImage or ClusterVirtualImage."""
        meta = obj.metadata
        parts = [REPOSITORIES[obj.kind], *([meta.namespace] if meta.namespace else []), meta.name]
        folder = self.root.joinpath(*(checked_name(part or "", "image part") for part in parts))
        return f"oci:{folder}:{checked_name(meta.uid or '', 'uid')}"

    def disk(self, obj: Resource) -> DiskInLayer:
        """Where the disk of the image of `obj` lies in the store (RegistryError when the store
        has no such image, or one whose disk cannot be opened in place)."""
        folder, tag = parse_layout_reference(self.reference(obj))
        return disk_in_layout(folder, tag or "")

    def holds(self, reference: str) -> bool:
        """Whether the store has the image tagged as `reference` says."""
        folder, tag = parse_layout_reference(reference)
        return tag in _tags(folder)

    def remove(self, reference: str) -> None:
        """Remove the image: its layout, when no other tag is in it (else the layout stays)."""
        folder, tag = parse_layout_reference(reference)
        if not folder.is_relative_to(self.root) or _tags(folder) - {tag}:
            return
        shutil.rmtree(folder, ignore_errors=True)


def _tags(folder: Path) -> set[str]:
    try:
        index = json.loads((folder / "index.json").read_text())
    except (OSError, ValueError):
        return set()
    return {str((e.get("annotations") or {}).get(REF_NAME)) for e in index.get("manifests", [])}
