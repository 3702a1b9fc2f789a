"""The embedded host's claims (`host.volumes`): files in a directory, or loop devices over
sparse files.

A claim of class C in namespace N lives at DATA_DIR/volumes/C/N/<claim>.img (or under the
class's own directory). In a file
class that file is the disk itself, written as a prime file beside it and renamed over it
only on success (see `diskferry.disk.prime`), so it exists only once whole. In a `block`
class it is the sparse backing file of a loop device, the device is what workers write
(in place, as any block device), and it is attached again when found detached (after a
reboot).

Every path is made here from what the daemon decided: a class, a namespace and a claim name,
each a valid Kubernetes name (so one path component: no `/`, `..` or NUL), below the class's
root. It is checked on disk without following a symlink: the root and the namespace folder
must be folders (not symlinks) of root or the daemon's user that no one else can write, and
the namespace folder and the claim no one else can read either. What is made is 0700 (folders)
and 0600 (claims), whatever the umask; a folder or claim an earlier version left open is
closed when found inside the data directory, and refused outside it (the message says which
`chmod` to run), as are the folders above a class's own root that others could change.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from diskferry.control.host.volumes import (
    Claim,
    Expansion,
    ProvisionerUnavailableError,
    VolumeClass,
    VolumeError,
)
from diskferry.control.resources.model import NAME_PATTERN
from diskferry.control.resources.storageclass import PROVISIONER
from diskferry.disk.prime import Target
from diskferry.qemu import cbt
from diskferry.registry.layout import private_folder

LOOP_CONTROL = "/dev/loop-control"
FOLDER_MODE = 0o700
FILE_MODE = 0o600
_OTHERS = 0o077
_OTHERS_WRITE = 0o022
_NAME = re.compile(NAME_PATTERN)


def block_unavailable() -> str | None:
    """Why block claims cannot be made here, None when they can."""
    if not os.path.exists(LOOP_CONTROL):
        return f"{LOOP_CONTROL} is absent: this kernel offers no loop devices"
    if shutil.which("losetup") is None:
        return "losetup (util-linux) is not installed"
    return None


@dataclass(frozen=True)
class FileClaim:
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


def checked_name(name: str, what: str) -> str:
    """`name` when it is a valid Kubernetes name, and so one path component; VolumeError
    naming `what` otherwise."""
    if not _NAME.fullmatch(name):
        raise VolumeError(f"the {what} {name!r} is not a valid name")
    return name


def private_file(path: Path) -> None:
    """Make the regular file at `path` 0600 (its writer had its own umask); VolumeError when it
    is not a regular file (a symlink, a device)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise VolumeError(f"{path} cannot be opened as a claim: {e.strerror}") from e
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise VolumeError(f"{path} is not a regular file")
        if stat.S_IMODE(found.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def _shares_extents(folder: Path) -> bool:
    """Whether the file system of `folder` shares extents, tried on two files of its own."""
    with tempfile.TemporaryDirectory(dir=folder, prefix=".reflink-") as tried:
        source = os.path.join(tried, "source")
        with open(source, "wb") as f:
            f.write(b"\0" * 4096)
        done = subprocess.run(
            ["cp", "--reflink=always", source, os.path.join(tried, "clone")],
            capture_output=True,
            check=False,
        )
        return done.returncode == 0


def _owners() -> tuple[int, ...]:
    return (0, os.geteuid())


class DirectoryVolumes:
    """Makes, finds and removes claims under DATA_DIR/volumes (a class's claims under its own
    root, when it names one)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(os.path.abspath(data_dir))
        self.root = self.data_dir / "volumes"

    def block_unavailable(self) -> str | None:
        """Why block claims cannot be made here, None when they can."""
        return block_unavailable()

    def sized_claims(self) -> bool:
        """False: a file claim takes the size of what its job writes."""
        return False

    def _roots(self, volume_class: VolumeClass) -> list[Path]:
        """The folders of the class down to its root: DATA_DIR/volumes and its folder, or its
        own root."""
        if volume_class.root is None:
            return [self.root, self.root / checked_name(volume_class.name, "StorageClass")]
        root = volume_class.root
        if not root.is_absolute() or os.path.normpath(root) != str(root):
            raise VolumeError(
                f"the root {root} of the StorageClass {volume_class.name} is not "
                "an absolute, normal path"
            )
        return [root]

    def _file(self, volume_class: VolumeClass, namespace: str, name: str) -> Path:
        folder = self._roots(volume_class)[-1] / checked_name(namespace, "namespace")
        return folder / f"{checked_name(name, 'claim')}.img"

    def _inside(self, path: Path) -> bool:
        return path.is_relative_to(self.data_dir)

    def _check_above(self, root: Path) -> None:
        """Refuse a root outside the data directory that a folder above it lets others swap."""
        for parent in root.parents:
            try:
                found = os.lstat(parent)
            except FileNotFoundError:
                continue  # made 0700 with the root
            writable = found.st_mode & _OTHERS_WRITE and not found.st_mode & stat.S_ISVTX
            if found.st_uid not in _owners() or (stat.S_ISDIR(found.st_mode) and writable):
                raise VolumeError(
                    f"{parent}, above the StorageClass root {root}, can be changed by other "
                    "users: choose a root whose parents only root can change"
                )

    def _check_folder(self, folder: Path, private: bool) -> None:
        """Refuse `folder` unless it is a folder (not a symlink) of root or the daemon's user
        that others cannot write (nor enter, when `private`); one inside the data directory is
        closed (0700) instead of refused."""
        found = os.lstat(folder)
        if stat.S_ISLNK(found.st_mode):
            raise VolumeError(f"{folder} is a symlink: claims are never made through one")
        if not stat.S_ISDIR(found.st_mode):
            raise VolumeError(f"{folder} is not a folder")
        if found.st_uid not in _owners():
            raise VolumeError(f"{folder} is owned by uid {found.st_uid}, not by the daemon")
        mode = stat.S_IMODE(found.st_mode)
        if self._inside(folder):
            if mode != FOLDER_MODE:
                os.chmod(folder, FOLDER_MODE)
            return
        if mode & _OTHERS_WRITE:
            raise VolumeError(
                f"{folder} is writable by other users (mode {mode:o}): run chmod go-w {folder}"
            )
        if private and mode & _OTHERS:
            raise VolumeError(
                f"{folder} can be read by other users (mode {mode:o}): run chmod 700 {folder}"
            )

    def _folder(self, volume_class: VolumeClass, namespace: str, make: bool) -> Path | None:
        """The class's folder of `namespace`, each folder down to it checked (and made, when
        `make`); None when one is missing and not to be made."""
        roots = self._roots(volume_class)
        folders = [*roots, roots[-1] / checked_name(namespace, "namespace")]
        if not self._inside(roots[0]):
            self._check_above(roots[0])
        for folder in folders:
            if not os.path.lexists(folder):
                if not make:
                    return None
                private_folder(folder)
            self._check_folder(folder, private=folder != roots[0])
        return folders[-1]

    def _checked_file(
        self, volume_class: VolumeClass, namespace: str, name: str, make: bool
    ) -> Path | None:
        """The claim's file, its folders checked (made, when `make`) and, when it exists, made
        0600; None when its folder is missing and not to be made."""
        if self._folder(volume_class, namespace, make) is None:
            return None
        file = self._file(volume_class, namespace, name)
        if os.path.lexists(file):
            private_file(file)
        return file

    def find(self, volume_class: VolumeClass, namespace: str, name: str) -> FileClaim | None:
        """The claim when it was made (a block claim attached again if it had to be)."""
        file = self._checked_file(volume_class, namespace, name, make=False)
        if file is None:
            return None
        if volume_class.block:
            if not file.exists():
                return None
            return self._attached(volume_class, namespace, name, file)
        return FileClaim(volume_class, namespace, name, file, str(file))

    def locate(self, classes: Iterable[VolumeClass], namespace: str, name: str) -> FileClaim | None:
        """The claim `name` in whichever of `classes` holds its file, None when none does; a
        class refused (VolumeError) is passed over while another one holds the claim."""
        refused = None
        for volume_class in classes:
            try:
                if os.path.lexists(self._file(volume_class, namespace, name)):
                    return self.find(volume_class, namespace, name)
            except VolumeError as e:
                refused = refused or e
        if refused is not None:
            raise refused
        return None

    def claim(self, volume_class: VolumeClass, namespace: str, name: str, size: int) -> FileClaim:
        """Make the claim, or find it made: a file claim's folder, or a block claim's sparse
        file of `size` bytes and its loop device; ProvisionerUnavailableError for a class of
        another provisioner than this host's."""
        if volume_class.provisioner != PROVISIONER:
            raise ProvisionerUnavailableError(
                f"this host cannot provision claims of the StorageClass {volume_class.name}: "
                f"its provisioner {volume_class.provisioner} is a cluster's, and diskferry "
                f"serve makes claims of {PROVISIONER} classes only; name one of those, or run "
                "diskferry operator in the cluster"
            )
        file = self._checked_file(volume_class, namespace, name, make=True)
        assert file is not None
        if not volume_class.block:
            return FileClaim(volume_class, namespace, name, file, str(file))
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
            private_file(file)
        return self._attached(volume_class, namespace, name, file)

    def _attached(
        self, volume_class: VolumeClass, namespace: str, name: str, file: Path
    ) -> FileClaim:
        loops = _loops_of(file)
        device = loops[0] if loops else _losetup("--find", "--show", str(file)).strip()
        return FileClaim(volume_class, namespace, name, file, device)

    def expand(self, claim: Claim, size: int) -> Expansion:
        """Done at once: a claim's room is its folder's; a worker grows its file (and loop
        device)."""
        return Expansion(done=True, grows_disk=True)

    def resized(self, claim: Claim, size: int) -> None:
        """Nothing: the claim's file says its size."""

    def seal(self, claim: Claim) -> None:
        """Make the claim's file 0600 (its writer had its own umask)."""
        private_file(claim.file)

    def writable(self, claim: Claim) -> bool:
        """True: a worker writes the claim's file, or its device, as soon as it is made."""
        return True

    def instant_copies(self, claim: Claim) -> bool:
        """Whether the file system of the claim's folder shares extents (reflink), tried on two
        files of its own there; never for a block claim."""
        return not claim.block and _shares_extents(claim.file.parent)

    def shared_host(self) -> bool:
        """True: every claim is a file or a device of this host, where the workers run."""
        return True

    def tracked(self, claim: Claim) -> bool:
        """Whether the claim's file has its CBT overlay beside it."""
        return cbt.find(str(claim.file)).enabled

    def remove(self, volume_class: VolumeClass, namespace: str, name: str) -> None:
        """Remove the claim, its loop devices, its CBT overlay and any prime or scratch file
        left beside it."""
        if self._folder(volume_class, namespace, make=False) is None:
            return
        file = self._file(volume_class, namespace, name)
        if volume_class.block and file.exists() and block_unavailable() is None:
            for device in _loops_of(file):
                _losetup("--detach", device)
        for made in (file, Path(cbt.overlay_path(str(file)))):
            with contextlib.suppress(FileNotFoundError):
                made.unlink()
        for left in file.parent.glob(f"{file.name}.*-*"):
            with contextlib.suppress(FileNotFoundError):
                left.unlink()
        with contextlib.suppress(OSError):
            file.parent.rmdir()
