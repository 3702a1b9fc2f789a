"""A target volume: a prime file beside it renamed over on success, or a block device in place."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import secrets

from diskferry.base.errors import DiskferryError
from diskferry.disk.file_volume import FileVolume, is_block_device

JOB_XATTR = "user.diskferry.job"
# what Linux file systems allow in one name, where the file system does not say
_NAME_MAX = 255


def recorded_job(path: str) -> str | None:
    """The id of the job that committed the file at `path`, or None when none recorded one."""
    try:
        return os.getxattr(path, JOB_XATTR).decode()
    except OSError:
        return None


def _beside(path: str, suffix: str) -> str:
    """`path` with `suffix` added, its name shortened to fit the file system's name length."""
    directory, name = os.path.split(path)
    try:
        name_max = os.pathconf(directory, "PC_NAME_MAX")
    except OSError:
        name_max = _NAME_MAX
    room = name_max - len(os.fsencode(suffix))
    return os.path.join(directory, os.fsdecode(os.fsencode(name)[:room]) + suffix)


class TargetError(DiskferryError):
    """The target cannot take the image or disk."""

    reason = "TargetUnusable"


class Target:
    """Where the image goes; a file is written beside itself and renamed over on success.

    The prime and scratch files get names of their own (a random tag, the target's name
    shortened to fit), so two jobs writing one target never share one; whoever makes a
    Target calls `discard` whatever happens, so a failure or a cancel leaves neither.
    """

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.block_device = is_block_device(self.path)
        directory = os.path.dirname(self.path)
        if not self.block_device and not os.path.isdir(directory):
            raise TargetError(f"the directory of the target, {directory}, does not exist")
        if os.path.isdir(self.path):
            raise TargetError(f"the target {self.path} is a directory")
        tag = secrets.token_hex(8)
        self._tag = tag
        self._held: list[int] = []
        self.prime = self.path if self.block_device else _beside(self.path, f".prime-{tag}")
        self.scratch = (
            _beside(self.path, f".scratch-{tag}")
            if not self.block_device
            else os.path.join(os.environ.get("TMPDIR", "/var/tmp"), f"diskferry-scratch-{tag}")
        )

    def claim(self) -> None:
        """Remove the prime and scratch files that killed writers to this target left, then
        create this run's, each locked (flock) while this process lives: a later run finds a
        left file's lock free."""
        for mine in self._own_files():
            prefix = mine[: -len(self._tag)]
            for other in glob.glob(glob.escape(prefix) + "*"):
                if other != mine:
                    _remove_if_left(other)
        for mine in self._own_files():
            try:
                fd = os.open(mine, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except OSError as e:
                raise TargetError(f"cannot create {mine}: {e.strerror}") from e
            self._held.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                raise TargetError(f"{mine} is in use by another process") from e

    def _own_files(self) -> list[str]:
        return [self.scratch] if self.block_device else [self.prime, self.scratch]

    def capacity(self) -> tuple[int, str]:
        """How many bytes the target can take, and what bounds it."""
        if self.block_device:
            with FileVolume(self.path) as dev:
                return dev.size, f"size of the block device {self.path}"
        st = os.statvfs(os.path.dirname(self.path))
        return st.f_bavail * st.f_frsize, f"free space in {os.path.dirname(self.path)}"

    def check_fits(self, virtual_size: int) -> None:
        """Refuse an image whose virtual size exceeds the device or the free space."""
        room, what = self.capacity()
        if virtual_size > room:
            raise TargetError(
                f"the image's virtual size ({virtual_size} bytes) is larger than the {what} "
                f"({room} bytes)",
                reason="TargetTooSmall",
            )

    def open_prime(self, size: int = 0, *, direct: bool = False) -> FileVolume:
        """The volume to write, with write-behind (and O_DIRECT for aligned writes where
        `direct`, see `FileVolume`): a new sparse prime file of `size` bytes, or the block
        device."""
        if self.block_device:
            return FileVolume(self.path, writable=True, write_behind=True, direct=direct)
        # a claimed prime file exists already, made exclusively by `claim`
        return FileVolume.create(
            self.prime, size, exclusive=not self._held, write_behind=True, direct=direct
        )

    def commit(self, job_id: str | None = None) -> None:
        """Record `job_id` on the prime file, fsync it, rename it over the target, fsync the folder.

        The id goes into the extended attribute `user.diskferry.job` before the rename, so a
        target that carries it is one that job finished. A block device is written in place
        and has no such attribute: it is fsynced, nothing is recorded, and nothing is renamed.
        """
        fd = os.open(self.prime, os.O_RDONLY)
        try:
            if job_id is not None and not self.block_device:
                self._record_job(fd, job_id)
            os.fsync(fd)
        finally:
            os.close(fd)
        if self.block_device:
            return
        os.replace(self.prime, self.path)
        dfd = os.open(os.path.dirname(self.path), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _record_job(self, fd: int, job_id: str) -> None:
        try:
            os.setxattr(fd, JOB_XATTR, job_id.encode())
        except OSError as e:
            raise TargetError(
                f"cannot record job {job_id} on {self.path} (extended attribute {JOB_XATTR}): "
                f"{e.strerror}",
                reason="JobNotRecorded",
            ) from e

    def discard(self) -> None:
        """Remove the prime and scratch files, whatever happened."""
        for path in self._own_files():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        for fd in self._held:
            os.close(fd)
        self._held.clear()


def _remove_if_left(path: str) -> None:
    """Unlink `path` unless a live process holds its lock."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
