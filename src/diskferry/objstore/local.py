"""A directory as an object store that a power cut cannot tear, and that a link cannot lead out of.

Each object is written under a temporary name in its own directory
(`.<name>.<random>.tmp`), fsynced, renamed into place (linked, for `put_new`, so that of
two writers exactly one wins), and its directory fsynced before the call returns. A
directory made on the way, or first used by this process, has its entry fsynced in its
parent, up to the root. A delete unlinks and fsyncs the directory. Names starting with
"." are never objects: listings skip them, and remove the temporary files that no writer
has touched for ABANDONED_AFTER seconds (those a killed or powered-off writer left).

Others may write the directory. Every name under the root is reached from its folder's
descriptor, one component at a time, never through a symbolic link (O_NOFOLLOW; an entry
is looked at with lstat before it is unlinked): a link, a FIFO, a device or a socket where
an object or a folder of objects should be is refused with ForeignEntryError naming it,
by listings too (or handed to the listing's `foreign`, for a check to report). The root is
the operator's path, followed as given. Files are made 0600 and folders 0700, whatever the
umask.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import secrets
import stat
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, BinaryIO

from diskferry.base.libc import LIBC
from diskferry.objstore.backend import Data, ObjectInfo, OnForeign
from diskferry.objstore.errors import (
    ForeignEntryError,
    ObjectNotFoundError,
    ObjectStoreError,
    ObjectTooLargeError,
)

TEMPORARY_SUFFIX = ".tmp"
FILE_MODE = 0o600
FOLDER_MODE = 0o700
_FILE_PIECE = 8 << 20
_IOV_MAX = os.sysconf("SC_IOV_MAX")
ABANDONED_AFTER = 3600.0
_RENAME_EXCHANGE = 2
_ROOT = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FOLDER = _ROOT | os.O_NOFOLLOW
# O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused once open)
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# what a fresh filesystem holds at its root, which does not make the store's root in use
_LOST_AND_FOUND = "lost+found"


class LocalBackend:
    """Objects as files under `root`; safe to call from several threads and processes at once."""

    def __init__(self, url: str, root: str, *, create: bool) -> None:
        self.url = url
        self.root = root
        self._durable = {""}  # folders (from the root) whose entry, and each parent's, is fsynced
        if not os.path.isdir(root):
            if not create:
                raise ObjectNotFoundError(f"{url} does not exist")
            with self._errors(""):
                made = _missing(root)
                os.makedirs(root, mode=FOLDER_MODE, exist_ok=True)
                if root in made:
                    os.chmod(root, FOLDER_MODE)
                _sync_entries(made)

    def put(self, path: str, data: Data | BinaryIO | Sequence[Data]) -> None:
        """Write the object whole and durably: after a power cut, old or new, never a part."""
        with self._errors(path), self._folder_of(path, make=True) as (folder, name):
            temporary = _write_temporary(folder, name, data)
            try:
                os.rename(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                _remove(folder, temporary)
                raise
            os.fsync(folder)

    def put_parts(self, path: str, parts: Sequence[Data]) -> None:
        """`put` of the parts one after another, written as they are (writev), not joined."""
        self.put(path, parts)

    def put_file(self, path: str, file: BinaryIO) -> None:
        """`put` from an open file, copied in pieces into the temporary object."""
        self.put(path, file)

    def put_new(self, path: str, data: Data) -> bool:
        """Write the object only if none exists (a hard link never replaces a name); else False."""
        with self._errors(path), self._folder_of(path, make=True) as (folder, name):
            temporary = _write_temporary(folder, name, data)
            try:
                os.link(
                    temporary, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False
                )
            except FileExistsError:
                return False
            finally:
                _remove(folder, temporary)
            os.fsync(folder)
            return True

    def replace(self, path: str, data: Data) -> bool:
        """Overwrite the object only while it exists: an atomic exchange of names where the
        filesystem has one (renameat2 RENAME_EXCHANGE), else a check then a rename, where a
        deletion in between is overwritten."""
        with self._errors(path):
            try:
                with self._folder_of(path) as (folder, name):
                    if not self._is_object(folder, name, path):
                        return False
                    temporary = _write_temporary(folder, name, data)
                    try:
                        if not _exchange(folder, temporary, name):
                            if not self._is_object(folder, name, path):
                                return False
                            os.rename(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
                    finally:
                        _remove(folder, temporary)
                    os.fsync(folder)
                    return True
            except (FileNotFoundError, NotADirectoryError):
                return False

    def get(self, path: str, limit: int) -> bytes:
        """The whole object, refused from its size when longer than `limit` (and when it grows
        past it while it is read: no more than `limit` + 1 bytes are)."""
        with self._errors(path), self._opened(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size <= limit:
                data = f.read(size + 1)  # a read allocates what it asks for
                if len(data) > size:  # written to while it is read
                    data += f.read(limit + 1 - len(data))
                if len(data) <= limit:
                    return data
                size = len(data)
            raise ObjectTooLargeError(self.url, path, size=size, limit=limit)

    def get_range(self, path: str, start: int, length: int) -> bytes:
        """Up to `length` bytes of the object from `start`."""
        with self._errors(path), self._opened(path) as f:
            f.seek(start)
            # a read allocates what it asks for: no more than the file holds
            return f.read(min(length, max(0, os.fstat(f.fileno()).st_size - start)))

    def head(self, path: str) -> ObjectInfo | None:
        """What the file says of the object, or None when there is none."""
        try:
            with self._errors(path), self._folder_of(path) as (folder, name):
                st = os.stat(name, dir_fd=folder, follow_symlinks=False)
                self._refuse_foreign(folder, name, path, st)
        except ObjectNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return ObjectInfo(path, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC))

    def list(self, folder: str, foreign: OnForeign | None = None) -> Iterator[ObjectInfo]:
        """Every object under `folder`, skipping (and cleaning up) temporary files; a link or a
        special file raises ForeignEntryError, or is handed to `foreign` and skipped."""
        with self._errors(folder):
            try:
                fd = self._open_folder(self._parts(folder) if folder else [])
            except (FileNotFoundError, NotADirectoryError):
                return
            except ForeignEntryError as e:
                if foreign is None:
                    raise
                foreign(e)
                return
            try:
                yield from self._walk(fd, folder, foreign)
            finally:
                os.close(fd)

    def empty(self) -> bool:
        """Whether the root holds nothing at all (but a fresh filesystem's lost+found)."""
        with self._errors(""), os.scandir(self.root) as entries:
            return all(entry.name == _LOST_AND_FOUND for entry in entries)

    def delete(self, path: str) -> None:
        """Unlink the object and fsync its directory; a missing one is not an error."""
        with self._errors(path):
            try:
                with self._folder_of(path) as (folder, name):
                    st = os.stat(name, dir_fd=folder, follow_symlinks=False)
                    self._refuse_foreign(folder, name, path, st)
                    os.unlink(name, dir_fd=folder)
                    os.fsync(folder)
            except (FileNotFoundError, NotADirectoryError):
                return

    def _walk(self, fd: int, where: str, foreign: OnForeign | None) -> Iterator[ObjectInfo]:
        """The objects in the open folder `fd` (at `where`) and in its folders."""
        with os.scandir(fd) as scan:
            entries = list(scan)
        for entry in entries:
            path = f"{where}/{entry.name}" if where else entry.name
            if entry.name.startswith("."):
                if entry.name.endswith(TEMPORARY_SUFFIX):
                    _clean_temporary(fd, entry.name)
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                self._refuse_foreign(fd, entry.name, path, st)
                regular = stat.S_ISREG(st.st_mode)
                child = None if regular else self._step(fd, entry.name, path, make=False)
            except FileNotFoundError:
                continue
            except ForeignEntryError as e:
                if foreign is None:
                    raise
                foreign(e)
                continue
            if child is None:
                yield ObjectInfo(path, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC))
                continue
            try:
                yield from self._walk(child, path, foreign)
            finally:
                os.close(child)

    def _parts(self, path: str) -> list[str]:
        parts = path.split("/")
        if any(not part or part.startswith(".") for part in parts):
            raise ObjectStoreError(
                f"{self.url}: {path!r} is not an object path", reason="BadObjectPath"
            )
        return parts

    @contextlib.contextmanager
    def _folder_of(self, path: str, *, make: bool = False) -> Iterator[tuple[int, str]]:
        """The open folder of the object at `path`, and the object's name in it; the folder is
        made (durable up to the root) when missing and `make`."""
        parts = self._parts(path)
        folder = self._open_folder(parts[:-1], make=make)
        try:
            yield folder, parts[-1]
        finally:
            os.close(folder)

    @contextlib.contextmanager
    def _opened(self, path: str) -> Iterator[BinaryIO]:
        """The object's file open for reading; a link or a special file is refused."""
        with self._folder_of(path) as (folder, name):
            try:
                fd = os.open(name, _READ, dir_fd=folder)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    self._refuse_foreign(folder, name, path)
                raise
            with os.fdopen(fd, "rb") as f:
                mode = os.fstat(fd).st_mode
                if stat.S_ISDIR(mode):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
                if not stat.S_ISREG(mode):
                    raise self._special(path)
                yield f

    def _open_folder(self, parts: list[str], *, make: bool = False) -> int:
        """A descriptor of the folder `parts` under the root, reached one step at a time."""
        fd = os.open(self.root, _ROOT)
        try:
            for depth, part in enumerate(parts):
                child = self._step(fd, part, "/".join(parts[: depth + 1]), make=make)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _step(self, parent: int, name: str, where: str, *, make: bool) -> int:
        """Open the folder `name` in `parent` without following a link; with `make`, made 0700
        if missing, and its entry fsynced the first time this store uses it."""
        made = False
        try:
            try:
                child = os.open(name, _FOLDER, dir_fd=parent)
            except FileNotFoundError:
                if not make:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, FOLDER_MODE, dir_fd=parent)
                    made = True
                child = os.open(name, _FOLDER, dir_fd=parent)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                self._refuse_foreign(parent, name, where)
            raise
        try:
            if made:
                os.fchmod(child, FOLDER_MODE)
            if make and where not in self._durable:
                os.fsync(parent)
                self._durable.add(where)
        except BaseException:
            os.close(child)
            raise
        return child

    def _is_object(self, folder: int, name: str, path: str) -> bool:
        """Whether a regular file is at `name`; a link or a special file is refused."""
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return False
        self._refuse_foreign(folder, name, path, st)
        return stat.S_ISREG(st.st_mode)

    def _refuse_foreign(
        self, folder: int, name: str, path: str, st: os.stat_result | None = None
    ) -> None:
        """ForeignEntryError when `name` in `folder` is neither a file nor a folder."""
        if st is None:
            try:
                st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                return
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=folder)
            raise ForeignEntryError(
                f"{self.url}: {path} is a symbolic link (to {target!r}), which the store never "
                "follows: someone with write access to it put it there; remove it",
                path=path,
            )
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            raise self._special(path)

    def _special(self, path: str) -> ForeignEntryError:
        return ForeignEntryError(
            f"{self.url}: {path} is not a regular file (a FIFO, a device or a socket): someone "
            "with write access to the store put it there; remove it",
            path=path,
        )

    @contextlib.contextmanager
    def _errors(self, path: str) -> Iterator[None]:
        """Turn OSError into the typed errors of this package."""
        try:
            yield
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFoundError(f"{self.url}: {path} does not exist") from None
        except OSError as e:
            raise ObjectStoreError(f"{self.url}: {path}: {e.strerror or e}") from None


def _write_parts(fd: int, parts: Sequence[Data]) -> None:
    """Write the parts one after another, whole, in as few calls as the system allows."""
    views = [memoryview(part).cast("B") for part in parts]
    first = 0
    while first < len(views):
        done = os.writev(fd, views[first : first + _IOV_MAX])
        while first < len(views) and done >= len(views[first]):
            done -= len(views[first])
            first += 1
        if done:
            views[first] = views[first][done:]


def _write_temporary(folder: int, name: str, data: Data | BinaryIO | Sequence[Data]) -> str:
    """Write `data` (bytes, parts of it, or an open file) beside `name` in the open `folder`,
    0600, and fsync it; its name."""
    temporary = f".{name[:200]}.{secrets.token_hex(6)}{TEMPORARY_SUFFIX}"
    fd = os.open(temporary, _CREATE, FILE_MODE, dir_fd=folder)
    try:
        os.fchmod(fd, FILE_MODE)
        if isinstance(data, bytes | bytearray | memoryview):
            _write_parts(fd, [data])
        elif isinstance(data, Sequence):
            _write_parts(fd, data)
        else:
            while piece := data.read(_FILE_PIECE):
                _write_parts(fd, [piece])
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _remove(folder, temporary)
        raise
    os.close(fd)
    return temporary


def _exchange(folder: int, a: str, b: str) -> bool:
    """Swap two names in the open `folder` atomically; False where the filesystem (or the C
    library) cannot."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(folder, os.fsencode(a), folder, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), b)


@functools.cache
def _renameat2() -> Any:
    """The C library's renameat2, or None where it has none."""
    func = getattr(LIBC, "renameat2", None)
    if func is not None:
        int_, path_ = ctypes.c_int, ctypes.c_char_p
        func.argtypes = [int_, path_, int_, path_, ctypes.c_uint]
    return func


def _missing(folder: str) -> list[str]:
    """`folder` and those of its parents that do not exist yet."""
    missing = []
    while not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


def _sync_entries(folders: Iterable[str]) -> None:
    """fsync the parent of each folder, which holds its entry."""
    for folder in folders:
        _fsync_dir(os.path.dirname(folder))


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _clean_temporary(folder: int, name: str) -> None:
    """Remove the temporary file `name` in the open `folder` if no writer has touched it for
    ABANDONED_AFTER seconds."""
    with contextlib.suppress(FileNotFoundError):
        st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) and time.time() - st.st_mtime > ABANDONED_AFTER:
            os.unlink(name, dir_fd=folder)


def _remove(folder: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)
