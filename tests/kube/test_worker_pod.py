"""A worker Pod's root is read-only: what its worker writes of its own (temporary files, its
runtime sockets, a repository's index cache) goes to the Pod's scratch folder, which its
environment names; its outputs go to its log, tagged with the key its environment names in the
job's folder (never the key itself)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diskferry.backup.index_cache import cache_root
from diskferry.kube.pods import JOB_FOLDER, OUTPUT_KEY, worker_pod
from diskferry.worker.output import OUTPUT_KEY_ENV

WRITERS = ("TMPDIR", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME")


def test_what_a_worker_writes_goes_to_its_scratch(monkeypatch: pytest.MonkeyPatch) -> None:
    pod = worker_pod("bk-1", "default", "diskferry.backup.worker", "image", [], None)
    [container] = pod["spec"]["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    [scratch] = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "scratch"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert {name: env.get(name) for name in WRITERS} == dict.fromkeys(WRITERS, scratch)
    monkeypatch.delenv("DISKFERRY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", env["XDG_CACHE_HOME"])
    assert cache_root().is_relative_to(Path(scratch))


def test_a_worker_s_outputs_are_tagged_with_the_key_in_its_job_folder() -> None:
    pod = worker_pod("bk-2", "default", "diskferry.backup.worker", "image", [], None)
    [container] = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[OUTPUT_KEY_ENV] == f"{JOB_FOLDER}/{OUTPUT_KEY}"
    [job] = [m for m in container["volumeMounts"] if m["mountPath"] == JOB_FOLDER]
    assert job["readOnly"] is True
