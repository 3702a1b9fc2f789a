"""Hostile images: each refused by `diskferry import` with one line, the target untouched,
no temporary file left behind."""

from __future__ import annotations

import subprocess

import pytest
from hostile_images import (
    QCOW2_MAX_L1_ENTRIES,
    VMDK_REFUSED,
    endless_server,
    qcow2,
    qcow2_of_virtual_size,
    qcow2_then_endless,
    qcow2_with_l1_entries,
    vmdk_descriptor,
    vmdk_sparse_naming_shadow,
)

MiB = 1 << 20


@pytest.fixture(scope="module")
def endless():
    """`serve(stream)`: the URL of a stream that never ends."""
    with endless_server() as serve:
        yield serve


@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize("size", [1 << 63, (1 << 63) - 512, (1 << 64) - 1])
def test_a_virtual_size_near_two_to_the_63_is_refused(refuse, tmp_path, size, compression):
    error = refuse(qcow2_of_virtual_size(tmp_path, size, compression))
    assert error.startswith(f"the image's virtual size ({size} bytes) is larger than the free")


@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize("entries", [QCOW2_MAX_L1_ENTRIES + 1, 0x7FFFFFFF, 0xFFFFFFFF])
def test_an_l1_table_past_the_qcow2_limit_is_refused(refuse, tmp_path, entries, compression):
    source = qcow2_with_l1_entries(tmp_path, entries, compression)
    assert refuse(source) == (
        f"{source} is not a readable qcow2 image (Active L1 table too large); refusing it"
    )


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_an_l1_table_of_32_mib_for_a_1_mib_disk_is_refused(refuse, tmp_path, compression):
    source = qcow2_with_l1_entries(tmp_path, QCOW2_MAX_L1_ENTRIES, compression)
    error = refuse(source)
    assert error.startswith("the image is damaged or truncated (qemu-img check found ")


@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize(
    "lead",
    ["# Disk DescriptorFile\n", "# made by hand\n\n  \n", ""],
    ids=["usual", "notes", "bare"],
)
def test_a_vmdk_descriptor_naming_etc_shadow_is_refused(refuse, tmp_path, lead, compression):
    assert refuse(vmdk_descriptor(tmp_path, lead, compression)) == VMDK_REFUSED


def test_a_sparse_vmdk_whose_descriptor_names_etc_shadow_does_not_read_it(diskferry, tmp_path):
    """qemu reads a sparse VMDK's data from the file itself, whatever its descriptor says."""
    target = tmp_path / "out.raw"
    result = diskferry("import", vmdk_sparse_naming_shadow(tmp_path), target, "--no-progress")
    assert result.code == 0, result.stderr
    assert target.stat().st_size == MiB
    assert subprocess.run(["cmp", "-s", target, "/dev/zero", "-n", str(MiB)]).returncode == 0


@pytest.mark.parametrize("stream", ["zero-padding", "empty-members"])
def test_a_gzip_that_never_ends_without_data_is_refused(refuse, endless, stream):
    assert refuse(endless(stream)) == (
        "the gzip stream goes on for more than 4 MiB without any data; refusing it"
    )


def test_a_gzip_that_never_ends_is_refused_at_the_requested_size(refuse, endless):
    assert refuse(endless("data"), "--size", "8M") == (
        "the decompressed image grows past the requested --size, 8388608 bytes; "
        "refusing it (a decompression bomb?)"
    )


def test_a_qcow2_in_a_gzip_that_never_ends_is_refused_past_its_size(refuse, endless, tmp_path):
    image = bytes(qcow2(tmp_path, "4M"))
    assert refuse(endless(qcow2_then_endless(image))) == (
        "the decompressed image grows past its declared virtual size, 4194304 bytes; "
        "refusing it (a decompression bomb?)"
    )
