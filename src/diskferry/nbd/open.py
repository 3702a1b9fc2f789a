"""open_volume: a Volume from what a user typed, an NBD URL or a file or device path."""

from __future__ import annotations

import threading

from diskferry.disk.errors import VolumeError
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.schemes import is_nbd_url
from diskferry.disk.volume import Volume
from diskferry.nbd.client import DEFAULT_REQUEST_TIMEOUT


def open_volume(
    spec: str,
    *,
    writable: bool = False,
    bitmap: str | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    cancel: threading.Event | None = None,
    data_file: str | None = None,
    quiescent: bool = False,
) -> Volume:
    """Open `spec`: nbd:// and nbd+unix:// URLs as NbdVolume, anything else as a FileVolume.

    `request_timeout` and `cancel` bound the waits of an NBD volume, and `data_file` names
    the raw volume under a backup point's fleecing export, which `quiescent` says nothing
    writes while it lives (see NbdVolume.open).
    """
    if is_nbd_url(spec):
        from diskferry.nbd.volume import NbdVolume

        return NbdVolume.open(
            spec,
            writable=writable,
            bitmap=bitmap,
            request_timeout=request_timeout,
            cancel=cancel,
            data_file=data_file,
            quiescent=quiescent,
        )
    if bitmap is not None:
        raise VolumeError(
            f"dirty bitmap {bitmap!r} asked of {spec}, which is not an NBD export: "
            "give an nbd:// or nbd+unix:// URL"
        )
    return FileVolume(spec, writable=writable)
