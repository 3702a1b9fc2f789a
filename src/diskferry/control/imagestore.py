"""The embedded image store (the DVCR role): DATA_DIR/images, one OCI image layout per
repository, as `diskferry image serve DATA_DIR/images` serves it; an image of a VirtualImage is
`vi/<namespace>/<name>`, of a ClusterVirtualImage `cvi/<name>`, tagged with the object's uid,
as Deckhouse names them in DVCR."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from diskferry.registry.layout import REF_NAME, parse_layout_reference

STORE_DIR = "images"


class ImageStore:
    """Where images are kept, and their references (`oci:DIR:TAG`)."""

    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / STORE_DIR

    def reference(self, prefix: str, namespace: str | None, name: str, uid: str) -> str:
        """The `oci:` reference of one object's image."""
        parts = [prefix, *([namespace] if namespace else []), name]
        return f"oci:{self.root.joinpath(*parts)}:{uid}"

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
