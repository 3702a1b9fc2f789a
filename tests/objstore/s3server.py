"""A real moto S3 server on 127.0.0.1 for tests, and a bucket helper."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ACCESS_KEY = "testing-key"
SECRET_KEY = "testing-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_moto(extra_env: dict[str, str] | None = None, tls: Any = None) -> Iterator[str]:
    """Start moto_server on a free local port (over HTTPS with the certificate of `tls`, the
    tests' Tls, when given); yield its endpoint URL; stop it after."""
    port = _free_port()
    binary = Path(sys.executable).parent / "moto_server"
    env = {**os.environ, **(extra_env or {})}
    served = [] if tls is None else ["-c", str(tls.cert), "-k", str(tls.key)]
    proc = subprocess.Popen(
        [str(binary), "-H", "127.0.0.1", "-p", str(port), *served],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    endpoint = f"{'http' if tls is None else 'https'}://127.0.0.1:{port}"
    context = None if tls is None else ssl.create_default_context(cafile=str(tls.ca))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1, context=context).close()
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)


def make_bucket(endpoint: str, bucket: str, ca: Path | None = None) -> None:
    """Create `bucket` with a plain HTTP PUT (trusting the CA `ca` over HTTPS)."""
    context = None if ca is None else ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
    urllib.request.urlopen(request, context=context).close()


def use_endpoint(monkeypatch, endpoint: str) -> None:
    """Point the AWS_* environment variables at `endpoint` with the test credentials."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
