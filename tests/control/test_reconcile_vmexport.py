"""VirtualMachineExport end to end, over the real store, runner, import and export workers and
the export proxy: links, downloads with the token, token Secrets, the TTL, deletes, snapshots,
sources not ready and kinds that cannot be exported."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from control_support import wait_until
from vmexport_support import ExportDaemon, get, raw_url

from diskferry.control.reconcilers.vmexport import free_port
from diskferry.control.resources.core import SECRETS

pytestmark = pytest.mark.usefixtures("nginx")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ExportDaemon]:
    running = ExportDaemon(tmp_path / "data", free_port())
    yield running
    running.stop()
    for job in running.export_jobs() + ["export-proxy"]:
        running.controllers.runner.purge(job, keep_scratch=False)
    wait_until(lambda: not running.controllers.runner.purge("export-proxy", False) or True)


def _export(daemon: ExportDaemon, name: str, kind: str, source: str, **spec) -> None:
    daemon.apply(
        "VirtualMachineExport",
        name,
        {"source": {"apiGroup": "diskferry.io", "kind": kind, "name": source}, **spec},
    )


def test_an_export_of_a_disk_serves_its_bytes_inside_and_through_the_proxy(
    daemon, nginx, images
) -> None:
    disk = daemon.ready_disk(nginx, images.reference)
    claim = daemon.claim(disk).read_bytes()
    _export(daemon, "ex1", "VirtualDisk", "vd1")
    export = daemon.wait_phase("VirtualMachineExport", "ex1", "Ready", timeout=60)
    status = export["status"]
    assert status["tokenSecretRef"] == "export-token-ex1"
    assert status["serviceName"] == "virt-export-ex1"
    created = datetime.fromisoformat(export["metadata"]["creationTimestamp"])
    expires = datetime.fromisoformat(status["ttlExpirationTime"])
    assert expires - created == timedelta(hours=2)
    internal, external = status["links"]["internal"], status["links"]["external"]
    assert internal["cert"] == external["cert"] == daemon.ca_pem
    token = daemon.token("export-token-ex1")
    for link in (internal, external):
        assert get(raw_url(link), link["cert"], token) == (200, claim)
        assert get(raw_url(link), link["cert"], "not-the-token")[0] == 401
        assert get(raw_url(link), link["cert"], None)[0] == 401
    assert raw_url(external).startswith(daemon.controllers.proxy.base_url)
    secret = daemon.objects.get(SECRETS, "default", "export-token-ex1")
    assert secret["metadata"]["ownerReferences"][0]["uid"] == export["metadata"]["uid"]
    print(daemon.controllers.proxy.routes())
    time.sleep(0)
