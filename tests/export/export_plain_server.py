"""A plain HTTPS file server in a thread, as KubeVirt's would be: Range, no `extents`, and
optionally connections dropped mid-body."""

from __future__ import annotations

import re
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from diskferry.export.download import DownloadRequest
from diskferry.serving.certs import issue_server_cert


class PlainServer(ThreadingHTTPServer):
    """Serves `data` at any path ending in /disk.img; drops the responses numbered in `drops`
    and waits `delay` seconds before each body."""

    daemon_threads = True

    def __init__(self, data: bytes, ca_dir: Path, drops: set[int], delay: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.data = data
        self.drops = drops
        self.delay = delay
        self.ranges: list[str | None] = []
        self.lock = threading.Lock()
        chain, key = issue_server_cert(ca_dir, ["127.0.0.1"])
        (ca_dir / "plain.crt").write_bytes(chain)
        (ca_dir / "plain.key").write_bytes(key)
        self.ca = ca_dir / "ca.crt"
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(ca_dir / "plain.crt", ca_dir / "plain.key")
        self.socket = ctx.wrap_socket(self.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server_address[1]}"
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    def request(self, target: Path, **options: Any) -> DownloadRequest:
        """A download of the served disk into `target`, one connection, trusting the server."""
        url = f"{self.url}/volumes/disk/disk.img"
        options = {"connections": 1, "backoff": 0.01, **options}
        return DownloadRequest(url=url, target=target, ca_bundle=str(self.ca), **options)

    def stop(self) -> None:
        """Stop serving."""
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: PlainServer

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        if not self.path.split("?")[0].endswith("/disk.img"):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = self.server.data
        start, end = 0, len(data)
        rng = self.headers.get("Range")
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
        if match:
            start = int(match[1])
            end = min(len(data), int(match[2]) + 1) if match[2] else len(data)
        self.send_response(206 if match else 200)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start))
        if match:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.end_headers()
        if head:
            return
        with self.server.lock:
            self.server.ranges.append(rng)
            number = len(self.server.ranges)
        body = data[start:end]
        time.sleep(self.server.delay)
        if number in self.server.drops:
            self.wfile.write(body[: len(body) // 3])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)
