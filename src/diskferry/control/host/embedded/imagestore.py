"""The embedded host's image store (`host.images`, the DVCR role): DATA_DIR/images, one OCI
image layout per repository, as `diskferry image serve DATA_DIR/images` serves it; an image of
a VirtualImage is `vi/<namespace>/<name>`, of a ClusterVirtualImage `cvi/<name>`, tagged with
the object's uid, as Deckhouse names them in DVCR. A reference is made only from the object's
kind and metadata, each part a valid Kubernetes name, never from a URL a status names. A VM
opens an image's disk in place (`disk`): a slice of the image's layer blob, read-only; an
upload is staged in a claim of DATA_DIR/staging before it is stored."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from diskferry.control.host.embedded.volumes import checked_name
from diskferry.control.host.images import REPOSITORIES, ImageNotStoredError, StoredDisk
from diskferry.control.host.volumes import VolumeClass
from diskferry.control.resources.model import Resource
from diskferry.registry.disk_in_layer import disk_in_layout
from diskferry.registry.errors import RegistryError
from diskferry.registry.layout import REF_NAME, parse_layout_reference

STORE_DIR = "images"
STAGING = "staging"


class LayoutImageStore:
    """Where images are kept, and their references (`oci:DIR:TAG`)."""

    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / STORE_DIR

    @property
    def staging(self) -> VolumeClass:
        """DATA_DIR/staging: the class of the claims uploads are staged in."""
        return VolumeClass(STAGING, root=self.root.parent / STAGING)

    def unavailable(self) -> str | None:
        """None: images are kept in DATA_DIR/images."""
        return None

    def reference(self, obj: Resource) -> str:
        """The `oci:` reference of the image of a VirtualImage or ClusterVirtualImage."""
        meta = obj.metadata
        parts = [REPOSITORIES[obj.kind], *([meta.namespace] if meta.namespace else []), meta.name]
        folder = self.root.joinpath(*(checked_name(part or "", "image part") for part in parts))
        return f"oci:{folder}:{checked_name(meta.uid or '', 'uid')}"

    def disk(self, obj: Resource) -> StoredDisk:
        """Where the disk of the image of `obj` lies in its layer's blob (ImageNotStoredError
        when the store has no such image, or one whose disk cannot be opened in place)."""
        folder, tag = parse_layout_reference(self.reference(obj))
        try:
            found = disk_in_layout(folder, tag or "")
        except RegistryError as e:
            raise ImageNotStoredError(e.message) from e
        return StoredDisk(str(found.blob), found.offset, found.size, found.format)

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
