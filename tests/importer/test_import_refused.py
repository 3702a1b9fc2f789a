"""Inputs an import refuses: one clear error line, exit code, the target untouched."""

from __future__ import annotations

import subprocess

import pytest

from diskferry.disk.formats import COMPRESSIONS


def qemu_img(*args: object) -> None:
    subprocess.run(["qemu-img", *map(str, args)], check=True, capture_output=True)


@pytest.fixture
def with_backing(images, tmp_path):
    path = tmp_path / "overlay.qcow2"
    qemu_img("create", "-f", "qcow2", "-b", images.reference, "-F", "raw", path)
    return path


@pytest.fixture
def with_data_file(tmp_path):
    path = tmp_path / "external.qcow2"
    qemu_img("create", "-f", "qcow2", "-o", f"data_file={tmp_path / 'data.raw'}", path, "32M")
    return path


@pytest.fixture(scope="module")
def encrypted(tmp_path_factory):
    path = tmp_path_factory.mktemp("luks") / "luks.qcow2"
    secret = "encrypt.format=luks,encrypt.key-secret=s0,encrypt.iter-time=10"
    args = ["create", "-f", "qcow2", "--object", "secret,id=s0,data=pw", "-o", secret]
    # qemu-img times its key derivation by CPU time, which now and then reads as zero here
    for _ in range(5):
        proc = subprocess.run(["qemu-img", *args, str(path), "32M"], capture_output=True)
        if proc.returncode == 0:
            return path
    raise AssertionError(proc.stderr)


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_backing_file_is_refused(refuse, images, with_backing, compression):
    source = images.compress(with_backing, compression) if compression else with_backing
    error = refuse(source)
    assert error == f"the image names a backing file ({images.reference}); refusing it"


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_external_data_file_is_refused(refuse, images, with_data_file, compression):
    source = images.compress(with_data_file, compression) if compression else with_data_file
    error = refuse(source)
    assert error.startswith("the image names an external data file (")
    assert "data.raw" in error


@pytest.mark.parametrize("compression", [None, "xz"])
def test_encrypted_image_is_refused(refuse, images, encrypted, compression):
    source = images.compress(encrypted, compression) if compression else encrypted
    assert refuse(source) == "the image is encrypted; diskferry imports unencrypted images"


@pytest.mark.parametrize("kind", COMPRESSIONS)
def test_corrupt_compressed_stream_is_refused(refuse, images, tmp_path, kind):
    good = images.get("qcow2", kind).read_bytes()
    # keep the magic, break what follows
    bad = tmp_path / f"corrupt.{kind}"
    bad.write_bytes(good[:6] + bytes(b ^ 0x5A for b in good[6:4096]) + good[4096:])
    error = refuse(bad)
    assert kind in error
    assert "corrupt" in error


def test_qcow2_of_an_unknown_version_is_refused(refuse, images, tmp_path):
    bad = tmp_path / "v9.qcow2"
    data = bytearray(images.get("qcow2").read_bytes()[: 1 << 20])
    data[4:8] = (9).to_bytes(4, "big")
    bad.write_bytes(data)
    assert refuse(bad) == "qcow2 version 9 is not supported"


@pytest.mark.parametrize(
    ("magic", "fmt", "why"),
    [
        (b"KDMV", "vmdk", "Unsupported VMDK version"),
        (b"vhdxfile", "vhdx", "No valid VHDX header found"),
        (b"conectix", "vhd", "Incorrect header checksum"),
    ],
)
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_garbage_behind_an_image_magic_is_refused(
    refuse, images, tmp_path, magic, fmt, why, compression
):
    bad = tmp_path / f"garbage.{fmt}"
    bad.write_bytes(magic + bytes(range(1, 256)) * 1200)
    source = images.compress(bad, compression) if compression else bad
    error = refuse(source)
    assert error.startswith(f"{source} is not a readable {fmt} image ({why}")
    assert error.endswith("); refusing it")


@pytest.mark.parametrize("fmt", ["raw", "qcow2"])
def test_checksum_mismatch_is_refused(refuse, images, fmt):
    wrong = "sha256:" + "0" * 64
    source = images.get(fmt, "gzip")
    error = refuse(source, "--checksum", wrong)
    assert error.startswith(f"{source}: sha256 checksum mismatch: expected {'0' * 64}, got ")


@pytest.mark.parametrize("spec", ["sha256:abc", "md4:" + "0" * 32, "nothing"])
def test_malformed_checksum_is_bad_usage(refuse, images, spec):
    error = refuse(images.reference, "--checksum", spec, code=2)
    assert "--checksum" in error


@pytest.mark.parametrize("option", [("--size", "12Q"), ("--size", "1.5"), ("--format", "vmdk")])
def test_bad_option_is_bad_usage(refuse, images, option):
    error = refuse(images.reference, *option, code=2)
    assert option[0] in error or option[1] in error


@pytest.mark.parametrize("fmt", ["raw", "qcow2"])
def test_size_below_the_virtual_size_is_refused(refuse, images, fmt):
    error = refuse(images.get(fmt), "--size", "1M")
    assert error == (
        f"--size 1048576 is smaller than the image's virtual size ({images.disk_size} bytes)"
    )


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_virtual_size_beyond_the_free_space_is_refused(refuse, images, tmp_path, compression):
    huge = tmp_path / "huge.qcow2"
    qemu_img("create", "-f", "qcow2", huge, "100T")
    error = refuse(images.compress(huge, compression) if compression else huge)
    assert error.startswith("the image's virtual size (109951162777600 bytes) is larger than")
    assert f"the free space in {tmp_path / 'out'}" in error


def test_stream_past_the_declared_qcow2_size_is_a_bomb(refuse, images, tmp_path):
    bomb = tmp_path / "bomb.qcow2"
    qemu_img("create", "-f", "qcow2", bomb, "1M")
    with open(bomb, "ab") as f:
        f.truncate(64 << 20)
    error = refuse(images.compress(bomb, "gzip"))
    assert error == (
        "the decompressed image grows past its declared virtual size, 1048576 bytes; "
        "refusing it (a decompression bomb?)"
    )


def test_stream_past_the_requested_size_is_a_bomb(refuse, images):
    error = refuse(images.get("raw", "zstd"), "--size", "8M")
    assert error == (
        "the decompressed image grows past the requested --size, 8388608 bytes; "
        "refusing it (a decompression bomb?)"
    )


@pytest.mark.parametrize("kind", COMPRESSIONS)
@pytest.mark.parametrize("fmt", ["raw", "qcow2"])
def test_truncated_compressed_stream_is_refused(refuse, images, tmp_path, fmt, kind):
    whole = images.get(fmt, kind).read_bytes()
    cut = tmp_path / f"cut.{kind}"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    assert refuse(cut) == f"the {kind} stream ends in the middle (truncated)"


def test_missing_source_is_refused(refuse, tmp_path):
    error = refuse(tmp_path / "nowhere.img")
    assert error == f"cannot open {tmp_path / 'nowhere.img'}: No such file or directory"


@pytest.mark.parametrize(
    ("fmt", "found"),
    [("qcow2", "qemu-img check found "), ("vmdk", "points after EOF")],
)
def test_truncated_image_file_is_refused(refuse, images, nginx, tmp_path, fmt, found):
    whole = images.get(fmt).read_bytes()
    cut = tmp_path / f"cut.{fmt}"
    cut.write_bytes(whole[: len(whole) // 2])
    for source in (cut, nginx.publish(cut, f"cut-{tmp_path.name}.{fmt}")):
        error = refuse(source)
        assert error.startswith("the image is damaged or truncated (")
        assert found in error


VMDK_DESCRIPTOR = """# Disk DescriptorFile
version=1
CID=fffffffe
parentCID=ffffffff
createType="monolithicFlat"

RW 2048 FLAT "{extent}" 0

ddb.adapterType = "ide"
"""


@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize("absolute", [True, False])
def test_vmdk_naming_another_file_as_its_extent_is_refused(
    refuse, images, tmp_path, compression, absolute
):
    secret = tmp_path / "host-secret"
    secret.write_bytes(b"not for the disk\n" * 100)
    extent = str(secret) if absolute else secret.name
    descriptor = tmp_path / "flat.vmdk"
    descriptor.write_text(VMDK_DESCRIPTOR.format(extent=extent))
    source = images.compress(descriptor, compression) if compression else descriptor
    assert refuse(source) == (
        "the image is a VMDK descriptor that keeps its data in other files; refusing it"
    )
