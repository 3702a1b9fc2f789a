"""A directory as an object store that a power cut cannot tear: temporary name, fsync, rename.

Each object is written under a temporary name in its own directory
(`.<name>.<random>.tmp`), fsynced, renamed into place (linked, for `put_new`, so that of
two writers exactly one wins), and its directory fsynced before the call returns. A
directory made on the way, or first used by this process, has its entry fsynced in its
parent, up to the root. A delete unlinks and fsyncs the directory. Names starting with
"." are never objects: listings skip them, and remove the temporary files that no writer
has touched for ABANDONED_AFTER seconds (those a killed or powered-off writer left).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import secrets
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, BinaryIO

from diskferry.disk.libc import LIBC
from diskferry.objstore.backend import Data, ObjectInfo
from diskferry.objstore.errors import ObjectNotFoundError, ObjectStoreError

TEMPORARY_SUFFIX = ".tmp"
_FILE_PIECE = 8 << 20
_IOV_MAX = os.sysconf("SC_IOV_MAX")
ABANDONED_AFTER = 3600.0
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


class LocalBackend:
    """Objects as files under `root`; safe to call from several threads and processes at once."""

    def __init__(self, url: str, root: str, *, create: bool) -> None:
        self.url = url
        self.root = root
        self._durable = {root}  # directories whose entry, and each parent's, is fsynced
        self._dirs_lock = threading.Lock()
        if not os.path.isdir(root):
            if not create:
                raise ObjectNotFoundError(f"{url} does not exist")
            with self._errors(""):
                made = _missing(root)
                os.makedirs(root, exist_ok=True)
                _sync_entries(made)

    def put(self, path: str, data: Data | BinaryIO | Sequence[Data]) -> None:
        """Write the object whole and durably: after a power cut, old or new, never a part."""
        with self._errors(path):
            final = self._place(path)
            temporary = _write_temporary(final, data)
            try:
                os.rename(temporary, final)
            except BaseException:
                _remove(temporary)
                raise
            _fsync_dir(os.path.dirname(final))

    def put_parts(self, path: str, parts: Sequence[Data]) -> None:
        """`put` of the parts one after another, written as they are (writev), not joined."""
        self.put(path, parts)

    def put_file(self, path: str, file: BinaryIO) -> None:
        """`put` from an open file, copied in pieces into the temporary object."""
        self.put(path, file)

    def put_new(self, path: str, data: Data) -> bool:
        """Write the object only if none exists (a hard link never replaces a name); else False."""
        with self._errors(path):
            final = self._place(path)
            temporary = _write_temporary(final, data)
            try:
                os.link(temporary, final)
            except FileExistsError:
                return False
            finally:
                _remove(temporary)
            _fsync_dir(os.path.dirname(final))
            return True

    def replace(self, path: str, data: Data) -> bool:
        """Overwrite the object only while it exists: an atomic exchange of names where the
        filesystem has one (renameat2 RENAME_EXCHANGE), else a check then a rename, where a
        deletion in between is overwritten."""
        with self._errors(path):
            final = self._file(path)
            if not os.path.isfile(final):
                return False
            temporary = _write_temporary(final, data)
            try:
                if not _exchange(temporary, final):
                    if not os.path.isfile(final):
                        return False
                    os.rename(temporary, final)
            except FileNotFoundError:
                return False
            finally:
                _remove(temporary)
            _fsync_dir(os.path.dirname(final))
            return True

    def get(self, path: str) -> bytes:
        """The whole object."""
        with self._errors(path), open(self._file(path), "rb") as f:
            return f.read()

    def get_range(self, path: str, start: int, length: int) -> bytes:
        """Up to `length` bytes of the object from `start`."""
        with self._errors(path), open(self._file(path), "rb") as f:
            f.seek(start)
            return f.read(length)

    def head(self, path: str) -> ObjectInfo | None:
        """What the file says of the object, or None when there is none."""
        try:
            with self._errors(path):
                st = os.stat(self._file(path))
        except ObjectNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return ObjectInfo(path, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC))

    def list(self, folder: str) -> Iterator[ObjectInfo]:
        """Every object under `folder`, skipping (and cleaning up) temporary files."""
        base = self._file(folder) if folder else self.root
        if not os.path.isdir(base):
            return
        with self._errors(folder):
            for where, folders, names in os.walk(base, onerror=_raise):
                folders[:] = [f for f in folders if not f.startswith(".")]
                for name in names:
                    full = os.path.join(where, name)
                    if name.startswith("."):
                        _clean_temporary(full)
                        continue
                    try:
                        st = os.stat(full)
                    except FileNotFoundError:
                        continue
                    path = os.path.relpath(full, self.root).replace(os.sep, "/")
                    yield ObjectInfo(path, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC))

    def delete(self, path: str) -> None:
        """Unlink the object and fsync its directory; a missing one is not an error."""
        with self._errors(path):
            final = self._file(path)
            try:
                os.unlink(final)
            except FileNotFoundError:
                return
            _fsync_dir(os.path.dirname(final))

    def _file(self, path: str) -> str:
        parts = path.split("/")
        if any(not part or part.startswith(".") for part in parts):
            raise ObjectStoreError(
                f"{self.url}: {path!r} is not an object path", reason="BadObjectPath"
            )
        return os.path.join(self.root, *parts)

    def _place(self, path: str) -> str:
        """The file of the object, in a directory made if missing and durable up to the root."""
        final = self._file(path)
        folder = os.path.dirname(final)
        if folder not in self._durable:
            with self._dirs_lock:
                chain = []
                step = folder
                while step not in self._durable:
                    chain.append(step)
                    step = os.path.dirname(step)
                os.makedirs(folder, exist_ok=True)
                _sync_entries(chain)
                self._durable.update(chain)
        return final

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


def _write_temporary(final: str, data: Data | BinaryIO | Sequence[Data]) -> str:
    """Write `data` (bytes, parts of it, or an open file) beside `final` and fsync it; its path."""
    folder, name = os.path.split(final)
    temporary = os.path.join(folder, f".{name[:200]}.{secrets.token_hex(6)}{TEMPORARY_SUFFIX}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
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
        _remove(temporary)
        raise
    os.close(fd)
    return temporary


def _exchange(a: str, b: str) -> bool:
    """Swap two names atomically; False where the filesystem (or the C library) cannot."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
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


def _clean_temporary(path: str) -> None:
    """Remove a temporary file that no writer has touched for ABANDONED_AFTER seconds."""
    if not path.endswith(TEMPORARY_SUFFIX):
        return
    with contextlib.suppress(FileNotFoundError):
        if time.time() - os.stat(path).st_mtime > ABANDONED_AFTER:
            os.unlink(path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _raise(error: OSError) -> None:
    raise error
