"""A Unix socket a server listens on for peers on its own host: owner-only, a stale one replaced;
and what a client of such a socket checks, that its peer runs as its own user.

The socket is bound under a temporary name beside its path, made owner-only (0600), then
renamed onto the path, so that it is never reachable with looser permissions and a stale socket
(left by a server that was killed) is replaced in one step. A socket that another server still
accepts on is not taken over. The directory is made owner-only (0700) when it does not exist.
`remove` unlinks the path only while it is still this socket: a successor's is left alone.

A client asks the kernel who its peer is (SO_PEERCRED: the user that made the listening
socket), not the file's owner or mode, which say nothing of who accepts on it.
"""

from __future__ import annotations

import os
import secrets
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from diskferry.serving.errors import ServeError

SOCKET_MODE = 0o600
DIRECTORY_MODE = 0o700
# sun_path holds 108 bytes with its terminating NUL
SOCKET_PATH_MAX = 107
_BACKLOG = 1024
_PROBE_TIMEOUT = 1.0
# struct ucred: pid, uid, gid
_UCRED = struct.Struct("3i")


@dataclass(frozen=True)
class UnixSocket:
    """A bound, listening Unix socket and the file it is at."""

    path: Path
    sock: socket.socket
    device: int
    inode: int

    def remove(self) -> None:
        """Unlink the socket's file, unless another socket has replaced it."""
        try:
            found = self.path.lstat()
        except FileNotFoundError:
            return
        if (found.st_dev, found.st_ino) == (self.device, self.inode):
            self.path.unlink(missing_ok=True)


def _accepting(path: Path) -> bool:
    """Whether a server accepts connections on the socket at `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(_PROBE_TIMEOUT)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def _check_replaceable(path: Path) -> None:
    """Refuse a path that holds something other than a socket nobody accepts on."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(found.st_mode):
        raise ServeError(f"{path} exists and is not a socket: remove it or choose another path")
    if _accepting(path):
        raise ServeError(f"another server listens on {path}")


def bind_unix(path: str | os.PathLike[str]) -> UnixSocket:
    """A non-blocking socket listening at `path`, owner-only, replacing a stale one."""
    target = Path(path)
    staging = target.with_name(f".bind-{secrets.token_hex(4)}")
    if max(len(os.fsencode(target)), len(os.fsencode(staging))) > SOCKET_PATH_MAX:
        raise ServeError(
            f"the socket path {target} is too long for a Unix socket: use a shorter one"
        )
    try:
        target.parent.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    except OSError as e:
        raise ServeError(f"cannot make {target.parent}: {e.strerror or e}") from e
    _check_replaceable(target)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(staging))
        os.chmod(staging, SOCKET_MODE)
        os.replace(staging, target)
        sock.listen(_BACKLOG)
        sock.setblocking(False)
        found = target.lstat()
    except OSError as e:
        sock.close()
        staging.unlink(missing_ok=True)
        raise ServeError(f"cannot listen on {target}: {e.strerror or e}") from e
    return UnixSocket(target, sock, found.st_dev, found.st_ino)


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of the connected Unix socket `sock`."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    return _UCRED.unpack(raw)[1]
