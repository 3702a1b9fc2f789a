"""Probing compressions and image formats from their first bytes, and the qcow2 header."""

from __future__ import annotations

import bz2
import gzip
import lzma
import subprocess

import pytest
import zstandard

from diskferry.disk.file_volume import FileVolume
from diskferry.disk.formats import (
    FORMATS,
    PROBE_BYTES,
    VHD_FOOTER,
    FormatError,
    fixed_vhd_size,
    is_vmdk_descriptor,
    parse_qcow2_header,
    probe_compression,
    probe_format,
    read_fixed_vhd_size,
)

COMPRESS = {
    "gzip": gzip.compress,
    "xz": lzma.compress,
    "zstd": zstandard.ZstdCompressor().compress,
    "bzip2": bz2.compress,
}


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_compression_is_probed_from_its_magic(kind):
    assert probe_compression(COMPRESS[kind](b"some disk")[:8]) == kind


@pytest.mark.parametrize("head", [b"", b"\x1f", b"BZh", b"BZhx....", b"QFI\xfb", bytes(8)])
def test_no_compression(head):
    assert probe_compression(head) is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_image_format_is_probed_from_its_head(images, fmt):
    with open(images.get(fmt), "rb") as f:
        assert probe_format(f.read(PROBE_BYTES)) == fmt


def test_short_heads_are_raw():
    assert probe_format(b"") == "raw"
    assert probe_format(b"conect") == "raw"
    assert probe_format(bytes(0x8003)) == "raw"


def qcow2(path, *options: str, size: str = "64M") -> bytes:
    args = ["create", "-q", "-f", "qcow2", *options, str(path), size]
    subprocess.run(["qemu-img", *args], check=True)
    return path.read_bytes()[:PROBE_BYTES]


def test_qcow2_header_of_a_plain_image(tmp_path):
    header = parse_qcow2_header(qcow2(tmp_path / "a.qcow2", size="5G"))
    assert header.version == 3
    assert header.virtual_size == 5 << 30
    assert header.backing_file is None
    assert header.data_file is None
    assert not header.encrypted


def test_qcow2_version_2(tmp_path):
    header = parse_qcow2_header(qcow2(tmp_path / "v2.qcow2", "-o", "compat=0.10"))
    assert header.version == 2
    assert header.virtual_size == 64 << 20


def test_qcow2_header_names_its_backing_file(tmp_path):
    base = tmp_path / "base.qcow2"
    qcow2(base)
    header = parse_qcow2_header(qcow2(tmp_path / "top.qcow2", "-b", str(base), "-F", "qcow2"))
    assert header.backing_file == str(base)


def test_qcow2_header_names_its_data_file(tmp_path):
    data = tmp_path / "data.raw"
    header = parse_qcow2_header(qcow2(tmp_path / "x.qcow2", "-o", f"data_file={data}"))
    assert header.data_file == str(data)
    assert not header.data_file_raw


def test_qcow2_header_says_its_data_file_is_raw(tmp_path):
    data = tmp_path / "data.raw"
    options = ["-o", f"data_file={data},data_file_raw=on"]
    header = parse_qcow2_header(qcow2(tmp_path / "x.qcow2", *options))
    assert header.data_file == str(data)
    assert header.data_file_raw


def test_qcow2_header_says_encrypted(tmp_path):
    options = ["--object", "secret,id=s0,data=pw", "-o", "encrypt.format=aes,encrypt.key-secret=s0"]
    assert parse_qcow2_header(qcow2(tmp_path / "e.qcow2", *options)).encrypted


def test_qcow2_backing_file_beyond_the_head(tmp_path):
    head = bytearray(qcow2(tmp_path / "a.qcow2")[:4096])
    head[8:16] = (1 << 20).to_bytes(8, "big")
    head[16:20] = (10).to_bytes(4, "big")
    assert parse_qcow2_header(bytes(head)).backing_file == "(beyond the probed header)"


@pytest.mark.parametrize("head", [b"", b"QFI\xfb" + bytes(20), b"QFI\xfa" + bytes(200)])
def test_not_a_qcow2_header(head):
    with pytest.raises(FormatError, match="not a qcow2 image"):
        parse_qcow2_header(head)


def test_unknown_qcow2_version(tmp_path):
    head = bytearray(qcow2(tmp_path / "a.qcow2"))
    head[4:8] = (4).to_bytes(4, "big")
    with pytest.raises(FormatError, match="qcow2 version 4 is not supported"):
        parse_qcow2_header(bytes(head))


def test_fixed_vhd_footer(tmp_path):
    raw = tmp_path / "d.raw"
    raw.write_bytes(b"\x01" * (1 << 20))
    vhd = tmp_path / "d.vhd"
    args = ["-f", "raw", "-O", "vpc", "-o", "subformat=fixed,force_size=on", str(raw), str(vhd)]
    subprocess.run(["qemu-img", "convert", *args], check=True)
    data = vhd.read_bytes()
    assert len(data) == (1 << 20) + VHD_FOOTER
    assert fixed_vhd_size(data[-VHD_FOOTER:], len(data)) == 1 << 20
    # the footer of a disk of another size, or no footer at all
    assert fixed_vhd_size(data[-VHD_FOOTER:], len(data) + 512) is None
    assert fixed_vhd_size(bytes(VHD_FOOTER), len(data)) is None
    assert fixed_vhd_size(data[-100:], len(data)) is None
    with FileVolume(vhd) as vol:
        assert read_fixed_vhd_size(vol, vol.size) == 1 << 20
    with FileVolume(raw) as vol:
        assert read_fixed_vhd_size(vol, vol.size) is None


@pytest.mark.parametrize(
    "head",
    [
        b'# Disk DescriptorFile\nversion=1\nRW 2048 FLAT "/etc/shadow" 0\n',
        b'# written by hand\n\n   \nversion=2\r\nRW 2048 FLAT "/etc/shadow" 0\n',
        b"version=3\n",
    ],
)
def test_vmdk_text_descriptors_are_told_as_qemu_tells_them(head):
    assert is_vmdk_descriptor(head)
    assert probe_format(head) == "vmdk"


@pytest.mark.parametrize(
    "head", [b"", b"\0" * 4096, b"# notes\nversion=4\n", b"hello\nversion=1\n"]
)
def test_other_text_is_no_vmdk_descriptor(head):
    assert not is_vmdk_descriptor(head)
