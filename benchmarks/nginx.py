"""An nginx serving a directory on 127.0.0.1, plain or HTTPS, for the benchmarks."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def nginx(
    root: Path, cert: Path | None = None, key: Path | None = None, locations: str = ""
) -> Iterator[str]:
    """Serve `root` (with `locations`, more of the server block); yields the base URL (https
    when a certificate is given)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-nginx-") as tmp:
        tls = ""
        scheme = "http"
        if cert and key:
            tls = f"ssl_certificate {cert}; ssl_certificate_key {key};"
            scheme = "https"
        listen = f"127.0.0.1:{port}{' ssl' if tls else ''}"
        conf = Path(tmp) / "nginx.conf"
        conf.write_text(
            f"""daemon off; master_process off; worker_processes 1; user root;
error_log {tmp}/error.log; pid {tmp}/nginx.pid;
events {{ worker_connections 256; }}
http {{
  access_log off; sendfile on; tcp_nopush on;
  client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp};
  uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  default_type application/octet-stream;
  server {{ listen {listen}; {tls} root {root}; {locations} }}
}}
"""
        )
        proc = subprocess.Popen(["nginx", "-c", str(conf), "-p", tmp])
        try:
            for _ in range(100):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                time.sleep(0.05)
            yield f"{scheme}://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait()
