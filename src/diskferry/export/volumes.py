"""The volumes of an export: `NAME=PATH` as a disk (file, device, NBD URL) or a directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from diskferry.base.errors import BAD_USAGE
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.schemes import is_nbd_url
from diskferry.disk.volume import Volume
from diskferry.export.errors import ExportError
from diskferry.nbd import open_volume

DIR_DISK = "disk.img"


@dataclass
class ExportedVolume:
    """A named volume: a disk (raw, compressed, extents) and/or a directory (tar.gz, dir/)."""

    name: str
    disk: Volume | None = None
    directory: Path | None = None
    bitmap: str | None = None

    def close(self) -> None:
        """Close the disk."""
        if self.disk is not None:
            self.disk.close()


def parse_spec(spec: str) -> tuple[str, str]:
    """Split `NAME=VALUE` (a volume's path, or its bitmap)."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not path or "/" in name:
        raise ExportError(f"{spec!r} is not NAME=VALUE (a name without '/')", reason=BAD_USAGE)
    return name, path


def open_exported(
    name: str,
    path: str,
    bitmap: str | None = None,
    data_file: str | None = None,
    quiescent: bool = False,
) -> ExportedVolume:
    """A directory as files (its disk.img as the disk); a file, device or NBD URL as a disk.

    `bitmap` names the dirty bitmap an NBD export carries: its map then shows what changed.
    `data_file` is the raw volume under a backup point's export, which `quiescent` says
    nothing writes while the export lives.
    """
    p = Path(path)
    if bitmap is not None:
        disk = open_volume(path, bitmap=bitmap, data_file=data_file, quiescent=quiescent)
        return ExportedVolume(name, disk=disk, bitmap=bitmap)
    if p.is_dir():
        disk = FileVolume(p / DIR_DISK) if (p / DIR_DISK).is_file() else None
        return ExportedVolume(name, disk=disk, directory=p)
    if not is_nbd_url(path) and not p.exists():
        raise ExportError(f"volume {name}: {path} does not exist")
    return ExportedVolume(name, disk=open_volume(path, data_file=data_file, quiescent=quiescent))
