"""Deckhouse's VirtualDataExport samples (tests/anchors/deckhouse/virtualdataexport-*.yaml),
created with kubectl as the d8 CLI creates them, against a real `diskferry serve`: the disk or
snapshot is downloaded with curl through `status.url` and the token, byte for byte; the phases
and the Completed condition are Deckhouse's; the idle timeout ends an export nobody downloads;
deleting a vde ends its export; an image target says what to do instead."""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import stop_workers_under
from daemon_support import Served, free_port, kubectl, start_daemon
from test_kubectl_kubevirt import WAIT, apply_text, claim_bytes, get_json, http_disk, wait_phase

SAMPLES = Path(__file__).resolve().parents[1] / "anchors" / "deckhouse"


@pytest.fixture(scope="module")
def daemon() -> Iterator[Served]:
    """One daemon with its controllers and an export proxy on a port of its own."""
    base = Path(tempfile.mkdtemp(prefix="dfvde", dir="/tmp"))
    served = start_daemon(
        base / "data", base / "daemon.log", options=("--proxy-port", str(free_port()))
    )
    yield served
    try:
        assert served.stop() == 0
    finally:
        stop_workers_under(base)
        shutil.rmtree(base, ignore_errors=True)


def create(daemon: Served, sample: str) -> str:
    """`kubectl create` the sample as it is; the name the API gave it."""
    out = kubectl(daemon, "create", "-f", str(SAMPLES / sample))
    made = out.split()[0]
    assert made.startswith("virtualdataexport.diskferry.io/"), out
    return made.partition("/")[2]


def completed(vde: dict[str, Any]) -> dict[str, Any]:
    """The vde's Completed condition."""
    return next(c for c in vde["status"]["conditions"] if c["type"] == "Completed")


def curl_download(daemon: Served, vde: dict[str, Any], out: Path) -> bytes:
    """The bytes of `status.url`, fetched with curl as a user would: the CA from `status.ca`,
    the token from the Secret `status.tokenSecretRef` names."""
    status = vde["status"]
    ca = out.with_suffix(".ca.pem")
    ca.write_bytes(base64.b64decode(status["ca"]))
    secret = get_json(daemon, f"secret/{status['tokenSecretRef']}")
    token = base64.b64decode(secret["data"]["token"]).decode()
    header = f"x-kubevirt-export-token: {token}"
    command = ["curl", "-sSf", "--cacert", str(ca), "-H", header, "-o", str(out), status["url"]]
    subprocess.run(command, check=True, timeout=120)
    return out.read_bytes()


def gone(daemon: Served, what: str) -> None:
    """Wait until `what` no longer exists."""
    kubectl(daemon, "wait", what, "--for=delete", WAIT)


def test_a_disk_is_downloaded_through_status_url(
    daemon: Served, nginx, images, tmp_path: Path
) -> None:
    disk = http_disk(daemon, nginx, images, "linux-vm-root", "default")
    name = create(daemon, "virtualdataexport-virtualdisk.yaml")
    vde = wait_phase(daemon, f"vde/{name}", "WaitForUserDownload")
    assert vde["spec"]["idleTimeout"] == "30m"
    assert completed(vde)["status"] == "False"
    assert completed(vde)["reason"] == "WaitForUserDownload"
    table = kubectl(daemon, "get", "vde", name).splitlines()
    assert table[0].split() == ["NAME", "PHASE", "AGE"]
    assert table[1].split()[:2] == [name, "WaitForUserDownload"]

    assert curl_download(daemon, vde, tmp_path / "disk.img") == claim_bytes(daemon, disk)
    done = wait_phase(daemon, f"vde/{name}", "Completed")
    assert completed(done)["status"] == "True"

    export = done["status"]["virtualMachineExportName"]
    assert get_json(daemon, f"vmexport/{export}")["status"]["phase"] == "Ready"
    kubectl(daemon, "delete", "vde", name, "--wait=true", WAIT)
    gone(daemon, f"vmexport/{export}")


def test_a_snapshot_is_downloaded_through_status_url(daemon: Served, tmp_path: Path) -> None:
    disk = get_json(daemon, "vd/linux-vm-root")
    kubectl(daemon, "apply", "-f", str(SAMPLES / "virtualdisksnapshot.yaml"))
    wait_phase(daemon, "vdsnapshot/linux-vm-root-1728027905", "Ready")
    name = create(daemon, "virtualdataexport-virtualdisksnapshot.yaml")
    vde = wait_phase(daemon, f"vde/{name}", "WaitForUserDownload")
    assert vde["spec"]["idleTimeout"] == "1h0m0s"
    assert curl_download(daemon, vde, tmp_path / "snapshot.img") == claim_bytes(daemon, disk)
    wait_phase(daemon, f"vde/{name}", "Completed")
    kubectl(daemon, "delete", "vde", name, "--wait=true", WAIT)


def test_nothing_downloaded_within_the_idle_timeout_expires(daemon: Served) -> None:
    apply_text(
        daemon,
        """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDataExport
metadata: {name: idle, namespace: default}
spec:
  idleTimeout: 3s
  targetRef: {kind: VirtualDisk, name: linux-vm-root}
""",
    )
    ready = wait_phase(daemon, "vde/idle", "WaitForUserDownload")
    export = ready["status"]["virtualMachineExportName"]
    expired = wait_phase(daemon, "vde/idle", "Expired")
    assert completed(expired)["status"] == "False"
    assert completed(expired)["reason"] == "Expired"
    assert "url" not in expired["status"]
    gone(daemon, f"vmexport/{export}")


def test_an_image_target_fails_saying_what_to_do(daemon: Served) -> None:
    apply_text(
        daemon,
        """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDataExport
metadata: {name: image, namespace: default}
spec:
  targetRef: {kind: VirtualImage, name: some-image}
""",
    )
    failed = wait_phase(daemon, "vde/image", "Failed")
    assert "make a VirtualDisk from it" in completed(failed)["message"]


def test_the_spec_is_fixed_once_made(daemon: Served) -> None:
    apply_text(
        daemon,
        """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDataExport
metadata: {name: fixed, namespace: default}
spec:
  targetRef: {kind: VirtualImage, name: some-image}
""",
    )
    patch = '{"spec": {"idleTimeout": "1h"}}'
    out = kubectl(daemon, "patch", "vde", "fixed", "--type=merge", "-p", patch, ok=False)
    assert "field is immutable" in out
    assert get_json(daemon, "vde/fixed")["spec"]["idleTimeout"] == "30m"
