"""`diskferry import` and `diskferry info` end to end, as a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from diskferry.disk.sizes import format_size


def one_json(stdout: str) -> dict:
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


def qemu_info(path) -> dict:
    out = subprocess.run(
        ["qemu-img", "info", "--output=json", str(path)], capture_output=True, check=True
    )
    return json.loads(out.stdout)


def test_import_json_result(diskferry, images, tmp_path):
    source = images.get("qcow2", "gzip")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    target = tmp_path / "disk.raw"
    result = diskferry("import", source, target, "--checksum", f"sha256:{digest}", "--json")
    assert result.code == 0, result.stderr
    out = one_json(result.stdout)
    assert out["bytesRead"] == source.stat().st_size
    assert 0 < out["bytesWritten"] <= images.data_bytes + 512 * 1024
    assert out["seconds"] > 0
    # seconds are rounded to milliseconds, the speed is not
    speed = out["bytesRead"] / out["seconds"]
    assert out["averageSpeed"] == pytest.approx(speed, rel=0.001 / out["seconds"])
    assert out["format"] == "raw"
    assert out["sourceFormat"] == "qcow2"
    assert out["compression"] == "gzip"
    assert out["virtualSize"] == images.disk_size
    assert out["checksum"] == f"sha256:{digest}"
    assert out["target"] == str(target)
    assert out["resumes"] == 0
    assert images.same(images.reference, target)


def test_import_with_force_replaces_an_existing_file_and_says_what_it_did(
    diskferry, images, tmp_path
):
    target = tmp_path / "disk.raw"
    target.write_bytes(b"old" * 1000)
    result = diskferry("import", images.get("vmdk", "xz"), target, "--no-progress", "--force")
    assert result.code == 0, result.stderr
    assert result.stdout == ""
    said = f"diskferry: imported vmdk+xz into {target} (raw, {format_size(images.disk_size)}) in "
    assert result.stderr.startswith(said)
    assert result.stderr.endswith(" s\n")
    assert images.same(images.reference, target)
    assert images.leftovers(tmp_path) == []


@pytest.mark.parametrize("fmt", ["raw", "vdi"])
def test_import_to_qcow2_grown_to_a_size(diskferry, images, tmp_path, fmt):
    target = tmp_path / "disk.qcow2"
    result = diskferry(
        "import", images.get(fmt), target, "--format", "qcow2", "--size", "64Mi", "--json"
    )
    assert result.code == 0, result.stderr
    out = one_json(result.stdout)
    assert out["format"] == "qcow2"
    assert out["virtualSize"] == 64 << 20
    info = qemu_info(target)
    assert info["format"] == "qcow2"
    assert info["virtual-size"] == 64 << 20
    assert images.same(images.reference, target)


@pytest.mark.parametrize("compression", [None, "bzip2"])
def test_raw_import_grown_to_a_size(diskferry, images, tmp_path, compression):
    target = tmp_path / "disk.raw"
    result = diskferry("import", images.get("raw", compression), target, "--size", "48M", "--json")
    assert result.code == 0, result.stderr
    assert one_json(result.stdout)["virtualSize"] == 48 << 20
    assert os.path.getsize(target) == 48 << 20
    assert images.same(images.reference, target)
    assert images.allocated(target) <= images.data_bytes + 512 * 1024


def test_exit_codes(diskferry, images, tmp_path):
    assert diskferry("import", images.get("raw"), tmp_path / "a.raw").code == 0
    failed = diskferry("import", tmp_path / "missing", tmp_path / "b.raw")
    assert failed.code == 1
    assert failed.stderr.startswith("diskferry: error: cannot open")
    assert diskferry("import", images.get("raw"), tmp_path / "c.raw", "--size", "x").code == 2
    assert not (tmp_path / "b.raw").exists()
    assert not (tmp_path / "c.raw").exists()


def test_target_in_a_missing_directory(diskferry, images, tmp_path):
    result = diskferry("import", images.get("raw"), tmp_path / "no" / "disk.raw")
    assert result.code == 1
    assert result.error == f"the directory of the target, {tmp_path / 'no'}, does not exist"


def info(diskferry, image, *options) -> dict:
    result = diskferry("info", image, "--json", *options)
    assert result.code == 0, result.stderr
    return one_json(result.stdout)


@pytest.mark.parametrize("fmt", ["raw", "qcow2", "vmdk", "vhd", "vhdx", "vdi"])
def test_info_of_a_local_image(diskferry, images, fmt):
    path = images.get(fmt)
    out = info(diskferry, path)
    assert out["format"] == fmt
    assert out["compression"] is None
    assert out["virtualSize"] >= images.disk_size
    assert out["allocatedSize"] == images.allocated(path)
    assert out["backingFile"] is None


def test_info_names_the_backing_file(diskferry, images, tmp_path):
    top = tmp_path / "top.qcow2"
    backing = ["-b", str(images.reference), "-F", "raw"]
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", *backing, str(top)], check=True)
    out = info(diskferry, top)
    assert out["backingFile"] == str(images.reference)
    assert out["virtualSize"] == images.disk_size


def test_info_of_a_compressed_qcow2_reads_its_header(diskferry, images):
    out = info(diskferry, images.get("qcow2", "zstd"))
    assert out["format"] == "qcow2"
    assert out["compression"] == "zstd"
    assert out["virtualSize"] == images.disk_size
    assert out["backingFile"] is None


def test_info_over_http(diskferry, images, nginx):
    raw = info(diskferry, nginx.publish(images.get("raw")))
    assert (raw["format"], raw["virtualSize"]) == ("raw", images.disk_size)
    packed = info(diskferry, nginx.publish(images.get("qcow2", "gzip")))
    assert (packed["format"], packed["compression"]) == ("qcow2", "gzip")
    assert packed["virtualSize"] == images.disk_size


def test_info_as_text(diskferry, images):
    result = diskferry("info", images.get("qcow2"))
    assert result.code == 0
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert lines["format"] == "qcow2"
    assert lines["virtualSize"] == format_size(images.disk_size)
    assert lines["backingFile"] == "-"


def test_info_of_a_missing_file(diskferry, tmp_path):
    result = diskferry("info", tmp_path / "nothing")
    assert result.code == 1
    assert result.error == f"cannot open {tmp_path / 'nothing'}: No such file or directory"


def test_info_names_a_vmdk_extent_in_another_file(diskferry, tmp_path):
    flat = tmp_path / "flat.raw"
    flat.write_bytes(bytes(1 << 20))
    descriptor = tmp_path / "disk.vmdk"
    descriptor.write_text(
        "# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\n"
        'createType="monolithicFlat"\nRW 2048 FLAT "flat.raw" 0\n'
    )
    out = info(diskferry, descriptor)
    assert out["format"] == "vmdk"
    assert out["dataFile"] == str(flat)


def test_info_over_https_with_a_ca_bundle_and_headers(diskferry, images, faulty_tls, tls):
    url = faulty_tls.add("disk.qcow2", images.get("qcow2"))
    out = info(diskferry, url, "--ca-bundle", tls.ca, "--header", "X-Token: t1")
    assert (out["format"], out["virtualSize"]) == ("qcow2", images.disk_size)
    assert faulty_tls.seen("disk.qcow2")[0]["X-Token"] == "t1"
    refused = diskferry("info", url)
    assert refused.code == 1
    assert refused.error.startswith(f"{url}: TLS verification failed: ")


def test_info_tells_a_fixed_vhd_from_raw(diskferry, images, tmp_path):
    vhd = tmp_path / "fixed.vhd"
    args = ["-f", "raw", "-O", "vpc", "-o", "subformat=fixed", str(images.reference), str(vhd)]
    subprocess.run(["qemu-img", "convert", *args], check=True)
    out = info(diskferry, vhd)
    assert out["format"] == "vhd"
    assert out["virtualSize"] == vhd.stat().st_size - 512


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["import"], "Missing argument 'source'."),
        (["import", "a", "b", "--bogus"], "No such option: --bogus"),
        (["import", "a", "b", "--header", "bad"], "header 'bad' is not 'Name: value'"),
        (["info"], "Missing argument 'image'."),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(diskferry, args, said):
    result = diskferry(*args)
    assert result.code == 2
    assert said in result.error
    assert result.stdout == ""
