"""A reader of diskferry's backup repositories written from docs/repository-format.md alone.

It uses Python's standard library and the primitives the document names (cryptography for
scrypt, HKDF and AES-256-GCM, zstandard, blake3) and nothing of diskferry, as another
program would. It checks what the document says a reader can check (the config's MAC, each
object's seal and place, chunk ids, pack trailers against the index, manifests covering
their disk) and raises FormatError wherever the repository is not as the document says.

Run as a program it reads a directory repository whole:

    python format_reader.py REPO OUT [--password-env NAME]

and prints one JSON document: the config, the members of every JSON object it read, each
snapshot's description with the file under OUT its disk was rebuilt into, the trackers,
locks and metadata, and counts.
"""

from __future__ import annotations

import argparse
import base64
import hmac
import io
import json
import os
import re
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import blake3
import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

FORMAT = 3
KEY_SIZE = 32
NONCE_SIZE = 12
TAG_SIZE = 16
ID_SIZE = 32
MAX_PLAIN = 64 << 20
STORED = 0
ZSTD = 1
PAGE_ENTRIES = 16384
# what a reader takes at most of each kind of object, and of each part it reads on the word of
# a length in the storage: the JSON objects, and anything sealed
MAX_CONFIG = 16 << 10
MAX_KEY_FILE = 16 << 10
MAX_LOCK = 16 << 10
MAX_STORED = 1 + MAX_PLAIN + NONCE_SIZE + TAG_SIZE

# the byte layouts, each named as its table in the document; all little-endian
LAYOUTS = {
    "pack tail": struct.Struct("<I8s"),
    "pack trailer row": struct.Struct("<32sQII"),
    "index head": struct.Struct("<I"),
    "index pack id": struct.Struct("<16s"),
    "index row": struct.Struct("<32sIQII"),
    "manifest length": struct.Struct("<I"),
    "page table row": struct.Struct("<QQII"),
    "page head": struct.Struct("<I"),
    "page row": struct.Struct("<QQiQ"),
}

# the strings the format fixes, each written in the document as it is here
PACK_MAGIC = b"DFPACK01"
MANIFEST_MAGIC = b"DFMANIF2"
KEYS_AD = b"diskferry-keys-v1"
CONFIG_MAC_INFO = b"diskferry config mac v1"
CIPHER = "aes-256-gcm"
NO_CIPHER = "none"
CONSTANTS = (PACK_MAGIC, MANIFEST_MAGIC, KEYS_AD, CONFIG_MAC_INFO, CIPHER, NO_CIPHER)
# the associated data of what is sealed to its place rather than to its own name
TRAILER_AD = "pack-trailer/{pack}"
TABLE_AD = "{path}#pages"
PAGE_AD = "{path}#page/{number}"

# scrypt's accepted parameters: n a power of two in [2, 2^20], r in [1, 32], p in [1, 16],
# 128·n·r bytes of memory at most 1 GiB
SCRYPT_MAX_N = 1 << 20
SCRYPT_MAX_R = 32
SCRYPT_MAX_P = 16
SCRYPT_MAX_MEMORY = 1 << 30

NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}"
NAME_SHAPES = {
    "config": r"config",
    "keys": r"keys/[0-9a-f]{32}",
    "locks": r"locks/[0-9a-f]{24}",
    "index": r"index/[0-9a-f]{32}",
    "packs": r"packs/([0-9a-f]{2})/\1[0-9a-f]{30}",
    "snapshots": rf"snapshots/{NAME}/{NAME}/{NAME}",
    "trackers": rf"trackers/{NAME}",
    "metadata": rf"metadata/{NAME}",
}


class FormatError(Exception):
    """The repository is not as the document says."""


@dataclass(frozen=True)
class Keys:
    """The data key (None when unencrypted) and the chunk-id key."""

    data: bytes | None
    ids: bytes


@dataclass(frozen=True)
class Located:
    """Where an index object places a chunk."""

    pack: str
    offset: int
    length: int
    plain_length: int


@dataclass(frozen=True)
class Entry:
    """A run of a disk: `length` bytes at `offset`, from a chunk at `chunk_offset`, or zeros."""

    offset: int
    length: int
    chunk: bytes | None
    chunk_offset: int


def _no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise FormatError("a JSON object names a member twice")
    return found


def _json(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data, object_pairs_hook=_no_twice)
    except ValueError as e:
        raise FormatError(f"{what} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise FormatError(f"{what} is not a JSON object")
    return value


def canonical(value: dict[str, Any]) -> bytes:
    """The canonical JSON the config's MAC covers."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def check_scrypt(n: int, r: int, p: int) -> None:
    """FormatError unless the scrypt parameters are within the accepted bounds."""
    power = n >= 2 and n & (n - 1) == 0
    if not (power and n <= SCRYPT_MAX_N and 1 <= r <= SCRYPT_MAX_R and 1 <= p <= SCRYPT_MAX_P):
        raise FormatError(f"scrypt parameters n={n} r={r} p={p} are out of bounds")
    if 128 * n * r > SCRYPT_MAX_MEMORY:
        raise FormatError(f"scrypt parameters n={n} r={r} need more than 1 GiB")


def unwrap(key_file: dict[str, Any], password: str | None) -> Keys | None:
    """The keys a key file holds, or None when the password does not open it."""
    kdf = key_file["kdf"]
    if kdf is None:
        return Keys(None, base64.b64decode(key_file["id_key"], validate=True))
    if kdf["name"] != "scrypt":
        raise FormatError(f"unknown key derivation {kdf['name']!r}")
    check_scrypt(kdf["n"], kdf["r"], kdf["p"])
    if not password:
        return None
    salt = base64.b64decode(key_file["salt"], validate=True)
    scrypt = Scrypt(salt=salt, length=KEY_SIZE, n=kdf["n"], r=kdf["r"], p=kdf["p"])
    wrapping = scrypt.derive(password.encode("utf-8"))
    wrapped = base64.b64decode(key_file["wrapped"], validate=True)
    try:
        both = AESGCM(wrapping).decrypt(wrapped[:NONCE_SIZE], wrapped[NONCE_SIZE:], KEYS_AD)
    except InvalidTag:
        return None
    if len(both) != 2 * KEY_SIZE:
        raise FormatError("a key file wraps other than two 32-byte keys")
    return Keys(both[:KEY_SIZE], both[KEY_SIZE:])


def config_mac(keys: Keys, fields: dict[str, Any]) -> bytes:
    """The MAC of the config's members (without `mac`) under the repository keys."""
    material = keys.ids if keys.data is None else keys.data + keys.ids
    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_SIZE, salt=None, info=CONFIG_MAC_INFO)
    return hmac.digest(hkdf.derive(material), canonical(fields), "sha256")


def unpack(payload: bytes) -> bytes:
    """The plaintext of a payload: a compression byte, then the bytes or one zstd frame."""
    if payload[:1] == bytes([STORED]):
        return payload[1:]
    if payload[:1] != bytes([ZSTD]):
        raise FormatError(f"unknown compression byte {payload[:1].hex()}")
    source = io.BytesIO(payload[1:])
    with zstandard.ZstdDecompressor().stream_reader(source, read_across_frames=False) as frame:
        plain = frame.read(MAX_PLAIN + 1)
    if len(plain) > MAX_PLAIN:
        raise FormatError("a payload unpacks past 64 MiB")
    return plain


class Repository:
    """A directory repository opened with its password (None for an unencrypted one)."""

    def __init__(self, root: Path, password: str | None) -> None:
        self.root = root
        self.members: dict[str, set[str]] = {}
        for name in self.names():
            self._check_name(name)
        fields = self._record("config", _json(self.whole("config", MAX_CONFIG), "config"))
        if fields.get("version") != FORMAT:
            raise FormatError(f"format {fields.get('version')}, not {FORMAT}")
        mac = base64.b64decode(fields.pop("mac"), validate=True)
        self.config = fields
        self._record("kdf", fields["kdf"])
        self.encrypted = fields["cipher"] == CIPHER
        if not self.encrypted and fields["cipher"] != NO_CIPHER:
            raise FormatError(f"unknown cipher {fields['cipher']!r}")
        self.keys = self._unlock(password)
        if not hmac.compare_digest(mac, config_mac(self.keys, fields)):
            raise FormatError("the config does not match its MAC")
        self.payloads = {"stored": 0, "zstd": 0}  # what the payloads opened were
        self.index: dict[bytes, Located] = {}
        self.index_objects = 0

    def names(self, folder: str = "") -> list[str]:
        """The object names under `folder`, sorted; names starting with '.' are no objects."""
        found = []
        base = self.root / folder if folder else self.root
        for where, folders, files in os.walk(base):
            folders[:] = [f for f in folders if not f.startswith(".")]
            rel = Path(where).relative_to(self.root)
            found += [(rel / f).as_posix() for f in files if not f.startswith(".")]
        return sorted(n.removeprefix("./") for n in found)

    def _check_name(self, name: str) -> None:
        shape = NAME_SHAPES.get(name.split("/", 1)[0])
        if shape is None or not re.fullmatch(shape, name):
            raise FormatError(f"{name} is not a name the repository has")

    def whole(self, name: str, bound: int) -> bytes:
        """An object's bytes, when it is at most `bound` bytes long."""
        size = (self.root / name).stat().st_size
        if size > bound:
            raise FormatError(f"{name} is {size} bytes long, past its bound of {bound}")
        return self.read(name, 0, size)

    def read(self, name: str, start: int, length: int) -> bytes:
        """`length` of an object's bytes from `start`, at most a sealed part's bound."""
        if length > MAX_STORED:
            raise FormatError(f"{name}: {length} bytes at {start}, more than any sealed part")
        with open(self.root / name, "rb") as f:
            f.seek(start)
            data = f.read(length)
        if len(data) != length:
            raise FormatError(f"{name} is shorter than what names its bytes")
        return data

    def _record(self, kind: str, value: dict[str, Any]) -> dict[str, Any]:
        """Note the members of a JSON object of `kind`, for the document's tables."""
        self.members.setdefault(kind, set()).update(value)
        return value

    def _unlock(self, password: str | None) -> Keys:
        for name in self.names("keys"):
            key_file = self._record("key file", _json(self.whole(name, MAX_KEY_FILE), name))
            keys = unwrap(key_file, password)
            if keys is None:
                continue
            if (keys.data is not None) != self.encrypted:
                raise FormatError(f"{name} does not match the config's cipher")
            return keys
        raise FormatError("no key file opens with the password")

    def open(self, blob: bytes, ad: bytes) -> bytes:
        """The plaintext of a stored object or chunk sealed to `ad`."""
        payload = blob
        if self.keys.data is not None:
            if len(blob) < NONCE_SIZE + TAG_SIZE:
                raise FormatError("a sealed object is too short")
            try:
                payload = AESGCM(self.keys.data).decrypt(blob[:NONCE_SIZE], blob[NONCE_SIZE:], ad)
            except InvalidTag:
                raise FormatError(f"{ad!r} does not authenticate") from None
        plain = unpack(payload)
        self.payloads["stored" if payload[0] == STORED else "zstd"] += 1
        return plain

    def open_json(self, name: str) -> dict[str, Any]:
        """A sealed JSON object stored under `name`."""
        return _json(self.open(self.whole(name, MAX_STORED), name.encode()), name)

    def chunk_id(self, plain: bytes) -> bytes:
        """The id of a chunk: BLAKE3 keyed with the chunk-id key."""
        return blake3.blake3(plain, key=self.keys.ids).digest()

    def load_index(self) -> None:
        """Read every index object, and every pack trailer it names, checking they agree."""
        packs: dict[str, dict[bytes, Located]] = {}
        for name in self.names("index"):
            self.index_objects += 1
            data = self.open(self.whole(name, MAX_STORED), name.encode())
            (count,) = LAYOUTS["index head"].unpack_from(data)
            start = LAYOUTS["index head"].size + count * LAYOUTS["index pack id"].size
            if start > len(data) or (len(data) - start) % LAYOUTS["index row"].size:
                raise FormatError(f"{name}: its lengths do not add up")
            ids = [
                pack_id.hex()
                for (pack_id,) in LAYOUTS["index pack id"].iter_unpack(
                    data[LAYOUTS["index head"].size : start]
                )
            ]
            for chunk, number, offset, length, plain in LAYOUTS["index row"].iter_unpack(
                data[start:]
            ):
                if length > MAX_STORED or plain > MAX_PLAIN:
                    raise FormatError(f"{name} names a chunk longer than any")
                where = Located(ids[number], offset, length, plain)
                self.index.setdefault(chunk, where)
                packs.setdefault(where.pack, {})[chunk] = where
        for pack, chunks in packs.items():
            listed = self.trailer(pack)
            if any(listed.get(chunk) != where for chunk, where in chunks.items()):
                raise FormatError(f"the trailer of pack {pack} does not list what the index says")

    def trailer(self, pack: str) -> dict[bytes, Located]:
        """The chunks a pack's trailer lists."""
        name = f"packs/{pack[:2]}/{pack}"
        tail = LAYOUTS["pack tail"]
        size = (self.root / name).stat().st_size
        length, magic = tail.unpack(self.read(name, size - tail.size, tail.size))
        if magic != PACK_MAGIC or length > size - tail.size:
            raise FormatError(f"{name} has no pack tail")
        blob = self.read(name, size - tail.size - length, length)
        table = self.open(blob, TRAILER_AD.format(pack=pack).encode())
        rows = LAYOUTS["pack trailer row"]
        if len(table) % rows.size:
            raise FormatError(f"the trailer of {name} is not whole rows")
        return {c: Located(pack, o, n, p) for c, o, n, p in rows.iter_unpack(table)}

    def chunk(self, chunk_id: bytes) -> bytes:
        """A chunk's plaintext, checked against its id and the index's plain length."""
        where = self.index.get(chunk_id)
        if where is None:
            raise FormatError(f"chunk {chunk_id.hex()} is in no index object")
        name = f"packs/{where.pack[:2]}/{where.pack}"
        plain = self.open(self.read(name, where.offset, where.length), chunk_id)
        if self.chunk_id(plain) != chunk_id or len(plain) != where.plain_length:
            raise FormatError(f"chunk {chunk_id.hex()} does not match its id")
        return plain

    def description(self, path: str) -> tuple[dict[str, Any], int]:
        """A manifest's description, and where its page table's length is."""
        magic = len(MANIFEST_MAGIC)
        length = LAYOUTS["manifest length"]
        head = self.read(path, 0, magic + length.size)
        if head[:magic] != MANIFEST_MAGIC:
            raise FormatError(f"{path} is not a manifest")
        (size,) = length.unpack_from(head, magic)
        blob = self.read(path, magic + length.size, size)
        info = self._record("snapshot", _json(self.open(blob, path.encode()), path))
        self._record("stats", info["stats"])
        if f"snapshots/{info['vm']}/{info['disk']}/{info['id']}" != path:
            raise FormatError(f"{path} describes another snapshot")
        return info, magic + length.size + size

    def entries(self, path: str) -> Iterator[Entry]:
        """A manifest's entries in disk order, checked to cover its disk without a gap."""
        info, at = self.description(path)
        length = LAYOUTS["manifest length"]
        (size,) = length.unpack(self.read(path, at, length.size))
        table = self.open(
            self.read(path, at + length.size, size), TABLE_AD.format(path=path).encode()
        )
        start = at + length.size + size
        pos = 0
        for number, (first, data_bytes, count, stored) in enumerate(
            LAYOUTS["page table row"].iter_unpack(table)
        ):
            if count > PAGE_ENTRIES:
                raise FormatError(f"{path}: page {number} has more entries than a page holds")
            ad = PAGE_AD.format(path=path, number=number).encode()
            page = self.open(self.read(path, start, stored), ad)
            start += stored
            entries = list(self._page(page, count))
            named = sum(e.length for e in entries if e.chunk is not None)
            if (len(entries), entries[0].offset, named) != (count, first, data_bytes):
                raise FormatError(f"{path}: page {number} is not what its table says")
            for e in entries:
                if e.offset != pos or e.length <= 0:
                    raise FormatError(f"{path}: a gap or an overlap at {pos}")
                pos += e.length
                yield e
        if pos != info["disk_size"] or start != (self.root / path).stat().st_size:
            raise FormatError(f"{path}: its entries or pages do not end where it does")

    def _page(self, page: bytes, entries: int) -> Iterator[Entry]:
        head = LAYOUTS["page head"]
        (count,) = head.unpack_from(page)
        if count > entries:
            raise FormatError("a page names more chunk ids than it has entries")
        ids_end = head.size + count * ID_SIZE
        ids = [page[i : i + ID_SIZE] for i in range(head.size, ids_end, ID_SIZE)]
        for offset, length, number, chunk_offset in LAYOUTS["page row"].iter_unpack(page[ids_end:]):
            if number < 0:
                yield Entry(offset, length, None, 0)
            else:
                yield Entry(offset, length, ids[number], chunk_offset)

    def rebuild(self, path: str, out: BinaryIO) -> dict[str, int]:
        """Write the disk a manifest describes into `out`; counts of what it held."""
        counts = {"entries": 0, "zeroEntries": 0, "partEntries": 0}
        last: tuple[bytes, bytes] | None = None
        size = 0
        for e in self.entries(path):
            counts["entries"] += 1
            size = e.offset + e.length
            if e.chunk is None:
                counts["zeroEntries"] += 1
                continue
            if last is None or last[0] != e.chunk:
                last = (e.chunk, self.chunk(e.chunk))
            plain = last[1]
            if e.chunk_offset + e.length > len(plain):
                raise FormatError(f"{path} names bytes past the end of a chunk")
            if e.chunk_offset or e.length != len(plain):
                counts["partEntries"] += 1
            out.seek(e.offset)
            out.write(plain[e.chunk_offset : e.chunk_offset + e.length])
        out.truncate(size)
        return counts

    def tracker(self, name: str) -> dict[str, Any]:
        """A VM's tracker, checked to name that VM."""
        tracker = self._record("tracker", self.open_json(name))
        if f"trackers/{tracker['vm']}" != name:
            raise FormatError(f"{name} names another VM")
        for chain in tracker["disks"].values():
            self._record("disk chain", chain)
            for checkpoint in chain["checkpoints"]:
                self._record("checkpoint", checkpoint)
        return tracker


def read_all(root: Path, password: str | None, out: Path) -> dict[str, Any]:
    """Everything the repository at `root` holds, each snapshot's disk rebuilt under `out`."""
    repo = Repository(root, password)
    repo.load_index()
    snapshots = []
    for path in repo.names("snapshots"):
        info, _ = repo.description(path)
        target = out / f"{info['id']}.raw"
        with open(target, "wb") as f:
            counts = repo.rebuild(path, f)
        snapshots.append({**info, **counts, "path": path, "rebuilt": str(target)})
    locks = [
        repo._record("lock", _json(repo.whole(name, MAX_LOCK), name))
        for name in repo.names("locks")
    ]
    return {
        "config": repo.config,
        "encrypted": repo.encrypted,
        "names": repo.names(),
        "snapshots": snapshots,
        "trackers": [repo.tracker(name) for name in repo.names("trackers")],
        "locks": locks,
        "metadata": {n: repo.open_json(n) for n in repo.names("metadata")},
        "chunks": len(repo.index),
        "packs": len({where.pack for where in repo.index.values()}),
        "indexObjects": repo.index_objects,
        "payloads": repo.payloads,
        "members": {kind: sorted(names) for kind, names in repo.members.items()},
    }


def main(argv: list[str]) -> None:
    """Read the repository named on the command line; print what it holds as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--password-env", help="the environment variable holding the password")
    args = parser.parse_args(argv)
    password = os.environ.get(args.password_env) if args.password_env else None
    json.dump(read_all(args.repo, password, args.out), sys.stdout, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
