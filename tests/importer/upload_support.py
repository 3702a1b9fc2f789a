"""Helpers of the upload tests: the token, an upload server run as the real command, curl, and
a client that sends part of a body and then waits or goes away."""

from __future__ import annotations

import socket
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from server_support import Running, start_diskferry

from diskferry.serving.certs import create_ca

TOKEN = "upload-t0ken-value"
ORIGINAL = b"\xab" * (1 << 20)


@dataclass
class UploadSetup:
    """A CA, a token file and a target that holds ORIGINAL; the servers started on it."""

    ca_dir: Path
    token_file: Path
    target: Path
    logs: Path
    servers: list[Running] = field(default_factory=list)

    def serve(self, *extra: str) -> Running:
        """Start `diskferry upload serve` on the target."""
        args = ["upload", "serve", str(self.target), "--token-file", str(self.token_file)]
        args += ["--cert-dir", str(self.ca_dir), "--san", "127.0.0.1", *extra]
        log = self.logs / f"upload-{len(list(self.logs.glob('upload-*.log')))}.log"
        server = start_diskferry(args, log, self.ca_dir / "ca.crt")
        self.servers.append(server)
        return server

    @classmethod
    def made_in(cls, folder: Path) -> UploadSetup:
        """A CA, the token and a target holding ORIGINAL, in `folder`."""
        create_ca(folder / "ca")
        token = folder / "token"
        token.write_text(TOKEN + "\n")
        (folder / "volumes").mkdir()
        target = folder / "volumes" / "disk.img"
        target.write_bytes(ORIGINAL)
        (folder / "logs").mkdir()
        return cls(folder / "ca", token, target, folder / "logs")

    def stop_servers(self) -> None:
        """Stop every server started on the setup that still runs."""
        for server in self.servers:
            server.stop()

    def untouched(self) -> bool:
        """Whether the target still holds ORIGINAL and nothing was left beside it."""
        beside = [p.name for p in self.target.parent.iterdir() if p.name != self.target.name]
        return self.target.read_bytes() == ORIGINAL and not [
            n for n in beside if self.target.name in n
        ]


def curl(server: Running, path: str, *args: str) -> tuple[int, str]:
    """curl `path` of `server` with `args`; the status and the body."""
    head = ["curl", "-sS", "--cacert", str(server.ca), "-o", "-", "-w", "\n%{http_code}"]
    proc = subprocess.run(
        [*head, *args, f"{server.url}{path}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    body, _, code = proc.stdout.rpartition("\n")
    assert code.isdigit(), proc.stderr
    return int(code), body


def bearer(token: str = TOKEN) -> list[str]:
    """curl's arguments for the bearer token."""
    return ["-H", f"Authorization: Bearer {token}"]


class PartialUpload:
    """A POST whose body is sent in pieces by the test, over TLS to 127.0.0.1."""

    def __init__(self, server: Running, path: str, length: int, token: str = TOKEN) -> None:
        context = ssl.create_default_context(cafile=str(server.ca))
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {length}\r\n\r\n"
        )
        self.sock.sendall(head.encode())

    def send(self, data: bytes) -> None:
        """Send more of the body."""
        self.sock.sendall(data)

    def status(self) -> int:
        """The status line's code of the answer."""
        answer = b""
        while b"\r\n" not in answer:
            piece = self.sock.recv(4096)
            if not piece:
                break
            answer += piece
        return int(answer.split()[1])

    def drop(self) -> None:
        """Go away without the rest of the body."""
        self.sock.close()
