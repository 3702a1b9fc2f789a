"""VirtualMachineExport end to end, over the real store, runner, import and export workers and
the export proxy: links, downloads with the token, token Secrets, deletes, snapshots,
sources not ready and kinds that cannot be exported."""

from __future__ import annotations

import logging
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from vmexport_support import ExportDaemon, get, get_when_up, raw_url

from diskferry.control.errors import NotFoundError
from diskferry.control.host.embedded.certs import DaemonCa
from diskferry.control.host.embedded.proxy import PROXY_JOB, ProxyKeeper, export_socket
from diskferry.control.host.servers import PORT_ANNOTATION, free_port
from diskferry.control.reconcilers.exports.vmexport import stop_server
from diskferry.control.resources.core import SECRETS
from diskferry.control.runtime.runner.local import LocalRunner
from diskferry.qemu import storage_daemon

EXPORT = "VirtualMachineExport"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ExportDaemon]:
    running = ExportDaemon(tmp_path / "data", free_port())
    yield running
    running.stop()
    running.stop_workers()


def _export(daemon: ExportDaemon, name: str, kind: str, source: str, **spec: Any) -> None:
    source_ref = {"apiGroup": "diskferry.io", "kind": kind, "name": source}
    daemon.apply(EXPORT, name, {"source": source_ref, **spec})


def _ready(daemon: ExportDaemon, name: str) -> dict[str, Any]:
    export = daemon.wait_phase(EXPORT, name, "Ready", "Skipped", timeout=60)
    assert export["status"]["phase"] == "Ready", export["status"]
    return export


def _condition(obj: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _secret(daemon: ExportDaemon, name: str) -> dict[str, Any] | None:
    try:
        return daemon.objects.get(SECRETS, "default", name)
    except NotFoundError:
        return None


def _gone(daemon: ExportDaemon, export: dict[str, Any]) -> None:
    """Nothing of the export is left: object, worker, job directory, route, port."""
    wait_until(lambda: daemon.get(EXPORT, export["metadata"]["name"]) is None, 60)
    job = f"vmexport-{export['metadata']['uid']}"
    wait_until(lambda: not daemon.workers(job), 30)
    assert daemon.export_jobs() == []
    assert ("default", export["metadata"]["name"]) not in daemon.controllers.proxy.routes()
    assert not _listening(int(export["metadata"]["annotations"][PORT_ANNOTATION]))


def test_an_export_of_a_disk_serves_its_bytes_inside_and_through_the_proxy(
    daemon, nginx, images, caplog
) -> None:
    caplog.set_level(logging.INFO)
    disk = daemon.ready_disk(nginx, images.reference)
    claim = daemon.claim(disk).read_bytes()
    _export(daemon, "ex1", "VirtualDisk", "vd1")
    export = _ready(daemon, "ex1")
    status = export["status"]
    assert (status["tokenSecretRef"], status["serviceName"]) == (
        "export-token-ex1",
        "virt-export-ex1",
    )
    created = datetime.fromisoformat(export["metadata"]["creationTimestamp"])
    assert datetime.fromisoformat(status["ttlExpirationTime"]) - created == timedelta(hours=2)
    internal, external = status["links"]["internal"], status["links"]["external"]
    assert internal["cert"] == external["cert"] == daemon.ca_pem
    port = int(export["metadata"]["annotations"][PORT_ANNOTATION])
    assert raw_url(internal) == f"https://127.0.0.1:{port}/volumes/vd1/disk.img"
    assert raw_url(external).startswith(
        f"{daemon.controllers.proxy.base_url}/api/export.kubevirt.io/v1/namespaces/default/"
        "virtualmachineexports/ex1/"
    )
    assert {f["format"] for f in internal["volumes"][0]["formats"]} >= {"raw", "gzip"}
    token = daemon.token("export-token-ex1")
    for link in (internal, external):
        assert get_when_up(raw_url(link), link["cert"], token) == (200, claim)
        assert get(raw_url(link), link["cert"], "not-the-token")[0] == 401
        assert get(raw_url(link), link["cert"], None)[0] == 401
    # the proxy reached the server over its Unix socket, in plain HTTP
    route = daemon.controllers.proxy.routes()[("default", "ex1")]
    assert route.ready and route.unix_socket is not None
    hop = Path(route.unix_socket)
    assert stat.S_ISSOCK(hop.lstat().st_mode) and stat.S_IMODE(hop.lstat().st_mode) == 0o600
    secret = _secret(daemon, "export-token-ex1")
    assert secret is not None
    assert secret["metadata"]["ownerReferences"][0]["uid"] == export["metadata"]["uid"]
    job = daemon.data_dir / "jobs" / f"vmexport-{export['metadata']['uid']}"
    for name in ("job.json", "stdout", "stderr"):
        assert token not in (job / name).read_text()
    assert (job / "token").read_text() == token
    assert {"Starting", "ExportReady"} <= {e["reason"] for e in daemon.events("ex1")}

    daemon.delete(EXPORT, "ex1")
    _gone(daemon, export)
    assert not hop.exists()
    wait_until(lambda: _secret(daemon, "export-token-ex1") is None, 30)
    assert token not in caplog.text
    wait_until(lambda: not daemon.workers(PROXY_JOB), 30)  # the last export took the proxy
    assert not _listening(daemon.controllers.proxy.port)


def test_a_given_token_secret_is_waited_for_used_and_kept(daemon, nginx, images) -> None:
    disk = daemon.ready_disk(nginx, images.reference)
    _export(daemon, "ex2", "VirtualDisk", "vd1", tokenSecretRef="my-token")
    pending = daemon.wait_phase(EXPORT, "ex2", "Pending")
    wait_until(lambda: _condition(daemon.get(EXPORT, "ex2"))["reason"] == "TokenNotReady")
    assert "my-token does not exist" in _condition(daemon.get(EXPORT, "ex2"))["message"]
    assert pending["status"]["ttlExpirationTime"]
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "my-token"}}
    daemon.objects.create(SECRETS, "default", {**secret, "stringData": {"token": "t0ken-42"}})
    export = _ready(daemon, "ex2")
    assert export["status"]["tokenSecretRef"] == "my-token"
    assert _secret(daemon, "export-token-ex2") is None
    internal = export["status"]["links"]["internal"]
    claim = daemon.claim(disk).read_bytes()
    assert get(raw_url(internal), internal["cert"], "t0ken-42") == (200, claim)
    daemon.delete(EXPORT, "ex2")
    _gone(daemon, export)
    assert _secret(daemon, "my-token") is not None


def test_a_source_not_there_is_waited_for(daemon) -> None:
    _export(daemon, "later", "VirtualDisk", "blank")
    daemon.wait_phase(EXPORT, "later", "Pending")
    wait_until(lambda: _condition(daemon.get(EXPORT, "later"))["reason"] == "SourceNotReady")
    condition = _condition(daemon.get(EXPORT, "later"))
    assert condition["status"] == "False"
    assert "VirtualDisk blank" in condition["message"]
    assert "does not exist" in condition["message"]
    daemon.apply("VirtualDisk", "blank", {"persistentVolumeClaim": {"size": "4Mi"}})
    export = _ready(daemon, "later")
    internal = export["status"]["links"]["internal"]
    token = daemon.token("export-token-later")
    assert get(raw_url(internal), internal["cert"], token) == (200, bytes(4 << 20))


def test_a_snapshot_is_exported(daemon, nginx, images) -> None:
    disk = daemon.ready_disk(nginx, images.reference)
    daemon.apply("VirtualDiskSnapshot", "snap1", {"virtualDiskName": "vd1"})
    assert (
        daemon.wait_phase("VirtualDiskSnapshot", "snap1", "Ready", "Failed")["status"]["phase"]
        == "Ready"
    )
    _export(daemon, "ex3", "VirtualDiskSnapshot", "snap1")
    export = _ready(daemon, "ex3")
    external = export["status"]["links"]["external"]
    assert raw_url(external).endswith("/volumes/snap1/disk.img")
    token = daemon.token("export-token-ex3")
    claim = daemon.claim(disk).read_bytes()
    assert get_when_up(raw_url(external), external["cert"], token) == (200, claim)


def _volume_urls(link: dict[str, Any]) -> dict[str, str]:
    """Each volume's raw URL, by volume name."""
    return {
        v["name"]: next(f["url"] for f in v["formats"] if f["format"] == "raw")
        for v in link["volumes"]
    }


def test_a_stopped_vm_has_its_disks_served_and_a_running_one_and_its_disk_wait(
    daemon, nginx, images
) -> None:
    daemon.ready_disk(nginx, images.reference)
    daemon.apply("VirtualDisk", "vd2", {"persistentVolumeClaim": {"size": "4Mi"}})
    blank = daemon.wait_phase("VirtualDisk", "vd2", "Ready", "Failed", timeout=30)
    refs = [{"kind": "VirtualDisk", "name": name} for name in ("vd1", "vd2")]
    vm_spec = {
        "runPolicy": "AlwaysOff",
        "blockDeviceRefs": refs,
        "memory": {"size": "64Mi"},
        "terminationGracePeriodSeconds": 0,  # no guest OS to power off on an ACPI request
    }
    daemon.apply("VirtualMachine", "vm1", vm_spec)
    daemon.wait_phase("VirtualMachine", "vm1", "Stopped", timeout=30)
    _export(daemon, "vm", "VirtualMachine", "vm1")
    export = _ready(daemon, "vm")
    token = daemon.token("export-token-vm")
    claims = {
        "vd1": daemon.claim(daemon.get("VirtualDisk", "vd1")).read_bytes(),
        "vd2": daemon.claim(blank).read_bytes(),
    }
    for link in export["status"]["links"].values():
        urls = _volume_urls(link)
        assert sorted(urls) == ["vd1", "vd2"]
        for name, url in urls.items():
            assert get_when_up(url, link["cert"], token) == (200, claims[name])

    daemon.objects.patch(
        daemon.registry.by_kind("VirtualMachine"),
        "default",
        "vm1",
        {"spec": {"runPolicy": "AlwaysOn"}},
        "merge",
    )
    wait_until(lambda: _condition(daemon.get(EXPORT, "vm"))["reason"] == "InUse", 90)
    pending = daemon.get(EXPORT, "vm")
    assert pending["status"]["phase"] == "Pending"
    assert "VirtualMachine vm1 is" in _condition(pending)["message"]
    assert not pending["status"].get("links")
    job = f"vmexport-{export['metadata']['uid']}"
    wait_until(lambda: not daemon.workers(job), 30)
    _export(daemon, "one-disk", "VirtualDisk", "vd1")
    one = wait_until(
        lambda: (
            (found := daemon.get(EXPORT, "one-disk"))
            and any(c["reason"] == "InUse" for c in found["status"].get("conditions", []))
            and found
        ),
        30,
    )
    assert one["status"]["phase"] == "Pending" and not one["status"].get("links")
    assert "in use by the running VirtualMachine vm1" in _condition(one)["message"]
    daemon.delete(EXPORT, "one-disk")
    daemon.delete(EXPORT, "vm")
    daemon.delete("VirtualMachine", "vm1")
    wait_until(lambda: daemon.get("VirtualMachine", "vm1") is None, 60)


def test_an_export_whose_disk_goes_stops_serving(daemon, nginx, images) -> None:
    daemon.ready_disk(nginx, images.reference)
    _export(daemon, "ex5", "VirtualDisk", "vd1")
    export = _ready(daemon, "ex5")
    daemon.delete("VirtualDisk", "vd1")
    wait_until(lambda: _condition(daemon.get(EXPORT, "ex5"))["reason"] == "SourceNotReady", 60)
    assert daemon.get(EXPORT, "ex5")["status"]["phase"] == "Pending"
    assert not daemon.get(EXPORT, "ex5")["status"].get("links")
    job = f"vmexport-{export['metadata']['uid']}"
    wait_until(lambda: not daemon.workers(job) and not daemon.export_jobs(), 30)
    assert ("default", "ex5") not in daemon.controllers.proxy.routes()


class _Stopping:
    """A keeper whose worker stops (or not yet) when asked, with the embedded proxy."""

    def __init__(self, stops: bool, data_dir: Path) -> None:
        self.imports = self
        self.stops = stops
        self.proxy = ProxyKeeper(LocalRunner(data_dir), DaemonCa(data_dir / "pki"))

    def stop(self, job_id: str) -> bool:
        return self.stops


def test_a_stopped_server_leaves_no_socket_even_when_it_was_killed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a runtime directory short enough for a socket path (pytest's own may not be)
    runtime = Path(tempfile.mkdtemp(prefix="dfsock", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setattr(storage_daemon, "ROOT_RUNTIME_DIR", runtime / "diskferry")
    path = export_socket("vmexport-killed")
    assert path is not None and path.startswith(str(runtime))
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(path)  # as a killed server leaves it: bound, never removed
    left.close()
    keeper, stopped = _Stopping(False, runtime / "data"), _Stopping(True, runtime / "data")
    assert not stop_server(keeper, "vmexport-killed")  # type: ignore[arg-type]
    assert Path(path).exists()
    assert stop_server(stopped, "vmexport-killed")  # type: ignore[arg-type]
    assert not Path(path).exists()
    shutil.rmtree(runtime)
