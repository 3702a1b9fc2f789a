"""Where a containerDisk's disk file lies inside the one uncompressed tar layer of an image in
an OCI layout, as `image push` writes it: so that QEMU opens the disk in place, read-only, as a
slice of the layer's blob, with nothing copied or unpacked."""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path

from diskferry.registry.containerdisk import disk_name
from diskferry.registry.containerdisk_push import ANNOTATION, LAYER_TAR
from diskferry.registry.errors import ContainerDiskError
from diskferry.registry.layout import Layout

SECTOR = 512
_FORMATS = {".img": "raw", ".qcow2": "qcow2"}


@dataclass(frozen=True)
class DiskInLayer:
    """The disk file of an image: the blob holding it, where it starts there and how long it
    is (whole 512-byte sectors, as a block driver takes a slice), and its format."""

    blob: Path
    offset: int
    size: int
    format: str


def disk_in_layout(folder: Path, tag: str) -> DiskInLayer:
    """The disk of the image tagged `tag` in the layout at `folder`; ContainerDiskError when
    the image is not one uncompressed tar layer holding a raw or qcow2 disk under disk/."""
    layout = Layout(folder)
    image = layout.image(tag)
    layers = image.layers
    if len(layers) != 1 or layers[0].get("mediaType") != LAYER_TAR:
        raise ContainerDiskError(
            f"{image.name}: not one uncompressed tar layer, so its disk cannot be opened in place"
        )
    blob = layout.blob_path(layers[0]["digest"])
    try:
        with tarfile.open(blob, mode="r:") as tar:
            member = next((m for m in tar if disk_name(m)), None)
    except (OSError, tarfile.TarError) as e:
        raise ContainerDiskError(f"{image.name}: its layer cannot be read ({e})") from e
    if member is None:
        raise ContainerDiskError(f"{image.name}: no disk file under disk/")
    fmt = _FORMATS.get(Path(member.name).suffix)
    if fmt is None or image.annotations.get(f"{ANNOTATION}.format", fmt) != fmt:
        raise ContainerDiskError(f"{image.name}: {member.name} is neither a raw nor a qcow2 disk")
    size = -(-member.size // SECTOR) * SECTOR  # the tar pads every file to whole blocks
    return DiskInLayer(blob, member.offset_data, size, fmt)
