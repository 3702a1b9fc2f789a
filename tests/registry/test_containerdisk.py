"""containerDisks: what diskferry pushes skopeo and KubeVirt read; what skopeo pushes imports."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
from layouts import layer_tar, make_layout


def _push(diskferry, source, ref: str, *options: str) -> dict:
    result = diskferry("image", "push", source, ref, "--insecure", "--json", *options)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


def test_a_pushed_disk_is_one_tar_layer_kubevirt_reads(diskferry, registry, images, tmp_path):
    ref = registry.ref("disks/reference:v1")
    pushed = _push(diskferry, images.get("qcow2"), ref)
    assert pushed["format"] == "qcow2"
    assert pushed["unpackedSize"] == images.disk_size
    manifest = json.loads(registry.skopeo("inspect", "--raw", ref).stdout)
    [layer] = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
    assert manifest["annotations"]["io.diskferry.disk.format"] == "qcow2"
    assert manifest["annotations"]["io.diskferry.disk.unpacked-size"] == str(images.disk_size)
    assert int(manifest["annotations"]["io.diskferry.disk.stored-size"]) == pushed["storedSize"]
    layout = tmp_path / "layout"
    registry.skopeo("copy", ref, f"oci:{layout}:copied")
    with tarfile.open(_layout_layer(layout)) as tar:
        members = tar.getmembers()
        assert [(m.name, m.type, m.uid, m.gid) for m in members] == [
            ("disk", tarfile.DIRTYPE, 107, 107),
            ("disk/disk.qcow2", tarfile.REGTYPE, 107, 107),
        ]
        disk = tmp_path / "disk.qcow2"
        disk.write_bytes(tar.extractfile(members[1]).read())
    info = json.loads(subprocess.check_output(["qemu-img", "info", "--output=json", str(disk)]))
    assert info["format"] == "qcow2" and "backing-filename" not in info
    assert images.same(images.reference, disk)
    # and back through skopeo into the registry: diskferry pulls what skopeo pushed
    back = registry.ref("disks/copied:v2")
    registry.skopeo("copy", f"oci:{layout}:copied", back)
    target = tmp_path / "pulled.raw"
    result = diskferry("image", "pull", back, target, "--insecure", "--no-progress", "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["sourceFormat"] == "qcow2"
    assert images.same(images.reference, target)
    assert images.leftovers(tmp_path) == []
    # and by digest, as the push named it
    assert pushed["reference"].endswith(f"@{pushed['digest']}")
    by_digest = tmp_path / "by-digest.raw"
    result = diskferry("import", pushed["reference"], by_digest, "--insecure", "--no-progress")
    assert result.code == 0, result.stderr
    assert images.same(images.reference, by_digest)


def _layout_layer(layout: Path) -> Path:
    """The one layer of the one image in an OCI layout (skopeo may have compressed it)."""
    blobs = layout / "blobs" / "sha256"
    [entry] = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = json.loads((blobs / entry["digest"].split(":")[1]).read_text())
    [layer] = manifest["layers"]
    return blobs / layer["digest"].split(":")[1]


@pytest.mark.parametrize(
    ("source", "option", "stored"),
    [
        ("raw", None, "raw"),
        ("qcow2", None, "qcow2"),
        ("vmdk", None, "qcow2"),
        ("qcow2", "raw", "raw"),
    ],
)
def test_push_keeps_raw_and_qcow2_and_converts_the_rest(
    diskferry, registry, images, tmp_path, source, option, stored
):
    ref = registry.ref(f"disks/format-{source}-{option or 'same'}:v1")
    pushed = _push(diskferry, images.get(source), ref, *(["--format", option] if option else []))
    assert pushed["format"] == stored
    target = tmp_path / "out.qcow2"
    result = diskferry(
        "image",
        "pull",
        ref,
        target,
        "--insecure",
        "--no-progress",
        "--format",
        "qcow2",
        "--size",
        "64M",
    )
    assert result.code == 0, result.stderr
    info = json.loads(subprocess.check_output(["qemu-img", "info", "--output=json", str(target)]))
    assert info["format"] == "qcow2"
    assert info["virtual-size"] == 64 << 20
    assert images.same(images.reference, target)  # the grown tail reads as zeros


@pytest.mark.parametrize("compression", [None, "gzip", "zstd", "xz"], ids=lambda c: c or "plain")
@pytest.mark.parametrize("uid", [107, 64535], ids=["kubevirt", "deckhouse"])
def test_images_skopeo_pushed_import(diskferry, registry, images, tmp_path, compression, uid):
    # FROM scratch / ADD disk.qcow2 /disk/, as KubeVirt's containerDisk docs build one
    tar = layer_tar([("disk", None), ("disk/disk.qcow2", images.get("qcow2"))], uid=uid)
    make_layout(tmp_path / "layout", tar, compression)
    ref = registry.ref(f"disks/built-{compression or 'plain'}-{uid}:v1")
    registry.skopeo("copy", f"oci:{tmp_path / 'layout'}:v1", ref)
    target = tmp_path / "disk.raw"
    result = diskferry("import", ref, target, "--insecure", "--no-progress", "--json")
    assert result.code == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["digest"].startswith("sha256:")
    assert images.same(images.reference, target)
    assert images.leftovers(tmp_path) == []


def test_a_raw_disk_streams_into_a_raw_target(diskferry, registry, images, tmp_path):
    tar = layer_tar([("./disk/", None), ("./disk/root.img", images.reference)])
    make_layout(tmp_path / "layout", tar, "gzip")
    ref = registry.ref("disks/raw-gzip:v1")
    registry.skopeo("copy", f"oci:{tmp_path / 'layout'}:v1", ref)
    target = tmp_path / "disk.raw"
    result = diskferry("import", ref, target, "--insecure", "--no-progress", "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["sourceFormat"] == "raw"
    assert images.same(images.reference, target)
    assert images.allocated(target) <= images.data_bytes + 512 * 1024


def _skopeo_push(registry, tmp_path: Path, name: str, entries) -> str:
    make_layout(tmp_path / name, layer_tar(entries), "gzip")
    ref = registry.ref(f"disks/{name}:v1")
    registry.skopeo("copy", f"oci:{tmp_path / name}:v1", ref)
    return ref


def test_an_image_of_two_disks_is_refused(registry, images, refuse, tmp_path):
    disk = images.get("qcow2")
    ref = _skopeo_push(
        registry, tmp_path, "two", [("disk", None), ("disk/a.qcow2", disk), ("disk/b.qcow2", disk)]
    )
    error = refuse(ref, "--insecure")
    assert "more than one disk under disk/" in error
    assert "disk/a.qcow2" in error and "disk/b.qcow2" in error


def test_an_image_without_a_disk_is_refused(registry, images, refuse, tmp_path):
    ref = _skopeo_push(
        registry, tmp_path, "nodisk", [("etc", None), ("etc/disk.qcow2", images.get("qcow2"))]
    )
    error = refuse(ref, "--insecure")
    assert "no disk file under disk/" in error
    assert "etc/disk.qcow2" in error


def test_a_corrupted_layer_is_refused_by_digest(diskferry, registry, images, refuse, tmp_path):
    ref = registry.ref("disks/corrupt:v1")
    pushed = _push(diskferry, images.reference, ref)
    digest = pushed["layerDigest"].split(":")[1]
    [data] = registry.storage.glob(f"docker/registry/v2/blobs/sha256/{digest[:2]}/{digest}/data")
    with open(data, "r+b") as f:
        f.seek(1 << 20)
        byte = f.read(1)
        f.seek(1 << 20)
        f.write(bytes([byte[0] ^ 0xFF]))
    error = refuse(ref, "--insecure")
    assert f"@sha256:{digest}" in error
    assert "hashes to" in error


def test_an_unknown_image_is_one_line(registry, refuse):
    error = refuse(registry.ref("disks/absent:v1"), "--insecure")
    assert error == f"{registry.ref('disks/absent:v1')}: manifest unknown (MANIFEST_UNKNOWN)"


def test_progress_counts_layer_bytes_and_the_result_names_the_digest(registry, images, tmp_path):
    from diskferry.disk.progress import Progress
    from diskferry.importer.engine import run_import
    from diskferry.importer.job import ImportJob

    tar = layer_tar([("disk", None), ("disk/disk.qcow2", images.get("qcow2"))])
    make_layout(tmp_path / "layout", tar, "zstd")
    ref = registry.ref("disks/progress:v1")
    registry.skopeo("copy", f"oci:{tmp_path / 'layout'}:v1", ref)
    raw = registry.skopeo("inspect", "--raw", ref).stdout.encode()
    manifest = json.loads(raw)
    progress = Progress()
    job = ImportJob(source=ref, target=str(tmp_path / "disk.raw"), insecure=True)
    result = run_import(job, progress)
    assert result.digest == f"sha256:{hashlib.sha256(raw).hexdigest()}"
    assert progress.done >= manifest["layers"][0]["size"]
    assert progress.percent == 100.0


def test_a_malformed_reference_is_a_usage_error(diskferry, tmp_path):
    result = diskferry("image", "pull", "docker://reg.example/Bad:v1", tmp_path / "x.raw")
    assert result.code == 2
    assert "is not a repository name" in result.error
    assert not (tmp_path / "x.raw").exists()


def test_an_oci_layout_imports(diskferry, images, tmp_path):
    tar = layer_tar([("disk", None), ("disk/disk.qcow2", images.get("qcow2"))])
    make_layout(tmp_path / "layout", tar, "gzip", tag="v7")
    target = tmp_path / "disk.raw"
    result = diskferry("import", f"oci:{tmp_path / 'layout'}:v7", target, "--no-progress", "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["digest"].startswith("sha256:")
    assert images.same(images.reference, target)
    absent = diskferry("import", f"oci:{tmp_path / 'layout'}:v8", target, "--no-progress")
    assert absent.code == 1
    layout = tmp_path / "layout"
    assert absent.error == f"oci:{layout}: no image tagged 'v8' (the layout has v7)"


def test_a_layout_skopeo_wrote_imports(diskferry, registry, images, tmp_path):
    ref = registry.ref("disks/to-layout:v1")
    _push(diskferry, images.get("qcow2"), ref)
    registry.skopeo("copy", ref, f"oci:{tmp_path / 'layout'}:disk")
    target = tmp_path / "disk.raw"
    result = diskferry("import", f"oci:{tmp_path / 'layout'}:disk", target, "--no-progress")
    assert result.code == 0, result.stderr
    assert images.same(images.reference, target)


def test_push_takes_a_containerdisk_as_its_source(diskferry, registry, images, tmp_path):
    first = registry.ref("disks/source:v1")
    _push(diskferry, images.get("qcow2"), first)
    copied = _push(diskferry, first, registry.ref("disks/copy-of-source:v1"))
    assert copied["format"] == "qcow2"
    target = tmp_path / "disk.raw"
    result = diskferry("import", registry.ref("disks/copy-of-source:v1"), target, "--insecure")
    assert result.code == 0, result.stderr
    assert images.same(images.reference, target)


def test_push_into_an_oci_layout_that_skopeo_reads(diskferry, registry, images, tmp_path):
    layout = tmp_path / "store"
    pushed = _push(diskferry, images.get("qcow2"), f"oci:{layout}:fedora")
    assert pushed["reference"] == f"oci:{layout}@{pushed['digest']}"
    again = _push(diskferry, images.reference, f"oci:{layout}:raw")
    assert again["format"] == "raw"
    inspected = json.loads(registry.skopeo("inspect", "--raw", f"oci:{layout}:fedora").stdout)
    assert [layer["mediaType"] for layer in inspected["layers"]] == [
        "application/vnd.oci.image.layer.v1.tar"
    ]
    ref = registry.ref("disks/from-layout:v1")
    registry.skopeo("copy", f"oci:{layout}:fedora", ref)
    for n, source in enumerate((f"oci:{layout}:fedora", ref)):
        target = tmp_path / f"disk-{n}.raw"
        result = diskferry("import", source, target, "--insecure", "--no-progress")
        assert result.code == 0, result.stderr
        assert images.same(images.reference, target)
    assert [p.name for p in (layout / "blobs" / "sha256").iterdir() if p.name.startswith(".")] == []
    shown = diskferry("image", "inspect", f"oci:{layout}:raw", "--json")
    assert shown.code == 0, shown.stderr
    assert json.loads(shown.stdout)["annotations"]["io.diskferry.disk.format"] == "raw"
