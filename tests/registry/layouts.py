"""OCI image layouts built by hand (the way `FROM scratch` + `ADD disk.qcow2 /disk/` builds one)."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

COMPRESSED = {
    None: ("application/vnd.oci.image.layer.v1.tar", None),
    "gzip": ("application/vnd.oci.image.layer.v1.tar+gzip", ["gzip", "-1", "-c"]),
    "zstd": ("application/vnd.oci.image.layer.v1.tar+zstd", ["zstd", "-q", "-c"]),
    "xz": ("application/vnd.oci.image.layer.v1.tar+xz", ["xz", "-0", "-c"]),
}


def layer_tar(entries: list[tuple[str, Path | None]], uid: int = 107) -> bytes:
    """A tar of `entries`: (name, file) pairs, a None file meaning a directory."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, path in entries:
            info = tarfile.TarInfo(name)
            info.uid = info.gid = uid
            if path is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = path.stat().st_size, 0o644
                with open(path, "rb") as f:
                    tar.addfile(info, f)
    return out.getvalue()


def _blob(layout: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def make_layout(layout: Path, tar: bytes, compression: str | None = None, tag: str = "v1") -> None:
    """An OCI layout holding one image of one layer (`tar`, compressed), tagged `tag`."""
    media_type, command = COMPRESSED[compression]
    data = (
        tar if command is None else subprocess.run(command, input=tar, capture_output=True).stdout
    )
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    layer = {"mediaType": media_type, **_blob(layout, data)}
    config = {
        "architecture": "amd64",
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(tar).hexdigest()}"]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            **_blob(layout, json.dumps(config).encode()),
        },
        "layers": [layer],
    }
    entry = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        **_blob(layout, json.dumps(manifest).encode()),
        "annotations": {"org.opencontainers.image.ref.name": tag},
    }
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
