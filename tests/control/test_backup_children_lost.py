"""A Backup or Restore whose DataUpload or DataDownload is deleted while it works ends, and
says which child went, instead of waiting for it for ever."""

from __future__ import annotations

import os

import pytest
from control_support import stop_workers_under, wait_until
from datamover_support import MoverDaemon, repository_held

from diskferry.control.resources.model import API_VERSION

ENDED = ("Completed", "PartiallyFailed", "Failed")


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(tmp_path / "cache"))
    d = MoverDaemon(tmp_path / "data")
    d.location(tmp_path / "backups")
    d.disk("vd-a", size="2Mi", data=os.urandom(8192))
    d.vm("vm-a", ["vd-a"])
    yield d
    d.stop()
    stop_workers_under(tmp_path)


def create(daemon: MoverDaemon, kind: str, name: str, spec: dict) -> None:
    body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}
    daemon.objects.create(daemon.registry.by_kind(kind), "default", body)


def delete(daemon: MoverDaemon, kind: str, name: str) -> None:
    daemon.objects.delete(daemon.registry.by_kind(kind), "default", name)


def test_a_backup_whose_upload_is_deleted_fails_naming_it(daemon, tmp_path):
    with repository_held(tmp_path / "backups"):
        create(daemon, "Backup", "b1", {"storageLocation": "repo"})
        daemon.wait_phase("DataUpload", "b1-vm-a", "InProgress")
        delete(daemon, "DataUpload", "b1-vm-a")
        status = daemon.wait_phase("Backup", "b1", *ENDED)["status"]
    assert status["phase"] == "Failed", status
    [volume] = status["volumes"]
    assert volume["phase"] == "Failed"
    assert volume["reason"] == "DataUpload b1-vm-a was deleted"
    assert status["progress"]["itemsFailed"] == 1


def test_a_restore_whose_download_is_deleted_fails_naming_it(daemon, tmp_path):
    create(daemon, "Backup", "b1", {"storageLocation": "repo"})
    assert daemon.wait_phase("Backup", "b1", *ENDED)["status"]["phase"] == "Completed"
    with repository_held(tmp_path / "backups"):
        spec = {"backupName": "b1", "namespaceMapping": {"default": "restored"}}
        create(daemon, "Restore", "r1", spec)
        daemon.wait_phase("DataDownload", "r1-vm-a-vd-a", "InProgress")
        delete(daemon, "DataDownload", "r1-vm-a-vd-a")
        status = daemon.wait_phase("Restore", "r1", *ENDED)["status"]
    assert status["phase"] == "Failed", status
    [machine] = status["virtualMachines"]
    assert machine["phase"] == "Failed"
    [disk] = machine["disks"]
    assert disk["phase"] == "Failed"
    assert disk["message"] == "DataDownload r1-vm-a-vd-a was deleted"
    wait_until(
        lambda: any(
            "DataDownload r1-vm-a-vd-a was deleted" in e["message"] for e in daemon.events("r1")
        )
    )
