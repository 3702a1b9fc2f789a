"""The image `make image` builds: its labels and entrypoint, its non-root user, a worker in it
converting a disk on a host folder with the Debian tools the image carries, and the export
proxy serving in it as deploy/ runs it."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import time
import tomllib
import urllib.error
import urllib.request

import pytest
import yaml
from image_support import BUILD_SECONDS, ENV, ROOT, podman

import diskferry

# the first test to ask for the image waits for its build, within its own timeout
pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 300)]

# what the restricted Pod Security profile leaves a container, as deploy/ asks for it
RESTRICTED = ["--read-only", "--cap-drop", "all", "--security-opt", "no-new-privileges"]


def _skopeo_config(archive: str) -> dict:
    proc = subprocess.run(
        ["skopeo", "inspect", "--config", f"oci-archive:{archive}"],
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)["config"]


def test_the_archive_names_its_source_version_revision_and_entrypoint(built):
    config = _skopeo_config(built.archive)
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == diskferry.__version__
    assert labels["org.opencontainers.image.revision"].removesuffix("-dirty") == head
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert labels["org.opencontainers.image.source"] == project["urls"]["Source"]
    assert config["Entrypoint"] == ["diskferry"]
    user, group = config["User"].split(":")
    assert int(user) != 0 and int(group) != 0
    assert built.name == f"localhost/diskferry:{diskferry.__version__}"
    assert os.path.basename(built.archive) == f"diskferry-{diskferry.__version__}.oci.tar"


def test_the_image_prints_its_version_as_a_user_other_than_root(built):
    run = ["run", "--rm", "--network", "host", *RESTRICTED]
    assert podman(*run, built.name, "--version").stdout == f"diskferry {diskferry.__version__}\n"
    assert podman(*run, "--entrypoint", "id", built.name, "-u").stdout.strip() != "0"


def test_an_import_worker_in_the_image_converts_a_qcow2_on_a_host_folder(built, images, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(images.get("qcow2"), data / "disk.qcow2")
    job = {"jobId": "in-image", "source": "/data/disk.qcow2", "target": "/data/disk.raw"}
    (data / "job.json").write_text(json.dumps(job))
    uid, gid = map(int, _skopeo_config(built.archive)["User"].split(":"))
    for path in (data, *data.iterdir()):
        os.chown(path, uid, gid)
    proc = podman(
        *("run", "--rm", "--network", "host", *RESTRICTED, "--volume", f"{data}:/data"),
        *("--entrypoint", "python", built.name, "-m", "diskferry.importer.worker"),
        "/data/job.json",
        timeout=300,
    )
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["sourceFormat"] == "qcow2"
    assert result["target"] == "/data/disk.raw"
    assert images.same(data / "disk.raw", images.reference)
    assert os.stat(data / "disk.raw").st_uid == uid


# the programs the workers run (qemu-img, qemu-nbd, qemu-storage-daemon) and what they run
# them under or with (setpriv, prlimit, sh, cp --reflink)
WORKER_PROGRAMS = ("qemu-img", "qemu-nbd", "qemu-storage-daemon", "setpriv", "prlimit", "sh", "cp")
IMPORT_WORKERS = """
import importlib, pkgutil, shutil, sys, diskferry
workers = [m.name for m in pkgutil.walk_packages(diskferry.__path__, "diskferry.")
           if m.name.endswith(".worker")]
for name in workers:
    importlib.import_module(name)
print(" ".join(workers))
print(" ".join(p for p in sys.argv[1:] if shutil.which(p) is None))
"""


def test_the_image_carries_every_worker_and_the_programs_they_run(built):
    proc = podman(
        *("run", "--rm", "--network", "host", *RESTRICTED, "--entrypoint", "python"),
        *(built.name, "-c", IMPORT_WORKERS, *WORKER_PROGRAMS),
    )
    workers, missing = proc.stdout.split("\n")[:2]
    engines = {"diskferry.importer.worker", "diskferry.export.worker", "diskferry.backup.worker"}
    assert engines <= set(workers.split())
    assert missing == ""


S3_CLIENT = """
from diskferry.objstore.store import ObjectStore, S3Options
ObjectStore("s3://bucket/prefix", S3Options(endpoint="http://127.0.0.1:9", access_key_id="k",
            secret_access_key="s"))
print("made")
"""


def test_a_backup_worker_in_the_image_makes_its_s3_client(built):
    proc = podman(
        *("run", "--rm", "--network", "host", *RESTRICTED, "--entrypoint", "python"),
        *(built.name, "-c", S3_CLIENT),
    )
    assert proc.stdout.strip() == "made"


def _proxy_container() -> dict:
    """The export proxy's container as `kubectl kustomize deploy/` gives it, with its volumes."""
    proc = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "deploy")], capture_output=True, text=True, check=True
    )
    [proxy] = [
        doc
        for doc in yaml.safe_load_all(proc.stdout)
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "diskferry-export-proxy"
    ]
    [container] = proxy["spec"]["template"]["spec"]["containers"]
    return container


def _port_printed(name: str) -> int:
    """The port the container `name` printed on its first stdout line (it was given port 0)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        logs = podman("logs", name)
        first = logs.stdout.split("\n", 1)[0]
        if first.isdigit():
            return int(first)
        assert podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip() == "true", (
            logs.stderr
        )
        time.sleep(0.2)
    raise AssertionError(f"the proxy printed no port: {logs.stderr}")


def test_the_export_proxy_serves_in_the_image_as_deploy_runs_it(built, tls, tmp_path):
    container = _proxy_container()
    uid, gid = map(int, _skopeo_config(built.archive)["User"].split(":"))
    mounts = []
    for mount in container["volumeMounts"]:
        if mount["mountPath"] == "/tmp":
            mounts += ["--tmpfs", "/tmp"]
            continue
        folder = tmp_path / mount["name"]
        folder.mkdir()
        mounts += ["--volume", f"{folder}:{mount['mountPath']}:ro"]
    shutil.copyfile(tls.cert, tmp_path / "tls" / "tls.crt")
    shutil.copyfile(tls.key, tmp_path / "tls" / "tls.key")
    shutil.copyfile(tls.ca, tmp_path / "tls" / "ca.crt")
    for path in tmp_path.rglob("*"):
        os.chown(path, uid, gid)
    # its own port on the host's network instead of 8443
    args = ["--port=0" if arg.startswith("--port=") else arg for arg in container["args"]]
    name = f"diskferry-proxy-{os.getpid()}"
    podman(
        *("run", "--detach", "--name", name, "--network", "host", *RESTRICTED, *mounts),
        *(container["image"], *args),
    )
    try:
        port = _port_printed(name)
        context = ssl.create_default_context(cafile=str(tls.ca))
        # a name no export has, which no Service's name is looked up for
        path = "/api/export.kubevirt.io/v1/namespaces/ns/virtualmachineexports/No_One/volumes/v"
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(f"https://127.0.0.1:{port}{path}/disk.img", context=context)
        assert answer.value.code == 404
    finally:
        logs = podman("logs", name).stderr
        podman("rm", "--force", name)
    assert "Traceback" not in logs, logs
