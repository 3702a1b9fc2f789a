"""The image `make image` builds: its labels and entrypoint, its non-root user, and a worker in
it converting a disk on a host folder with the Debian tools the image carries."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

from image_support import ENV, ROOT, podman

import diskferry

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
    assert labels["org.opencontainers.image.source"].startswith("https://")
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
