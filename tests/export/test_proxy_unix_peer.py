"""The proxy's Unix hop reaches only a server of its own user: a socket another user serves
(SO_PEERCRED) is refused before a byte of the request, token and all, is sent to it."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from export_support import TOKEN, curl, write_routes

AUTH = f"x-kubevirt-export-token: {TOKEN}"
PREFIX = "/api/export.kubevirt.io/v1beta1/namespaces/default/virtualmachineexports/vm1"
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
# answers every connection as an export server would, and keeps what it was sent
_IMPOSTOR = """
import socket, sys
path, heard = sys.argv[1], sys.argv[2]
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen()
print("listening", flush=True)
while True:
    conn, _ = server.accept()
    conn.settimeout(2)
    try:
        data = conn.recv(65536)
    except OSError:
        data = b""
    with open(heard, "ab") as f:
        f.write(data)
    conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 9\\r\\n\\r\\nimpostor\\n")
    conn.close()
"""


@pytest.fixture
def impostor() -> Iterator[tuple[Path, Path]]:
    """A socket served by the user nobody, and the file of what it was sent."""
    folder = Path(tempfile.mkdtemp(prefix="dfpeer", dir="/tmp"))
    nobody = pwd.getpwnam("nobody")
    os.chown(folder, nobody.pw_uid, nobody.pw_gid)
    sock, heard = folder / "vm1.sock", folder / "heard"
    proc = subprocess.Popen(
        [*AS_NOBODY, sys.executable, "-c", _IMPOSTOR, str(sock), str(heard)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "listening\n"
    yield sock, heard
    proc.kill()
    proc.wait()
    shutil.rmtree(folder)


def test_a_socket_another_user_serves_is_refused(
    proxy_factory, tmp_path: Path, impostor: tuple[Path, Path]
) -> None:
    sock, heard = impostor
    routes = tmp_path / "routes.yaml"
    route = {"namespace": "default", "name": "vm1", "url": "https://127.0.0.1:9"}
    write_routes(routes, [{**route, "unixSocket": str(sock)}])
    proxy = proxy_factory(routes)
    url = proxy.url + PREFIX + "/volumes/disk/disk.img"
    answer = curl("-w", "\n%{http_code}", "-H", AUTH, url, ca=proxy.ca)
    body, _, code = answer.stdout.rpartition(b"\n")
    assert code == b"502" and json.loads(body)["reason"] == "BackendNotTrusted"
    assert not heard.exists() or heard.read_bytes() == b""
    assert TOKEN not in proxy.log.read_text()
    assert f"uid {pwd.getpwnam('nobody').pw_uid}" in proxy.log.read_text()
