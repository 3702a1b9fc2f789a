"""Debian's docker-registry on 127.0.0.1 as tests start it: plain HTTP or TLS, with or without
auth; and skopeo against it."""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

USER, PASSWORD = "ferry", "s3cret-pass"


@dataclass
class Registry:
    """A running registry: its host:port, and how to reach it."""

    address: str
    storage: Path
    tls: bool = False
    auth: bool = False

    def ref(self, name: str) -> str:
        """docker://ADDRESS/NAME."""
        return f"docker://{self.address}/{name}"

    def skopeo(self, *args: str) -> subprocess.CompletedProcess:
        """Run skopeo with this registry's TLS and credentials."""
        flags = ["--dest-tls-verify=false", "--src-tls-verify=false"] if args[0] == "copy" else []
        if args[0] == "inspect":
            flags = ["--tls-verify=false"]
        if self.auth:
            kind = "--dest-creds" if args[0] == "copy" else "--creds"
            flags.append(f"{kind}={USER}:{PASSWORD}")
            if args[0] == "copy":
                flags.append(f"--src-creds={USER}:{PASSWORD}")
        cmd = ["skopeo", "--insecure-policy", args[0], *flags, *args[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_api(url: str, proc: subprocess.Popen, ca: Path | None, timeout: float = 20) -> None:
    """Wait until GET /v2/ answers (200 or 401)."""
    context = ssl.create_default_context(cafile=ca)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"{url}/v2/", timeout=1, context=context).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} does not answer")


def start_registry(
    work: Path, *, htpasswd: Path | None = None, tls=None, token: str = ""
) -> Iterator[Registry]:
    port = _unused_port()
    storage = work / "storage"
    storage.mkdir()
    auth = token
    if htpasswd:
        auth = f"auth:\n  htpasswd:\n    realm: diskferry-test\n    path: {htpasswd}\n"
    tls_conf = f"  tls:\n    certificate: {tls.cert}\n    key: {tls.key}\n" if tls else ""
    config = work / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n{tls_conf}"
        f"{auth}"
    )
    log = open(work / "registry.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(config)], stdout=log, stderr=log, stdin=subprocess.DEVNULL
    )
    try:
        scheme = "https" if tls else "http"
        _wait_for_api(f"{scheme}://127.0.0.1:{port}", proc, tls.ca if tls else None)
        auth_on = bool(htpasswd or token)
        yield Registry(f"127.0.0.1:{port}", storage, tls=tls is not None, auth=auth_on)
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def start_basic_registry(work: Path, tls) -> Iterator[Registry]:
    """A registry in `work` over TLS (`tls`: the test CA's server certificate) with htpasswd
    basic auth for USER and PASSWORD."""
    htpasswd = work / "htpasswd"
    subprocess.run(
        ["htpasswd", "-Bbc", str(htpasswd), USER, PASSWORD], check=True, capture_output=True
    )
    yield from start_registry(work, htpasswd=htpasswd, tls=tls)
