"""Claims of the embedded StorageClasses: files in a directory, or loop devices over sparse files.

A claim of class C in namespace N lives at DATA_DIR/volumes/C/N/<claim>.img (or under the
class's own directory). In a file
class that file is the disk itself, written as a prime file beside it and renamed over it
only on success (see `diskferry.disk.prime`), so it exists only once whole. In a `block`
class it is the sparse backing file of a loop device, the device is what workers write
(in place, as any block device), and it is attached again when found detached (after a
reboot).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from diskferry.disk.errors import DiskferryError
from diskferry.disk.prime import Target
from diskferry.qemu import cbt

LOOP_CONTROL = "/dev/loop-control"
FILE = "file"
BLOCK = "block"


class VolumeError(DiskferryError):
    """A claim could not be made, found or removed."""

    reason = "VolumeFailed"


def block_unavailable() -> str | None:
    """Why block claims cannot be made here, None when they can."""
    if not os.path.exists(LOOP_CONTROL):
        return f"{LOOP_CONTROL} is absent: this kernel offers no loop devices"
    if shutil.which("losetup") is None:
        return "losetup (util-linux) is not installed"
    return None


@dataclass(frozen=True)
class VolumeClass:
    """Where a StorageClass keeps its claims (`root`, else DATA_DIR/volumes/<name>), and of which
    type: file or block."""

    name: str
    type: str = FILE
    root: Path | None = None
    retain: bool = False

    @property
    def block(self) -> bool:
        """Whether claims are block devices."""
        return self.type == BLOCK


@dataclass(frozen=True)
class Claim:
    """One claim: the file behind it and the path workers write (the file, or its device)."""

    volume_class: VolumeClass
    namespace: str
    name: str
    file: Path
    path: str

    @property
    def block(self) -> bool:
        """Whether the claim is a block device."""
        return self.volume_class.block

    @property
    def ready(self) -> bool:
        """Whether the claim holds a disk (a file claim exists only once written whole)."""
        return os.path.exists(self.path)

    def allocated(self) -> int:
        """The bytes the claim takes on disk (its file's allocated blocks)."""
        try:
            return os.stat(self.file).st_blocks * 512
        except FileNotFoundError:
            return 0

    def size(self) -> int:
        """The bytes the claim holds (0 when a file claim is not written yet)."""
        try:
            return os.stat(self.file).st_size
        except FileNotFoundError:
            return 0


def _losetup(*args: str) -> str:
    proc = subprocess.run(["losetup", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise VolumeError(f"losetup {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def _loops_of(backing: Path) -> list[str]:
    """The loop devices attached to `backing`."""
    out = _losetup("--associated", str(backing), "--noheadings", "--output", "NAME")
    return [line.strip() for line in out.splitlines() if line.strip()]


class Volumes:
    """Makes, finds and removes claims under DATA_DIR/volumes."""

    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / "volumes"

    def _file(self, volume_class: VolumeClass, namespace: str, name: str) -> Path:
        root = volume_class.root or self.root / volume_class.name
        return root / namespace / f"{name}.img"

    def find(self, volume_class: VolumeClass, namespace: str, name: str) -> Claim | None:
        """The claim when it was made (a block claim attached again if it had to be)."""
        file = self._file(volume_class, namespace, name)
        if volume_class.block:
            if not file.exists():
                return None
            return self._attached(volume_class, namespace, name, file)
        if not file.parent.is_dir():
            return None
        return Claim(volume_class, namespace, name, file, str(file))

    def claim(self, volume_class: VolumeClass, namespace: str, name: str, size: int) -> Claim:
        """Make the claim, or find it made: a file claim's directory, or a block claim's sparse
        file of `size` bytes and its loop device."""
        file = self._file(volume_class, namespace, name)
        file.parent.mkdir(parents=True, exist_ok=True)
        if not volume_class.block:
            return Claim(volume_class, namespace, name, file, str(file))
        why = block_unavailable()
        if why:
            raise VolumeError(f"cannot make the block claim {name}: {why}")
        if not file.exists():
            target = Target(str(file))
            try:
                with target.open_prime() as volume:
                    volume.truncate(size)
                target.commit()
            finally:
                target.discard()
        return self._attached(volume_class, namespace, name, file)

    def _attached(self, volume_class: VolumeClass, namespace: str, name: str, file: Path) -> Claim:
        loops = _loops_of(file)
        device = loops[0] if loops else _losetup("--find", "--show", str(file)).strip()
        return Claim(volume_class, namespace, name, file, device)

    def grow(self, claim: Claim, size: int) -> None:
        """Grow the claim to `size` bytes (never shrink it); the new bytes read as zeros."""
        if size <= claim.size():
            return
        os.truncate(claim.file, size)
        if claim.block:
            _losetup("--set-capacity", claim.path)

    def remove(self, volume_class: VolumeClass, namespace: str, name: str) -> None:
        """Remove the claim, its loop devices, its CBT overlay and any prime or scratch file
        left beside it."""
        file = self._file(volume_class, namespace, name)
        if volume_class.block and file.exists() and block_unavailable() is None:
            for device in _loops_of(file):
                _losetup("--detach", device)
        for made in (file, Path(cbt.overlay_path(str(file)))):
            with contextlib.suppress(FileNotFoundError):
                made.unlink()
        if file.parent.is_dir():
            for left in file.parent.glob(f"{file.name}.*-*"):
                with contextlib.suppress(FileNotFoundError):
                    left.unlink()
            with contextlib.suppress(OSError):
                file.parent.rmdir()
