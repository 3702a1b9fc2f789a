"""NbdServer: qemu-nbd serving one volume read-only over TCP, on a socket bound beforehand.

The listening socket is made here and handed to qemu-nbd by socket activation
(LISTEN_FDS), so the server takes connections the moment it starts, port 0 picks a free
port, and no client ever races its start.
"""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from urllib.parse import quote

from diskferry.base import tether
from diskferry.base.errors import DiskferryError

_BINARY = "qemu-nbd"
_ACTIVATED_FD = 3  # where socket activation hands the first socket
# the shell sets LISTEN_PID to its own pid, which the exec'd qemu-nbd keeps
_ACTIVATE = 'export LISTEN_PID=$$; exec "$@" {fd}<&{held}'
_TLS_FILES = ("ca-cert.pem", "server-cert.pem", "server-key.pem")


class NbdServerError(DiskferryError):
    """qemu-nbd could not serve the volume."""

    reason = "NbdServerFailed"


@dataclass(frozen=True)
class NbdServeOptions:
    """What to serve and how: the export's name, the image format, TLS certificates."""

    name: str
    fmt: str = "raw"
    tls_dir: str | None = None
    verify_clients: bool = True


class NbdServer:
    """qemu-nbd serving `volume` read-only at `address`:`port`, holes and allocation depth told.

    With `tls_dir` (qemu's layout: ca-cert.pem, server-cert.pem, server-key.pem) only
    TLS clients are taken, and with `verify_clients` only those whose certificate the
    CA signed. The server gets SIGTERM when this process ends.
    """

    def __init__(self, volume: str, address: str, port: int, options: NbdServeOptions) -> None:
        if not os.path.exists(volume):
            raise NbdServerError(f"the volume {volume} does not exist")
        if options.tls_dir is not None:
            tls_dir = options.tls_dir
            missing = [f for f in _TLS_FILES if not os.path.exists(os.path.join(tls_dir, f))]
            if missing:
                raise NbdServerError(
                    f"the TLS directory {tls_dir} lacks {', '.join(missing)}",
                    reason="TlsSetupFailed",
                )
        self.volume = volume
        self.options = options
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((address, port))
            self._listener.listen(16)
        except OSError as e:
            self._listener.close()
            raise NbdServerError(
                f"cannot listen on {address}:{port}: {e.strerror}", reason="ListenFailed"
            ) from e
        self.address = address
        self.port: int = self._listener.getsockname()[1]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The export's URL: nbd:// or, with TLS, nbds://."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        scheme = "nbds" if self.options.tls_dir else "nbd"
        return f"{scheme}://{host}:{self.port}/{quote(self.options.name)}"

    def _args(self) -> list[str]:
        args = [
            _BINARY,
            "--read-only",
            "--persistent",
            "--shared=0",
            "--allocation-depth",
            "-f",
            self.options.fmt,
            "-x",
            self.options.name,
        ]
        if self.options.tls_dir is not None:
            verify = "on" if self.options.verify_clients else "off"
            args += [
                "--object",
                f"tls-creds-x509,id=tls0,endpoint=server,verify-peer={verify},"
                f"dir={self.options.tls_dir.replace(',', ',,')}",
                "--tls-creds=tls0",
            ]
        return [*args, self.volume]

    def start(self) -> NbdServer:
        """Start qemu-nbd on the bound socket."""
        held = self._listener.fileno()
        shell = ["sh", "-c", _ACTIVATE.format(fd=_ACTIVATED_FD, held=held), "sh"]
        try:
            self.process = tether.start(
                [*shell, *self._args()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=[held],
                env={**os.environ, "LISTEN_FDS": "1"},
            )
        except OSError as e:
            raise NbdServerError(f"cannot run {_BINARY}: {e.strerror}") from e
        finally:
            self._listener.close()
        return self

    def wait(self) -> int:
        """Wait until the server ends; its exit code. One that failed raises NbdServerError."""
        assert self.process is not None
        _, err = self.process.communicate()
        code = self.process.returncode
        if code > 0:
            lines = err.decode(errors="replace").strip().splitlines()
            raise NbdServerError(f"{_BINARY} failed: {lines[-1] if lines else f'exit {code}'}")
        return code

    def stop(self) -> None:
        """End the server: SIGTERM, and SIGKILL if it lingers."""
        if self.process is None:
            self._listener.close()
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.communicate()

    def __enter__(self) -> NbdServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
