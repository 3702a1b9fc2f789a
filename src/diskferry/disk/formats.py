"""Format probing from magic bytes: compressions, image formats, and the qcow2 header."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from diskferry.base.errors import DiskferryError
from diskferry.disk.volume import Volume

PROBE_BYTES = 64 * 1024
COMPRESSIONS = ("gzip", "xz", "zstd", "bzip2")
FORMATS = ("raw", "qcow2", "vmdk", "vhd", "vhdx", "vdi", "iso")
# formats whose bytes are the disk itself, as a VM reads a raw volume
RAW_DATA = ("raw", "iso")

VHD_FOOTER = 512
_VHD_FIXED = 2
_QCOW2_MAGIC = b"QFI\xfb"
_QCOW2_V3_HEADER = 104
_QCOW2_EXT_DATA_FILE = 0x44415441
_QCOW2_INCOMPAT_DATA_FILE = 1 << 2
_QCOW2_AUTOCLEAR_DATA_FILE_RAW = 1 << 1


class FormatError(DiskferryError):
    """An image header is malformed or names something diskferry refuses."""

    reason = "BadImage"


def probe_compression(header: bytes) -> str | None:
    """'gzip', 'xz', 'zstd', 'bzip2' or None, from the first bytes of a stream."""
    if header.startswith(b"\x1f\x8b"):
        return "gzip"
    if header.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if header.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    if header.startswith(b"BZh") and len(header) > 3 and header[3:4] in b"123456789":
        return "bzip2"
    return None


def probe_format(header: bytes) -> str:
    """The image format named by the first bytes (up to PROBE_BYTES); 'raw' when none."""
    if header.startswith(_QCOW2_MAGIC):
        return "qcow2"
    if header.startswith(b"KDMV") or is_vmdk_descriptor(header):
        return "vmdk"
    if header.startswith(b"vhdxfile"):
        return "vhdx"
    if header.startswith(b"conectix"):
        return "vhd"
    if len(header) >= 0x44 and struct.unpack_from("<I", header, 0x40)[0] == 0xBEDA107F:
        return "vdi"
    if header[0x8001:0x8006] == b"CD001":
        return "iso"
    return "raw"


def is_vmdk_descriptor(header: bytes) -> bool:
    """Whether `header` starts a VMDK text descriptor, whose data lies in the files it names.

    As qemu tells one: comment and blank lines, then a `version=` line.
    """
    for line in header[:PROBE_BYTES].split(b"\n"):
        text = line.strip()
        if text and not text.startswith(b"#"):
            return text in (b"version=1", b"version=2", b"version=3")
    return False


def fixed_vhd_size(tail: bytes, length: int) -> int | None:
    """The disk size of a fixed VHD `length` bytes long that ends with `tail`, or None.

    A fixed VHD is its raw disk followed by a 512-byte footer: only its end tells it from raw.
    """
    if len(tail) != VHD_FOOTER or not tail.startswith(b"conectix"):
        return None
    size = struct.unpack_from(">Q", tail, 48)[0]
    kind = struct.unpack_from(">I", tail, 60)[0]
    return size if kind == _VHD_FIXED and size == length - VHD_FOOTER else None


def read_fixed_vhd_size(volume: Volume, length: int) -> int | None:
    """fixed_vhd_size of the first `length` bytes of `volume`, reading only their end."""
    if length < 2 * VHD_FOOTER:
        return None
    return fixed_vhd_size(volume.read(length - VHD_FOOTER, VHD_FOOTER), length)


def volume_format(volume: Volume) -> str:
    """The image format `volume` holds: from its first bytes, a fixed VHD from its end."""
    fmt = probe_format(volume.read(0, min(PROBE_BYTES, volume.size)))
    if fmt == "raw" and read_fixed_vhd_size(volume, volume.size) is not None:
        return "vhd"
    return fmt


@dataclass(frozen=True)
class Qcow2Header:
    """What the qcow2 header says that matters before trusting the image."""

    version: int
    virtual_size: int
    backing_file: str | None
    data_file: str | None
    encrypted: bool
    # the data file is a valid raw image of the disk: qemu keeps it so (data_file_raw)
    data_file_raw: bool = False


def parse_qcow2_header(header: bytes) -> Qcow2Header:
    """Parse the fixed header and extensions of a qcow2 image from its first bytes."""
    if not header.startswith(_QCOW2_MAGIC) or len(header) < 72:
        raise FormatError("not a qcow2 image (bad magic or short header)")
    version, bf_offset, bf_size = struct.unpack_from(">IQI", header, 4)
    size, crypt = struct.unpack_from(">QI", header, 24)
    if version not in (2, 3):
        raise FormatError(f"qcow2 version {version} is not supported")
    backing = None
    if bf_offset:
        if bf_offset + bf_size > len(header):
            backing = "(beyond the probed header)"
        else:
            backing = header[bf_offset : bf_offset + bf_size].decode("utf-8", "replace")
    data_file = None
    data_file_raw = False
    if version == 3:
        if len(header) < _QCOW2_V3_HEADER:
            raise FormatError("not a qcow2 image (short version 3 header)")
        incompatible, _, autoclear = struct.unpack_from(">QQQ", header, 72)
        header_length = struct.unpack_from(">I", header, 100)[0]
        if incompatible & _QCOW2_INCOMPAT_DATA_FILE:
            data_file = _qcow2_data_file(header, header_length) or "(unnamed)"
            data_file_raw = bool(autoclear & _QCOW2_AUTOCLEAR_DATA_FILE_RAW)
    return Qcow2Header(version, size, backing, data_file, crypt != 0, data_file_raw)


def _qcow2_data_file(header: bytes, pos: int) -> str | None:
    while pos + 8 <= len(header):
        kind, length = struct.unpack_from(">II", header, pos)
        if kind == 0:
            return None
        if kind == _QCOW2_EXT_DATA_FILE:
            return header[pos + 8 : pos + 8 + length].decode("utf-8", "replace")
        pos += 8 + (length + 7) // 8 * 8
    return None
