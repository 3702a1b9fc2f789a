"""What a command brings in: `diskferry --version` and a local import start without the
daemon's and the servers' libraries, and a local import without the network clients or QMP."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# modules that only the daemon, the resource commands and the servers need
SERVER_SIDE = ("fastapi", "starlette", "uvicorn", "aiohttp", "uvloop", "diskferry.control")
# modules that only a URL, a registry or an NBD source needs
REMOTE_SOURCE = ("urllib3", "diskferry.registry", "diskferry.nbd")
# modules that only a running QEMU or storage daemon needs
QEMU_CONTROL = ("qemu.qmp", "diskferry.qemu.qmp", "diskferry.qemu.storage_daemon")

_RUN = """
import json, sys
from diskferry.cli.main import app
code = app(args=sys.argv[1:], standalone_mode=False)
wanted = {wanted!r}
found = sorted(m for m in sys.modules if any(m == w or m.startswith(w + ".") for w in wanted))
print(json.dumps({{"code": code, "found": found}}))
"""


def _imported(*args: str, wanted: tuple[str, ...]) -> list[str]:
    """The modules of `wanted` (packages and their modules) loaded by running `args`."""
    script = _RUN.format(wanted=wanted)
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
        timeout=120,
    )
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["code"] in (None, 0), proc.stderr
    return result["found"]


def test_version_loads_no_server_models_or_http_client() -> None:
    found = _imported("--version", wanted=(*SERVER_SIDE, "pydantic", "urllib3", "rich", "yaml"))
    assert found == []


def test_local_import_loads_nothing_of_the_daemon_or_the_servers(images, tmp_path) -> None:
    target = tmp_path / "disk.raw"
    source = images.get("qcow2")
    found = _imported("import", "--no-progress", str(source), str(target), wanted=SERVER_SIDE)
    assert found == []
    assert images.same(target, images.reference)


@pytest.mark.parametrize("wanted", [REMOTE_SOURCE, QEMU_CONTROL], ids=["remote", "qemu"])
def test_local_import_loads_no_client_it_does_not_use(images, tmp_path, wanted) -> None:
    target = tmp_path / "disk.raw"
    source = images.get("qcow2")
    found = _imported("import", "--no-progress", str(source), str(target), wanted=wanted)
    assert found == []
    assert images.same(target, images.reference)


def test_version_loads_no_command_module() -> None:
    found = _imported("--version", wanted=("diskferry.cli",))
    assert [m for m in found if m.endswith("_cmd")] == []


def test_a_backup_to_a_directory_loads_no_s3_client(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DISKFERRY_PASSWORD", "pw")
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(tmp_path / "cache"))
    repo, disk = str(tmp_path / "repo"), tmp_path / "disk.raw"
    disk.write_bytes(b"data" * 4096)
    assert _imported("repo", "init", "--repo", repo, wanted=()) == []
    backup = ("backup", "--repo", repo, "--vm", "v", "--disk", f"d={disk}", "--no-progress")
    assert _imported(*backup, wanted=("obstore", "diskferry.objstore.s3")) == []
