"""Changed-block tracking: the qcow2 metadata overlay beside a raw volume, and its bitmaps.

The overlay `<volume>.cbt.qcow2` has the raw volume as its data file (`data_file_raw`),
so the volume stays a valid raw image while writes through the overlay mark its dirty
bitmaps. `diskferry-base` tracks every write since CBT was enabled or the chain reset;
each repository's checkpoints are named `diskferry-<repo-id>-<n>`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from diskferry.base.errors import DiskferryError
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.formats import (
    PROBE_BYTES,
    RAW_DATA,
    FormatError,
    parse_qcow2_header,
    volume_format,
)
from diskferry.qemu import img
from diskferry.qemu.bitmaps import BASE, PREFIX, Checkpoint

SUFFIX = ".cbt.qcow2"


class CbtError(DiskferryError):
    """Changed-block tracking could not be enabled, read, reset or disabled."""

    reason = "CbtError"


@dataclass(frozen=True)
class CbtDisk:
    """A raw volume and its CBT overlay (None when CBT is off)."""

    volume: str
    overlay: str | None

    @property
    def enabled(self) -> bool:
        """Whether the volume has a CBT overlay."""
        return self.overlay is not None


@dataclass(frozen=True)
class CbtStatus:
    """A volume's CBT state: its overlay, size and checkpoints."""

    disk: CbtDisk
    size: int
    checkpoints: list[Checkpoint]

    def to_json(self) -> dict[str, Any]:
        """The status as JSON."""
        return {
            "volume": self.disk.volume,
            "overlay": self.disk.overlay,
            "enabled": self.disk.enabled,
            "size": self.size,
            "checkpoints": [c.to_json() for c in self.checkpoints],
        }


def overlay_path(volume: str) -> str:
    """Where the overlay of `volume` lives."""
    return os.path.abspath(volume) + SUFFIX


def _qemu_img(image: str, *args: str) -> None:
    """Run `qemu-img ARGS` on the overlay `image`."""
    what = f"qemu-img {args[0]}"
    try:
        img.run(list(args), what)
    except img.QemuImgError as e:
        if "lock" in e.stderr:
            raise CbtError(f"{what}: {image} is open in a running QEMU: stop it first") from e
        raise CbtError(str(e)) from e


def _overlay_data_file(overlay: str) -> str:
    """The raw volume the overlay's header names, read without starting qemu-img."""
    try:
        with open(overlay, "rb") as f:
            header = parse_qcow2_header(f.read(PROBE_BYTES))
    except OSError as e:
        raise CbtError(f"cannot read {overlay}: {e.strerror}") from e
    except FormatError as e:
        raise CbtError(f"{overlay} is not a CBT overlay: {e}") from e
    if header.data_file is None or not header.data_file_raw:
        raise CbtError(f"{overlay} is not a CBT overlay: it has no raw data file")
    return header.data_file


def find(path: str) -> CbtDisk:
    """The volume and overlay named by `path`, which may be either of them."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise CbtError(f"{path} does not exist")
    if path.endswith(SUFFIX):
        return CbtDisk(_overlay_data_file(path), path)
    overlay = overlay_path(path)
    if not os.path.exists(overlay):
        return CbtDisk(path, None)
    data_file = _overlay_data_file(overlay)
    if os.path.realpath(data_file) != os.path.realpath(path):
        raise CbtError(
            f"{overlay} tracks {data_file}, not {path}: "
            f"run 'diskferry cbt disable' and 'diskferry cbt enable' on {path}"
        )
    return CbtDisk(path, overlay)


def status(path: str) -> CbtStatus:
    """The CBT state of the volume or overlay at `path`."""
    disk = find(path)
    if disk.overlay is None:
        with FileVolume(disk.volume) as volume:
            return CbtStatus(disk, volume.size, [])
    info = img.info(disk.overlay, "qcow2", untrusted=False)
    entries = info.raw.get("format-specific", {}).get("data", {}).get("bitmaps", [])
    checkpoints = [Checkpoint.from_image(e) for e in entries]
    if checkpoints and not any(c.in_use for c in checkpoints):
        checkpoints = _counted(disk.overlay, checkpoints)
    return CbtStatus(disk, info.virtual_size, checkpoints)


def _counted(overlay: str, checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    """The checkpoints with the bytes each bitmap marks dirty, read by a read-only storage
    daemon; as they were when it cannot open the overlay."""
    from diskferry.qemu.storage_daemon import DaemonDisk, StorageDaemon

    try:
        with StorageDaemon([DaemonDisk("cbt", overlay, read_only=True)]) as daemon:
            assert daemon.qmp is not None
            nodes = daemon.qmp.command("query-named-block-nodes", flat=True)
    except DiskferryError:
        return checkpoints
    counts = {
        b["name"]: int(b.get("count", 0))
        for node in nodes
        if node.get("node-name") == "cbt"
        for b in node.get("dirty-bitmaps", [])
    }
    return [dataclasses.replace(c, dirty_bytes=counts.get(c.name)) for c in checkpoints]


def enable(path: str) -> CbtDisk:
    """Make the overlay of the raw volume at `path` (0600), with the base bitmap enabled."""
    disk = find(path)
    if disk.overlay is not None:
        raise CbtError(f"CBT is already enabled on {disk.volume} ({disk.overlay})")
    with FileVolume(disk.volume) as volume:
        size = volume.size
        fmt = volume_format(volume)
    if fmt not in RAW_DATA:
        raise CbtError(
            f"{disk.volume} is a {fmt} image, not a raw volume: CBT tracks raw volumes "
            f"(convert it first: qemu-img convert -O raw)",
            reason="UnsupportedFormat",
        )
    if size % 512:
        raise CbtError(f"{disk.volume} is {size} bytes, not a multiple of 512: it cannot get CBT")
    overlay = overlay_path(disk.volume)
    partial = overlay + ".part"
    # `qemu-img create` truncates the data file it is given, so the overlay is made over
    # an empty stand-in and then pointed at the volume.
    stand_in = overlay + ".stand-in"
    try:
        _qemu_img(
            partial,
            "create", "-q", "-f", "qcow2",
            "-o", f"data_file={stand_in},data_file_raw=on", partial, str(size),
        )  # fmt: skip
        volume = disk.volume
        _qemu_img(volume, "amend", "-f", "qcow2", "-o", f"data_file={volume}", partial)
        _qemu_img(volume, "bitmap", "--add", "--enable", "-f", "qcow2", partial, BASE)
        os.chmod(partial, 0o600)  # qemu-img made it with the caller's umask
        os.rename(partial, overlay)
    finally:
        for leftover in (partial, stand_in):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
    return CbtDisk(disk.volume, overlay)


def disable(path: str) -> CbtDisk:
    """Remove the overlay of the volume at `path` (the volume keeps its data)."""
    disk = find(path)
    if disk.overlay is None:
        raise CbtError(f"CBT is not enabled on {disk.volume}")
    _qemu_img(disk.overlay, "info", "-f", "qcow2", disk.overlay)
    os.unlink(disk.overlay)
    return CbtDisk(disk.volume, None)


def overwrite_target(path: str, fmt: str) -> tuple[str, bool]:
    """Where an import or restore aimed at `path` writes, and whether that volume has CBT.

    An overlay's path stands for its volume; only a raw disk may replace a tracked volume,
    which its overlay reads as raw.
    """
    if not os.path.exists(path):
        return path, False
    disk = find(path)
    if disk.enabled and fmt != "raw":
        raise CbtError(f"{disk.volume} has CBT: it can only hold a raw disk")
    return disk.volume, disk.enabled


def reset_chain(path: str) -> bool:
    """Forget every checkpoint before a write that bypasses the overlay (import, restore).

    All diskferry bitmaps go, of every repository, so each one's next backup is full;
    a fresh base bitmap starts again, as after `enable`. False when CBT is off.
    """
    state = status(path)
    if state.disk.overlay is None:
        return False
    overlay = state.disk.overlay
    for checkpoint in state.checkpoints:
        if checkpoint.name.startswith(PREFIX):
            _qemu_img(overlay, "bitmap", "--remove", "-f", "qcow2", overlay, checkpoint.name)
    _qemu_img(overlay, "bitmap", "--add", "--enable", "-f", "qcow2", overlay, BASE)
    return True
