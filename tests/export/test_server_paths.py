"""The export server's paths, checked with curl and standard decompressors."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
from pathlib import Path

from export_support import TOKEN, curl
from server_support import Running

AUTH = f"x-kubevirt-export-token: {TOKEN}"


def _head(r: Running, path: str) -> dict[str, str]:
    out = curl("-I", "-H", AUTH, r.url + path, ca=r.ca).stdout.decode()
    lines = out.splitlines()
    headers = {"status": lines[0].split()[1]}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers


def _get(r: Running, path: str, *args: str) -> tuple[int, bytes]:
    p = curl("-H", AUTH, "-w", "\n%{http_code}", *args, r.url + path, ca=r.ca)
    body, _, code = p.stdout.rpartition(b"\n")
    return int(code), body


def test_head_reports_length_and_ranges(export: Running, disk: Path) -> None:
    h = _head(export, "/volumes/disk/disk.img")
    assert h["status"] == "200"
    assert int(h["content-length"]) == disk.stat().st_size
    assert h["accept-ranges"] == "bytes"


def test_whole_disk_and_ranges(export: Running, disk: Path) -> None:
    data = disk.read_bytes()
    size = len(data)
    code, body = _get(export, "/volumes/disk/disk.img")
    assert code == 200 and body == data
    for rng, start, end in [
        ("0-1023", 0, 1024),
        ("1048570-2097160", 1048570, 2097161),
        (f"{size - 100}-", size - 100, size),
        ("-4096", size - 4096, size),
        (f"{size - 10}-{size + 1000}", size - 10, size),
    ]:
        p = curl(
            "-H",
            AUTH,
            "-H",
            f"Range: bytes={rng}",
            "-D",
            "-",
            export.url + "/volumes/disk/disk.img",
            ca=export.ca,
        )
        head, _, body = p.stdout.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 206"), head
        assert f"content-range: bytes {start}-{end - 1}/{size}".encode() in head.lower()
        assert body == data[start:end], rng


def test_qemu_reads_the_disk_over_https(export: Running, disk: Path, tmp_path: Path) -> None:
    url = f"{export.url}/volumes/disk/disk.img?x-kubevirt-export-token={TOKEN}"
    spec = json.dumps({"file.driver": "https", "file.url": url, "file.sslverify": False})
    out = tmp_path / "copy.raw"
    # one coroutine: with more, qemu-img's https driver here can hang for good
    convert = ["qemu-img", "convert", "-m", "1", "-O", "raw", f"json:{spec}", str(out)]
    subprocess.run(convert, check=True, timeout=120)
    assert out.read_bytes() == disk.read_bytes()


def test_unsatisfiable_range_is_416(export: Running, disk: Path) -> None:
    size = disk.stat().st_size
    p = curl(
        "-H",
        AUTH,
        "-H",
        f"Range: bytes={size}-",
        "-D",
        "-",
        "-o",
        "/dev/null",
        export.url + "/volumes/disk/disk.img",
        ca=export.ca,
    )
    head = p.stdout.decode().lower()
    assert head.startswith("http/1.1 416")
    assert f"content-range: bytes */{size}" in head


def test_token_by_header_query_and_refusals(export: Running, token_file: Path) -> None:
    url = export.url + "/volumes/disk/extents"
    assert (
        curl("-o", "/dev/null", "-w", "%{http_code}", "-H", AUTH, url, ca=export.ca).stdout
        == b"200"
    )
    q = f"{url}?x-kubevirt-export-token={TOKEN}"
    assert curl("-o", "/dev/null", "-w", "%{http_code}", q, ca=export.ca).stdout == b"200"
    for extra in ([], ["-H", "x-kubevirt-export-token: wrong"]):
        p = curl("-w", "\n%{http_code}", *extra, url, ca=export.ca)
        body, _, code = p.stdout.rpartition(b"\n")
        assert code == b"401"
        assert json.loads(body)["reason"] in ("MissingToken", "BadToken")
    token_file.write_text("rotated\n")
    assert (
        curl("-o", "/dev/null", "-w", "%{http_code}", "-H", AUTH, url, ca=export.ca).stdout
        == b"401"
    )
    rotated = curl(
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        "x-kubevirt-export-token: rotated",
        url,
        ca=export.ca,
    )
    assert rotated.stdout == b"200"
    assert (
        curl(
            "-o", "/dev/null", "-w", "%{http_code}", export.url + "/exportready", ca=export.ca
        ).stdout
        == b"200"
    )


def test_access_log_never_shows_the_token(export: Running) -> None:
    curl(
        "-o",
        "/dev/null",
        f"{export.url}/volumes/disk/extents?x-kubevirt-export-token={TOKEN}",
        ca=export.ca,
    )
    curl(
        "-o",
        "/dev/null",
        f"{export.url}/volumes/disk/extents?x-kubevirt-export-token=wrong-guess",
        ca=export.ca,
    )
    export.stop()
    log = export.log.read_text()
    assert "/volumes/disk/extents" in log
    assert TOKEN not in log and "wrong-guess" not in log


def test_gzip_and_zstd_streams(export: Running, disk: Path, tmp_path: Path) -> None:
    for suffix, check in (("gz", ["gunzip", "-t"]), ("zst", ["zstd", "-q", "-t"])):
        out = tmp_path / f"disk.img.{suffix}"
        code, _ = _get(export, f"/volumes/disk/disk.img.{suffix}", "-o", str(out))
        assert code == 200
        subprocess.run([*check, str(out)], check=True)
    assert gzip.decompress((tmp_path / "disk.img.gz").read_bytes()) == disk.read_bytes()
    plain = subprocess.run(
        ["zstd", "-dc", str(tmp_path / "disk.img.zst")], capture_output=True, check=True
    )
    assert plain.stdout == disk.read_bytes()


def test_directory_volume_as_tar_and_dir(export_factory, tmp_path: Path) -> None:
    root = tmp_path / "files"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "b.bin").write_bytes(bytes(range(256)) * 100)
    r = export_factory({"files": root})
    code, body = _get(r, "/volumes/files/disk.tar.gz")
    assert code == 200
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == ["a.txt", "sub", "sub/b.bin"]
        assert tar.extractfile("sub/b.bin").read() == (root / "sub" / "b.bin").read_bytes()
    code, body = _get(r, "/volumes/files/dir/")
    assert code == 200 and b'href="a.txt"' in body and b'href="sub/"' in body
    assert _get(r, "/volumes/files/dir/sub/b.bin") == (200, (root / "sub" / "b.bin").read_bytes())
    assert _get(r, "/volumes/files/dir/..%2F..%2Fetc%2Fpasswd")[0] == 404
    assert _get(r, "/volumes/files/disk.img")[0] == 404


def test_directory_with_a_disk_image_serves_both(
    export_factory, tmp_path: Path, disk: Path
) -> None:
    root = tmp_path / "pvc"
    root.mkdir()
    (root / "disk.img").write_bytes(disk.read_bytes())
    r = export_factory({"pvc": root})
    assert _get(r, "/volumes/pvc/disk.img") == (200, disk.read_bytes())
    code, body = _get(r, "/volumes/pvc/disk.tar.gz")
    assert code == 200
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        assert tar.getnames() == ["disk.img"]


def test_extents_pages_and_map(export: Running, disk: Path) -> None:
    code, body = _get(export, "/volumes/disk/extents")
    assert code == 200
    page = json.loads(body)
    assert page["next_offset"] is None
    kinds = [(e["offset"], e["length"], e["type"]) for e in page["extents"]]
    assert sum(length for _, length, _ in kinds) == disk.stat().st_size
    data = [k for k in kinds if k[2] == "data"]
    assert data[0][0] == 1 << 20 and data[-1][0] + data[-1][1] == disk.stat().st_size
    collected, offset = [], 0
    while offset is not None:
        code, body = _get(export, f"/volumes/disk/extents?offset={offset}&page_size=2")
        page = json.loads(body)
        assert len(page["extents"]) <= 2
        collected += [(e["offset"], e["length"], e["type"]) for e in page["extents"]]
        offset = page["next_offset"]
    assert collected == kinds
    code, body = _get(export, "/exports/disk/map?offset=0&length=2097152")
    assert json.loads(body)["extents"] == [
        {"offset": 0, "length": 1 << 20, "type": "zero"},
        {"offset": 1 << 20, "length": 1 << 20, "type": "data"},
    ]
    assert _get(export, "/exports/disk/map", "-X", "POST")[0] == 405
    assert _get(export, "/volumes/disk/extents", "-X", "PUT")[0] == 405
    assert _get(export, "/volumes/disk/extents?offset=abc")[0] == 400


def test_data_endpoint(export: Running, disk: Path) -> None:
    data = disk.read_bytes()
    code, body = _get(export, "/exports/disk/data?offset=1048000&length=5000")
    assert code == 200 and body == data[1048000:1053000]
    code, _ = _get(export, f"/exports/disk/data?offset={len(data)}&length=1")
    assert code == 416


def test_manifests(export_factory, disk: Path, tmp_path: Path) -> None:
    import yaml

    manifest = tmp_path / "vm.yaml"
    manifest.write_text(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm1\n"
    )
    r = export_factory({"disk": disk}, "--manifest", str(manifest))
    accept = ("-H", "Accept: application/yaml")
    for kind in ("internal", "external"):
        code, body = _get(r, f"/{kind}/manifests/all", *accept)
        assert code == 200 and next(yaml.safe_load_all(body))["kind"] == "VirtualMachine"
        code, body = _get(r, f"/{kind}/manifests/secret", *accept)
        secret = next(yaml.safe_load_all(body))
        assert secret["kind"] == "Secret"
        assert secret["stringData"]["token"] == f"x-kubevirt-export-token:{TOKEN}"
    assert _get(r, "/volumes/none/disk.img")[0] == 404


def test_links_json(export_factory, disk: Path, tmp_path: Path, ca_dir: Path) -> None:
    links = tmp_path / "links.json"
    external_ca = tmp_path / "proxy-ca.crt"
    external_ca.write_text("-----BEGIN CERTIFICATE-----\nproxy\n-----END CERTIFICATE-----\n")
    ext = "https://proxy.example/api/export.kubevirt.io/v1beta1/namespaces/ns/virtualmachineexports/vm1"
    export_factory(
        {"disk": disk},
        "--links-json",
        str(links),
        "--internal-url",
        "https://vm1.ns.svc:8443",
        "--external-url",
        ext,
        "--external-ca",
        str(external_ca),
    )
    doc = json.loads(links.read_text())
    assert doc["internal"]["cert"] == (ca_dir / "ca.crt").read_text()
    assert doc["external"]["cert"] == external_ca.read_text()
    formats = {f["format"]: f["url"] for f in doc["external"]["volumes"][0]["formats"]}
    assert formats["raw"] == ext + "/volumes/disk/disk.img"
    assert formats["gzip"] == ext + "/volumes/disk/disk.img.gz"
    assert doc["internal"]["manifests"] == [
        {"type": "auth-header-secret", "url": "https://vm1.ns.svc:8443/internal/manifests/secret"}
    ]
    endpoints = doc["internal"]["backups"][0]["endpoints"]
    assert {e["endpoint"] for e in endpoints} == {"map", "data"}
