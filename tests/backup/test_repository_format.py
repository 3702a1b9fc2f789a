"""docs/repository-format.md holds for the repositories the `diskferry` command makes: a reader
written from the document alone, run where diskferry cannot be imported, rebuilds every disk
from the packs as qemu-img reads its source, and the document's tables and numbers are what
that reader met and what the code holds."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import format_reader
import pytest

from diskferry.backup.metadata import save_metadata
from diskferry.backup.repository import Repository

DOC = Path(__file__).parents[2] / "docs" / "repository-format.md"
READER = Path(__file__).with_name("format_reader.py")
PASSWORD = "format password"
KiB = 1 << 10
MiB = 1 << 20
# what the reader may import besides the standard library: the primitives the document names
PRIMITIVES = {"blake3", "cryptography", "zstandard"}
# run the reader as a program on a machine where diskferry is not installed
_WITHOUT_DISKFERRY = """
import sys
sys.modules["diskferry"] = None  # an import of diskferry, or of any module in it, fails
sys.path.insert(0, sys.argv[1])
import format_reader
format_reader.main(sys.argv[2:])
loaded = [m for m, v in sys.modules.items() if m.partition(".")[0] == "diskferry" and v]
if loaded:
    sys.exit(f"the reader loaded {loaded}")
"""


@dataclass
class Made:
    """A repository the CLI made, what the reader found in it, and the disk each snapshot holds."""

    url: Path
    password: str | None
    found: dict[str, Any]
    expected: dict[str, Path]


def _run(env: dict[str, str], *args: str | os.PathLike[str]) -> str:
    done = subprocess.run(
        list(map(str, args)), env=env, capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def _qemu_io(image: Path, fmt: str, *commands: str) -> None:
    args = [a for c in commands for a in ("-c", c)]
    subprocess.run(["qemu-io", "-f", fmt, *args, str(image)], check=True, capture_output=True)


def _as_raw(image: Path, out: Path) -> Path:
    """What `qemu-img convert -O raw` makes of the image."""
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(image), str(out)], check=True)
    return out


def read_with_reader(url: Path, password: str | None, out: Path) -> dict[str, Any]:
    """What format_reader finds in the repository, run in a Python that cannot import diskferry."""
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    args = [sys.executable, "-I", "-c", _WITHOUT_DISKFERRY, str(READER.parent), str(url), str(out)]
    if password is not None:
        env["FORMAT_PASSWORD"] = password
        args += ["--password-env", "FORMAT_PASSWORD"]
    return json.loads(_run(env, *args))


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Made]:
    """An encrypted repository (a full backup of an imported qcow2 image, an incremental after
    writes through its CBT overlay, a full of a copy without CBT, a metadata object and a lock
    held while it is read), and an unencrypted one (a full backup), each read by the reader."""
    root = tmp_path_factory.mktemp("format")
    cache = root / "cache"
    env = {
        **os.environ,
        "DISKFERRY_PASSWORD": PASSWORD,
        "DISKFERRY_CACHE_DIR": str(cache),
        "TMPDIR": str(root),
    }
    cli = Path(sys.executable).with_name("diskferry")
    noise = root / "noise"
    noise.write_bytes(os.urandom(MiB))
    source = root / "source.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-f", "qcow2", str(source), str(5 * MiB + 12 * KiB)],
        check=True,
        capture_output=True,
    )
    _qemu_io(
        source,
        "qcow2",
        "write -P 0x41 0 100k",
        "write -z 2M 64k",
        f"write -s {noise} {3 * MiB + 4097} 200000",
        f"write -P 0x5a {5 * MiB} 12k",
    )
    full = _as_raw(source, root / "full.raw")
    volume = root / "volume.raw"
    _run(env, cli, "import", source, volume, "--no-progress")
    copy = root / "copy.raw"
    shutil.copyfile(volume, copy)

    encrypted = root / "encrypted"
    _run(env, cli, "repo", "init", "--repo", encrypted)
    _run(env, cli, "cbt", "enable", volume)
    overlay = root / "volume.raw.cbt.qcow2"

    def back_up(env: dict[str, str], url: Path, vm: str, disk: str, path: Path) -> str:
        args = ("backup", "--repo", url, "--vm", vm, "--disk", f"{disk}={path}", "--json")
        return json.loads(_run(env, cli, *args))["disks"][0]["snapshot"]

    expected = {back_up(env, encrypted, "web", "root", volume): full}
    _qemu_io(
        overlay, "qcow2", f"write -P 0x43 {MiB + 8 * KiB} 8k", f"write -s {noise} {3 * MiB} 4k"
    )
    expected[back_up(env, encrypted, "web", "root", volume)] = _as_raw(
        overlay, root / "incremental.raw"
    )
    expected[back_up(env, encrypted, "db", "data", copy)] = full
    with Repository.open(str(encrypted), PASSWORD, cache_root=cache) as repo:
        save_metadata(repo, "default.nightly", {"kind": "Backup", "spec": {"ttl": "720h"}})
        with repo.lock("shared", "check"):
            found = read_with_reader(encrypted, PASSWORD, root / "encrypted-read")

    plain = root / "plain"
    no_password = {**env, "DISKFERRY_PASSWORD": ""}
    _run(no_password, cli, "repo", "init", "--repo", plain, "--no-encryption")
    plain_expected = {back_up(no_password, plain, "web", "root", copy): full}
    plain_found = read_with_reader(plain, None, root / "plain-read")
    return {
        "encrypted": Made(encrypted, PASSWORD, found, expected),
        "plain": Made(plain, None, plain_found, plain_expected),
    }


@pytest.mark.parametrize("kind", ["encrypted", "plain"])
def test_the_reader_rebuilds_every_disk_from_the_packs(made, kind):
    repo = made[kind]
    snapshots = {s["id"]: s for s in repo.found["snapshots"]}
    assert set(snapshots) == set(repo.expected)
    assert repo.found["encrypted"] == (kind == "encrypted")
    for snapshot_id, reference in repo.expected.items():
        rebuilt = Path(snapshots[snapshot_id]["rebuilt"])
        assert rebuilt.read_bytes() == reference.read_bytes(), snapshot_id
    # the random bytes were stored as they are, the rest as zstd frames
    assert all(repo.found["payloads"].values()), repo.found["payloads"]


def test_an_incremental_names_parts_of_its_parents_chunks(made):
    found = {s["type"]: s for s in made["encrypted"].found["snapshots"] if s["vm"] == "web"}
    assert found["incremental"]["parent"] == found["full"]["id"]
    assert found["full"]["partEntries"] == 0
    assert found["incremental"]["partEntries"] > 0
    (tracker,) = (t for t in made["encrypted"].found["trackers"] if t["vm"] == "web")
    chain = tracker["disks"]["root"]
    assert [c["snapshot"] for c in chain["checkpoints"]] == [
        found["full"]["id"],
        found["incremental"]["id"],
    ]
    assert chain["incrementals_since_full"] == 1


def test_the_document_lists_every_member_of_every_json_object(made):
    met: dict[str, set[str]] = {}
    for repo in made.values():
        for kind, names in repo.found["members"].items():
            met.setdefault(kind, set()).update(names)
    documented = {
        kind: {_code(row[0]) for row in rows} for kind, rows in _tables("members").items()
    }
    assert documented == met


def test_the_documented_defaults_are_what_init_makes(made):
    config = made["encrypted"].found["config"]
    for kind, fields in (("config", config), ("kdf", config["kdf"])):
        for row in _tables("members")[kind]:
            default = _code(row[2])
            if default:
                assert fields[_code(row[0])] == json.loads(default), (kind, row[0])


def test_the_documented_layouts_are_the_readers():
    tables = _tables("layout")
    assert set(tables) == set(format_reader.LAYOUTS)
    for name, layout in format_reader.LAYOUTS.items():
        assert [(row[0], row[1]) for row in tables[name]] == _fields(layout), name


def test_the_strings_the_format_fixes_are_in_the_document():
    text = DOC.read_text()
    fixed = [c.decode() if isinstance(c, bytes) else c for c in format_reader.CONSTANTS]
    fixed += [
        format_reader.TRAILER_AD.format(pack="<pack id>"),
        format_reader.TABLE_AD.format(path="<path>"),
        format_reader.PAGE_AD.format(path="<path>", number="<n>"),
    ]
    for value in fixed:
        assert f"`{value}`" in text or f'"{value}"' in text, value


def test_the_documented_names_are_those_the_reader_takes(made):
    shapes = {_code(row[0]): _code(row[2]) for row in _tables("names")[""]}
    name = shapes.pop("<name>")
    assert name == format_reader.NAME
    assert {k: v.replace("<name>", name) for k, v in shapes.items()} == format_reader.NAME_SHAPES
    folders = {n.split("/", 1)[0] for n in made["encrypted"].found["names"]}
    assert folders == set(format_reader.NAME_SHAPES)  # every kind of object was read


def test_the_documented_numbers_are_the_codes_and_the_readers():
    numbers = {_code(row[2]): float(row[1]) for row in _tables("numbers")[""]}
    for where, value in numbers.items():
        module, _, name = where.rpartition(".")
        assert getattr(importlib.import_module(module), name) == value, where
    crypto, codec = "diskferry.backup.crypto.", "diskferry.backup.codec."
    reader = {
        "diskferry.backup.config.FORMAT_VERSION": format_reader.FORMAT,
        codec + "MAX_PLAIN": format_reader.MAX_PLAIN,
        codec + "ID_SIZE": format_reader.ID_SIZE,
        crypto + "KEY_SIZE": format_reader.KEY_SIZE,
        crypto + "NONCE_SIZE": format_reader.NONCE_SIZE,
        crypto + "TAG_SIZE": format_reader.TAG_SIZE,
        crypto + "MAX_SCRYPT_N": format_reader.SCRYPT_MAX_N,
        crypto + "MAX_SCRYPT_R": format_reader.SCRYPT_MAX_R,
        crypto + "MAX_SCRYPT_P": format_reader.SCRYPT_MAX_P,
        crypto + "MAX_SCRYPT_MEMORY": format_reader.SCRYPT_MAX_MEMORY,
    }
    assert {where: numbers[where] for where in reader} == reader


def test_the_documented_bounds_are_the_codes_and_the_readers():
    bounds = {_code(row[2]): int(row[1]) for row in _tables("bounds")[""]}
    for where, value in bounds.items():
        module, _, name = where.rpartition(".")
        assert getattr(importlib.import_module(module), name) == value, where
    reader = {
        "diskferry.backup.bounds.MAX_CONFIG": format_reader.MAX_CONFIG,
        "diskferry.backup.bounds.MAX_KEY_FILE": format_reader.MAX_KEY_FILE,
        "diskferry.backup.bounds.MAX_LOCK": format_reader.MAX_LOCK,
        "diskferry.backup.codec.MAX_STORED": format_reader.MAX_STORED,
    }
    assert bounds == reader
    numbers = {_code(row[2]): float(row[1]) for row in _tables("numbers")[""]}
    assert numbers["diskferry.backup.snapshots.PAGE_ENTRIES"] == format_reader.PAGE_ENTRIES


def test_the_reader_imports_only_the_standard_library_and_the_primitives():
    tree = ast.parse(READER.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.partition(".")[0])
    assert imported - sys.stdlib_module_names - {"__future__"} == PRIMITIVES


def test_the_reader_runs_where_diskferry_cannot_be_imported(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = _WITHOUT_DISKFERRY.replace("format_reader.main(sys.argv[2:])", "import diskferry")
    refused = subprocess.run(
        [sys.executable, "-I", "-c", probe, str(READER.parent)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 1
    assert "ModuleNotFoundError: import of diskferry halted" in refused.stderr


@pytest.mark.parametrize(
    "damage",
    [
        "config member",
        "pack byte",
        "manifest renamed",
        "foreign name",
        "manifest cut short",
        "config past its bound",
        "lock past its bound",
    ],
)
def test_the_reader_refuses_what_parts_from_the_document(made, tmp_path, damage):
    url = tmp_path / "repo"
    shutil.copytree(made["encrypted"].url, url)
    (snapshot, *_) = sorted((url / "snapshots" / "web" / "root").iterdir())
    if damage == "config member":
        config = json.loads((url / "config").read_text())
        config["max_incrementals"] = 7
        (url / "config").write_text(json.dumps(config))
    elif damage == "pack byte":
        pack = next((url / "packs").glob("*/*"))
        data = bytearray(pack.read_bytes())
        data[12] ^= 1  # the first byte of the first chunk's ciphertext
        pack.write_bytes(data)
    elif damage == "manifest renamed":
        snapshot.rename(snapshot.with_name("0" * 16))
    elif damage == "foreign name":
        (url / "packs" / "stray").write_bytes(b"")
    elif damage == "config past its bound":  # spaces, which leave its MAC as it was
        (url / "config").write_bytes((url / "config").read_bytes() + b" " * 16 * KiB)
    elif damage == "lock past its bound":
        lock = url / "locks" / ("ab" * 12)
        lock.write_text(json.dumps(made["encrypted"].found["locks"][0]) + " " * 16 * KiB)
    else:
        data = snapshot.read_bytes()
        snapshot.write_bytes(data[: len(data) - 1])
    with pytest.raises(format_reader.FormatError):
        format_reader.read_all(url, made["encrypted"].password, tmp_path)


def _tables(marker: str) -> dict[str, list[list[str]]]:
    """The document's tables that follow a `<!-- marker: name -->` line (or `<!-- marker -->`,
    under ""), by name: their rows below the header, as cells."""
    found: dict[str, list[list[str]]] = {}
    rows: list[list[str]] | None = None
    for line in DOC.read_text().splitlines():
        opened = re.fullmatch(rf"<!-- {marker}(?:: (.+))? -->", line)
        if opened:
            rows = found.setdefault(opened.group(1) or "", [])
            continue
        if rows is None:
            continue
        if not line.startswith("|"):
            if rows:
                rows = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not set(cells[0]) <= {"-"}:
            rows.append(cells)
    return {name: rows[1:] for name, rows in found.items()}


def _code(cell: str) -> str:
    """A table cell's text without the backticks around it."""
    return cell.strip().strip("`")


def _fields(layout: struct.Struct) -> list[tuple[str, str]]:
    """The (bytes, type) of each field of a little-endian struct, as the document writes them."""
    names = {"I": "u32", "Q": "u64", "i": "i32", "B": "u8"}
    fields = []
    for count, code in re.findall(r"(\d*)([A-Za-z])", layout.format):
        if code == "s":
            fields.append((count, f"bytes[{count}]"))
        else:
            fields.append((str(struct.calcsize("<" + code)), names[code]))
    return fields
