"""What each parser of hostile bytes must do with any input: finish, or raise its typed error.

Each target takes bytes and feeds them to one parser the way diskferry does; it lets only
the project's typed errors (DiskferryError) through, so anything else it raises is a
defect. The API's targets let only client errors through (an ApiError answered 4xx), and
check that what they return is a JSON value the store takes. `seeds()` gives well-formed
inputs to start from. The atheris runner (run.py) and the hypothesis tests under tests/ use
the same targets.
"""

from __future__ import annotations

import atexit
import bz2
import gzip
import io
import json
import lzma
import os
import shutil
import ssl
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import suppress
from functools import cache, wraps
from pathlib import Path
from typing import Any

import yaml
import zstandard

from diskferry.backup.codec import Codec
from diskferry.backup.entries import Entry
from diskferry.backup.index import IndexEntry, decode_index, encode_index
from diskferry.backup.keys import Keys
from diskferry.backup.packs import PackBuilder, pack_path, read_trailer
from diskferry.backup.snapshots import Manifest, ManifestWriter, SnapshotInfo, snapshot_path
from diskferry.base.errors import DiskferryError
from diskferry.control.apiserver.http import bodies, protobuf
from diskferry.control.apiserver.store import apply as applies
from diskferry.control.apiserver.store import patch as patches
from diskferry.control.apiserver.store.values import check
from diskferry.control.errors import ApiError, BadRequestError
from diskferry.disk.decompress import DecompressingReader, Readable
from diskferry.disk.formats import (
    PROBE_BYTES,
    VHD_FOOTER,
    fixed_vhd_size,
    parse_qcow2_header,
    probe_compression,
    probe_format,
)
from diskferry.disk.peek import PeekReader
from diskferry.disk.xz_blocks import XzBlockReader
from diskferry.export.extent_pages import parse_page
from diskferry.export.routes import load_routes
from diskferry.importer.probe import probe_image
from diskferry.objstore.store import ObjectStore
from diskferry.serving.tls import apply_tls_settings, load_tls_settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "nbd"))

from hostile_server import answering, handshake_bytes, hostile_server, scripted

from diskferry.nbd.client import NbdClient

Target = Callable[[bytes], None]

# what one decompressor input may unpack to before the target stops reading it
DECOMPRESSED_BOUND = 16 << 20
_READ = 64 << 10
_KINDS = ("gzip", "xz", "zstd", "bzip2")
# blocks of an xz stream in flight, at most: bigger ones are decoded in place
_XZ_IN_FLIGHT = 1 << 20
_CODEC = Codec(Keys(None, bytes(32)))
_PACK_ID = "ab" * 16
_INDEX_ID = "cd" * 16
MANIFEST_PATH = snapshot_path("vm", "disk", "0123456789ab0000")
_NBD_WAIT = 5.0
_SCRATCH = Path(tempfile.mkdtemp(prefix="diskferry-fuzz-"))
atexit.register(shutil.rmtree, _SCRATCH, True)


def _typed(parse: Target) -> Target:
    """`parse`, with the project's typed errors taken as a proper answer."""

    @wraps(parse)
    def target(data: bytes) -> None:
        with suppress(DiskferryError):
            parse(data)

    return target


def _client_error(parse: Target) -> Target:
    """`parse`, with the API's client errors (a 4xx Status) taken as a proper answer."""

    @wraps(parse)
    def target(data: bytes) -> None:
        try:
            parse(data)
        except ApiError as error:
            if not 400 <= error.code < 500:
                raise

    return target


def _json_value(value: Any) -> None:
    """Fail (not as a client error) unless `value` is a JSON value the store takes."""
    try:
        check(value, "the value")
    except BadRequestError as error:
        raise AssertionError(error.message) from None


def _scratch_file(data: bytes) -> Path:
    path = _SCRATCH / "input"
    path.write_bytes(data)
    return path


def _socket_path() -> Path:
    path = _SCRATCH / "nbd.sock"
    path.unlink(missing_ok=True)
    return path


@_typed
def qcow2_header(data: bytes) -> None:
    """The qcow2 header and extensions of an image's first bytes."""
    parse_qcow2_header(data)


@_typed
def vhd_footer(data: bytes) -> None:
    """The footer of a fixed VHD: an 8-byte file length, then the file's last 512 bytes."""
    if len(data) >= 8:
        length = int.from_bytes(data[:8], "big")
        size = fixed_vhd_size(data[8:], length)
        assert size is None or size == length - VHD_FOOTER


@_typed
def probe(data: bytes) -> None:
    """The import's sniffing: compression, the decompressed head, its format, its header."""
    raw = PeekReader(io.BytesIO(data))
    compression = probe_compression(raw.peek(8))
    body = PeekReader(DecompressingReader(raw, compression)) if compression else raw
    head = body.peek(PROBE_BYTES)
    assert len(head) <= PROBE_BYTES
    if probe_format(head) == "qcow2":
        parse_qcow2_header(head)


@_typed
def info(data: bytes) -> None:
    """`diskferry info` of a local file: its head, and qemu-img under the untrusted limits."""
    probe_image(str(_scratch_file(data)))


def _read_bounded(reader: Readable) -> None:
    """Read `reader` to its end or DECOMPRESSED_BOUND, never more than asked for at once."""
    total = 0
    while total <= DECOMPRESSED_BOUND:
        out = reader.read(_READ)
        assert len(out) <= _READ
        if not out:
            return
        total += len(out)


@_typed
def decompress(data: bytes) -> None:
    """A stream of the kind the first byte picks, read to its end or DECOMPRESSED_BOUND."""
    if not data:
        return
    _read_bounded(DecompressingReader(io.BytesIO(data[1:]), _KINDS[data[0] % len(_KINDS)]))


@_typed
def xz_blocks(data: bytes) -> None:
    """An xz stream decoded a block a thread, read to its end or DECOMPRESSED_BOUND."""
    reader = XzBlockReader(io.BytesIO(data), 2, bound=_XZ_IN_FLIGHT)
    try:
        _read_bounded(reader)
    finally:
        reader.close()


@_typed
def pack_trailer(data: bytes) -> None:
    """The trailer of a pack, read from a directory store as a backup or check reads it."""
    store = ObjectStore(str(_SCRATCH / "store"))
    store.put(pack_path(_PACK_ID), data)
    for entry in read_trailer(store, _PACK_ID, _CODEC, len(data)):
        assert len(entry.chunk_id) == 32


@_typed
def index(data: bytes) -> None:
    """An index object."""
    for entry in decode_index(_INDEX_ID, data, _CODEC):
        assert len(entry.chunk_id) == 32


@_typed
def manifest(data: bytes) -> None:
    """A snapshot manifest: its description, its page table, and its entries page by page."""
    opened = Manifest(
        MANIFEST_PATH, data, _CODEC, lambda start, length: data[start : start + length]
    )
    for entry in opened.entries():
        assert entry.length > 0


@_typed
def extents_json(data: bytes) -> None:
    """One page of extents in the backup-map JSON shape, as an export server sent it."""
    extents, next_offset = parse_page(data)
    assert all(e.start >= 0 and e.length >= 0 for e in extents)
    assert next_offset is None or next_offset >= 0


@_typed
def routes(data: bytes) -> None:
    """The export proxy's routes file."""
    load_routes(_scratch_file(data))


@_typed
def tls_settings(data: bytes) -> None:
    """A TLS settings file, loaded and applied to a server context."""
    settings = load_tls_settings(_scratch_file(data))
    apply_tls_settings(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), settings)


@_typed
def nbd_handshake(data: bytes) -> None:
    """The client's handshake against a server that sends `data` whatever it is asked."""
    with hostile_server(_socket_path(), scripted(data)) as url:
        client = NbdClient.connect(url, contexts=["base:allocation"], timeout=_NBD_WAIT)
        client.close()


@_typed
def nbd_reply(data: bytes) -> None:
    """A read of 64 KiB at 4 KiB whose reply, after a proper handshake, is `data`."""
    talk = answering(lambda request: data, requests=1)
    with hostile_server(_socket_path(), talk) as url:
        client = NbdClient.connect(url, timeout=_NBD_WAIT, request_timeout=_NBD_WAIT)
        try:
            client.read(4096, 65536)
        finally:
            client.close()


# a stored object, as patches and applies find it: two managers own its fields
_STORED = {
    "apiVersion": "diskferry.io/v1alpha1",
    "kind": "VirtualDisk",
    "metadata": {
        "name": "vd1",
        "namespace": "default",
        "labels": {"a": "b"},
        "finalizers": ["f"],
        "managedFields": [
            {
                "manager": "kubectl",
                "operation": "Apply",
                "apiVersion": "diskferry.io/v1alpha1",
                "time": "2026-01-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}},
            },
            {
                "manager": "other",
                "operation": "Update",
                "apiVersion": "diskferry.io/v1alpha1",
                "time": "2026-01-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:persistentVolumeClaim": {"f:size": {}}}},
            },
        ],
    },
    "spec": {"persistentVolumeClaim": {"size": "64Mi"}},
    "status": {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]},
}


@_client_error
def api_json(data: bytes) -> None:
    """A JSON request body."""
    _json_value(bodies.decode(data, "application/json"))


@_client_error
def api_yaml(data: bytes) -> None:
    """A YAML request body."""
    _json_value(bodies.decode(data, "application/yaml"))


@_client_error
def api_protobuf(data: bytes) -> None:
    """A protobuf request body (kubectl's for Namespaces, Secrets and DeleteOptions)."""
    _json_value(bodies.decode(data, protobuf.MEDIA_TYPE))


def _patched(data: bytes, kind: str) -> None:
    before = json.dumps(_STORED)
    _json_value(patches.apply(_STORED, patches.decode(data), kind))
    assert json.dumps(_STORED) == before, "the patch changed the stored object"


@_client_error
def merge_patch(data: bytes) -> None:
    """A JSON merge patch of a stored object."""
    _patched(data, "merge")


@_client_error
def json_patch(data: bytes) -> None:
    """A JSON patch of a stored object."""
    _patched(data, "json")


@_client_error
def strategic_patch(data: bytes) -> None:
    """A strategic merge patch of a stored object."""
    _patched(data, "strategic")


@_client_error
def apply_patch(data: bytes) -> None:
    """A server-side apply configuration, applied by a manager to a stored object."""
    config = bodies.apply_configuration(data)
    config["metadata"]["name"] = "vd1"
    before = json.dumps(_STORED)
    applied = applies.apply(
        _STORED, config, "fuzz", force=len(data) % 2 == 1, with_status=True, now="2026"
    )
    _json_value(applied)
    assert json.dumps(_STORED) == before, "the apply changed the stored object"


TARGETS: dict[str, Target] = {
    t.__name__: t
    for t in (
        qcow2_header,
        vhd_footer,
        probe,
        info,
        decompress,
        xz_blocks,
        pack_trailer,
        index,
        manifest,
        extents_json,
        routes,
        tls_settings,
        nbd_handshake,
        nbd_reply,
        api_json,
        api_yaml,
        api_protobuf,
        merge_patch,
        json_patch,
        strategic_patch,
        apply_patch,
    )
}


def _qemu_img_create(*args: str) -> bytes:
    """A 1 MiB image made by qemu-img."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "image")
        subprocess.run(["qemu-img", "create", *args, path, "1M"], check=True, capture_output=True)
        with open(path, "rb") as f:
            return f.read()


def _packed(kind: str, data: bytes) -> bytes:
    pack = {
        "gzip": gzip.compress,
        "xz": lzma.compress,
        "zstd": zstandard.ZstdCompressor().compress,
        "bzip2": bz2.compress,
    }[kind]
    return bytes([_KINDS.index(kind)]) + pack(data)


def _xz_in_blocks(data: bytes, check: str) -> bytes:
    """`data` as `xz -0 -T2` writes it, in blocks of 4 KiB (a 256 KiB dictionary each)."""
    args = ["xz", "-0", "-T2", "--block-size=4KiB", f"--check={check}", "-c"]
    return subprocess.run(args, input=data, check=True, capture_output=True).stdout


def _pack() -> bytes:
    builder = PackBuilder()
    builder.pack_id = _PACK_ID
    for n in range(3):
        chunk = bytes([n]) * 100
        builder.add(_CODEC.chunk_id(chunk), _CODEC.encode_chunk(_CODEC.chunk_id(chunk), chunk), 100)
    return b"".join(builder.build(_CODEC))


def _index() -> bytes:
    entries = [IndexEntry(bytes([n]) * 32, _PACK_ID, n * 100, 100, 200) for n in range(3)]
    return encode_index(_INDEX_ID, entries, _CODEC)


def _manifest() -> bytes:
    info = SnapshotInfo(
        id="0123456789ab0000",
        vm="vm",
        disk="disk",
        backup="b",
        disk_size=3 << 20,
        chunk_size=1 << 20,
        type="full",
        started="2026-01-01T00:00:00Z",
        finished="2026-01-01T00:00:01Z",
    )
    entries = [
        Entry(0, 1 << 20, bytes(32), 0),
        Entry(1 << 20, 1 << 20, None, 0),
        Entry(2 << 20, 1 << 20, b"\1" * 32, 0),
    ]
    with ManifestWriter(MANIFEST_PATH, _CODEC, _SCRATCH, page_entries=2) as writer:
        writer.write(entries)
        with writer.finish(info) as stored:
            return stored.read()


@cache
def seeds() -> dict[str, list[bytes]]:
    """Well-formed inputs of every target, to grow mutations from."""
    qcow2 = _qemu_img_create("-f", "qcow2")[:4096]
    vhd = _qemu_img_create("-f", "vpc", "-o", "subformat=fixed")
    page = {"extents": [{"offset": 0, "length": 4096, "type": "data"}], "next_offset": 4096}
    return {
        "qcow2_header": [qcow2, _qemu_img_create("-f", "qcow2", "-o", "compat=0.10")[:4096]],
        "vhd_footer": [len(vhd).to_bytes(8, "big") + vhd[-VHD_FOOTER:]],
        "probe": [qcow2, gzip.compress(qcow2), zstandard.ZstdCompressor().compress(qcow2)],
        "info": [qcow2, _qemu_img_create("-f", "vmdk")[:4096], gzip.compress(qcow2)],
        "decompress": [_packed(kind, qcow2) for kind in _KINDS],
        "xz_blocks": [_xz_in_blocks(qcow2 * 3, check) for check in ("crc32", "sha256")],
        "pack_trailer": [_pack()],
        "index": [_index()],
        "manifest": [_manifest()],
        "extents_json": [json.dumps(page).encode()],
        "routes": [
            b"exports:\n- namespace: ns\n  name: vm\n  url: https://127.0.0.1:8443\n"
            b"  caFile: /ca.crt\n  ready: false\n"
        ],
        "tls_settings": [b'minVersion: "1.3"\nciphers: "ECDHE+AESGCM"\n'],
        "nbd_handshake": [handshake_bytes()],
        "nbd_reply": [_read_reply()],
        "api_json": [json.dumps(_STORED).encode(), b'{"a": [1, 2.5, true, null, "\\u00e9"]}'],
        "api_yaml": [yaml.safe_dump(_STORED).encode(), b"a: {b: [1, '2', 2026-01-02]}\n"],
        "api_protobuf": [_protobuf_secret()],
        "merge_patch": [b'{"metadata": {"labels": {"a": null, "c": "d"}}, "spec": {"x": [1]}}'],
        "json_patch": [
            json.dumps(
                [
                    {"op": "add", "path": "/metadata/labels/c", "value": "d"},
                    {"op": "copy", "from": "/spec", "path": "/spec/copy"},
                    {"op": "move", "from": "/spec/copy", "path": "/status/moved"},
                    {"op": "test", "path": "/kind", "value": "VirtualDisk"},
                    {"op": "replace", "path": "/metadata/finalizers/0", "value": "g"},
                    {"op": "remove", "path": "/status/conditions/0"},
                ]
            ).encode()
        ],
        "strategic_patch": [
            json.dumps(
                {
                    "metadata": {
                        "finalizers": ["g"],
                        "$deleteFromPrimitiveList/finalizers": ["f"],
                        "$retainKeys": ["finalizers", "labels"],
                    },
                    "status": {"conditions": [{"type": "Ready", "$patch": "delete"}]},
                    "spec": {"$patch": "replace", "persistentVolumeClaim": {"size": "1Gi"}},
                }
            ).encode()
        ],
        "apply_patch": [
            yaml.safe_dump({**_STORED, "metadata": {"name": "vd1", "labels": {"a": "c"}}}).encode(),
            b'{"apiVersion": "diskferry.io/v1alpha1", "kind": "VirtualDisk", "spec": {}}',
        ],
    }


def _protobuf_field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (short: lengths under 128)."""
    return bytes([number << 3 | 2, len(payload)]) + payload


def _protobuf_secret() -> bytes:
    """A Secret in the k8s protobuf envelope, as kubectl sends one."""
    type_meta = _protobuf_field(1, b"v1") + _protobuf_field(2, b"Secret")
    meta = _protobuf_field(1, b"s") + _protobuf_field(11, _protobuf_field(1, b"a"))
    data = _protobuf_field(2, _protobuf_field(1, b"k") + _protobuf_field(2, b"\x00\xff"))
    secret = _protobuf_field(1, meta) + data + _protobuf_field(3, b"Opaque") + b"\x28\x01"
    return protobuf.MAGIC + _protobuf_field(1, type_meta) + _protobuf_field(2, secret)


def _read_reply() -> bytes:
    """A whole structured reply to the first read nbd_reply makes (cookie 1)."""
    head = struct.pack(">IHHQI", 0x668E33EF, 1, 1, 1, 8 + 65536)
    return head + struct.pack(">Q", 4096) + bytes(65536)
