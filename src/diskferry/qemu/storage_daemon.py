"""StorageDaemon: a qemu-storage-daemon serving disks over QMP and NBD on Unix sockets."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from diskferry.base import procstat, tether
from diskferry.base.errors import DiskferryError
from diskferry.qemu.hostlock import HostLock
from diskferry.qemu.qmp import Qmp, QmpError

_BINARY = "qemu-storage-daemon"
# short names: the sockets' paths must fit in sun_path (108 bytes) under long temp dirs
_FOLDER_PREFIX = "qs-"
ROOT_RUNTIME_DIR = Path("/run/diskferry")
PRIVATE_MODE = 0o700


class StorageDaemonError(DiskferryError):
    """qemu-storage-daemon could not be started or stopped."""

    reason = "StorageDaemonFailed"


@dataclass(frozen=True)
class DaemonDisk:
    """A disk for the daemon: its node name, image path and format (qcow2 or raw)."""

    node: str
    path: str
    fmt: str = "qcow2"
    read_only: bool = False


class RuntimeDirError(DiskferryError):
    """The runtime directory, or a folder in it, is not a private directory of this user's."""

    reason = "UnsafeRuntimeDir"


def _runtime_base() -> Path:
    """/run/diskferry for root; for anyone else a folder of theirs in $XDG_RUNTIME_DIR, or in
    the temporary directory without one (the daemon's workers get its XDG_RUNTIME_DIR)."""
    if os.geteuid() == 0:
        return ROOT_RUNTIME_DIR
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"diskferry-{os.geteuid()}"


def _private_dir(path: Path) -> None:
    """Make `path` (mode 0700) when missing; refuse it unless it is a real directory (not a
    symlink) of this user's with mode 0700. One found otherwise is left as it is."""
    try:
        os.mkdir(path, PRIVATE_MODE)
    except FileExistsError:
        pass
    except OSError as e:
        raise RuntimeDirError(f"cannot make {path}: {e.strerror or e}") from e
    else:
        os.chmod(path, PRIVATE_MODE)  # the umask may have taken bits: this one is ours, new
    found = os.lstat(path)
    if stat.S_ISLNK(found.st_mode):
        raise RuntimeDirError(f"{path} is a symbolic link, not a directory: remove it")
    if not stat.S_ISDIR(found.st_mode):
        raise RuntimeDirError(f"{path} is not a directory: remove it")
    if found.st_uid != os.geteuid():
        raise RuntimeDirError(
            f"{path} belongs to uid {found.st_uid}, not to this user (uid {os.geteuid()}): "
            "remove it"
        )
    mode = stat.S_IMODE(found.st_mode)
    if mode != PRIVATE_MODE:
        raise RuntimeDirError(
            f"{path} has mode {mode:04o}, not {PRIVATE_MODE:04o}: others may have put "
            "something in it; remove it"
        )


def runtime_dir(*folders: str) -> Path:
    """This user's directory for pid files, host locks and fixed-name sockets (`folders` in
    it when given), each made when missing and checked private; RuntimeDirError otherwise."""
    path = _runtime_base()
    _private_dir(path)
    for folder in folders:
        path = path / folder
        _private_dir(path)
    return path


class StorageDaemon:
    """A qemu-storage-daemon for `disks`, with a QMP socket and an NBD server, in a temp dir.

    It gets SIGTERM when the process that started it ends, whichever thread started it
    (see `tether`). Its pid file, locked while its starter lives, names it so that a later
    daemon for the same disks first ends one that a killed starter left; a daemon for
    disks another live process serves is refused. `stop()` quits it, killing it after
    `timeout`.
    """

    def __init__(self, disks: list[DaemonDisk], *, timeout: float = 30.0) -> None:
        if not disks:
            raise StorageDaemonError("a storage daemon needs at least one disk")
        self.disks = disks
        self.timeout = timeout
        key = "\n".join(sorted(os.path.realpath(d.path) for d in disks))
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        self.pid_file = runtime_dir() / f"qsd-{digest}.pid"
        self._lock = HostLock(self.pid_file, ", ".join(d.path for d in disks))
        self.dir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.qmp: Qmp | None = None

    @property
    def qmp_socket(self) -> str:
        """The QMP monitor socket."""
        assert self.dir is not None
        return str(self.dir / "qmp")

    @property
    def nbd_socket(self) -> str:
        """The NBD server socket."""
        assert self.dir is not None
        return str(self.dir / "nbd")

    def _blockdev(self, disk: DaemonDisk) -> str:
        spec = {
            "driver": disk.fmt,
            "node-name": disk.node,
            "read-only": disk.read_only,
            "file": {"driver": "file", "filename": disk.path, "read-only": disk.read_only},
        }
        return json.dumps(spec)

    def start(self) -> StorageDaemon:
        """Start the daemon and connect to its monitor."""
        self._lock.acquire()
        try:
            self._kill_leftover()
        except BaseException:
            self._lock.release()
            raise
        self.dir = Path(tempfile.mkdtemp(prefix=_FOLDER_PREFIX, dir=runtime_dir()))
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.qmp_socket)
        listener.listen()
        args = [
            _BINARY,
            "--chardev",
            f"socket,id=qmp0,fd={listener.fileno()},server=on,wait=off",
            "--monitor",
            "chardev=qmp0",
            "--nbd-server",
            f"addr.type=unix,addr.path={self.nbd_socket}",
        ]
        for disk in self.disks:
            args += ["--blockdev", self._blockdev(disk)]
        log = open(self.dir / "log", "wb")  # noqa: SIM115 - the child holds it
        try:
            self.process = tether.start(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=[listener.fileno()],
            )
        except OSError as e:
            self._remove_dir()
            self._lock.release()
            raise StorageDaemonError(f"cannot run {_BINARY}: {e.strerror}") from e
        finally:
            log.close()
            listener.close()
        pid = self.process.pid
        self._lock.write(f"{pid} {procstat.start_time(pid)} {self.dir}\n")
        try:
            self._connect()
        except BaseException:
            self.stop()
            raise
        return self

    def _connect(self) -> None:
        assert self.process is not None
        try:
            self.qmp = Qmp(self.qmp_socket, timeout=self.timeout)
        except QmpError as e:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(1)
            tail = self._log_tail()
            if "another process using the image" in tail:
                paths = ", ".join(d.path for d in self.disks)
                raise StorageDaemonError(
                    f"{paths} is open in another process (a running VM?): "
                    "reach its QEMU through its QMP socket instead",
                    reason="DiskInUse",
                ) from e
            raise StorageDaemonError(f"{_BINARY} did not start: {tail}") from e

    def _log_tail(self) -> str:
        assert self.dir is not None
        try:
            lines = (self.dir / "log").read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no output"
        return lines[-1] if lines else "no output"

    def _kill_leftover(self) -> None:
        """End a daemon a killed predecessor left for the same disks, named by the pid file,
        and remove its folder."""
        pid_field, started_field, folder = [*self._lock.read().strip().split(" ", 2), "", ""][:3]
        try:
            pid, started = int(pid_field), int(started_field)
        except ValueError:
            return
        with contextlib.suppress(OSError):
            program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            if procstat.is_same(pid, started) and program.endswith(_BINARY.encode()):
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + self.timeout
                while not procstat.has_ended(pid, started) and time.monotonic() < deadline:
                    time.sleep(0.02)
        if Path(folder).name.startswith(_FOLDER_PREFIX):
            shutil.rmtree(folder, ignore_errors=True)
        self._lock.write("")

    def release_monitor(self) -> None:
        """Disconnect from the monitor, which takes one client at a time, for another client.

        `stop()` then ends the daemon with SIGTERM, on which it still quits cleanly.
        """
        if self.qmp is not None:
            self.qmp.close()
            self.qmp = None

    def stop(self) -> None:
        """Quit the daemon (storing persistent bitmaps), kill it on timeout, remove its files."""
        if self.qmp is not None:
            with contextlib.suppress(QmpError):
                self.qmp.command("quit")
            self.qmp.close()
            self.qmp = None
        elif self.process is not None:
            self.process.terminate()
        if self.process is not None:
            try:
                self.process.wait(self.timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
            self._lock.write("")
        self._lock.release()
        self._remove_dir()

    def _remove_dir(self) -> None:
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> StorageDaemon:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
