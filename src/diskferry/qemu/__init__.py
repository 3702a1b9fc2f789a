"""Adapters to QEMU: qemu-img, QMP, qemu-storage-daemon, changed-block tracking.

Each name of the face is loaded when first used (diskferry.base.faces).
"""

from diskferry.base.faces import lazy_face

__all__, __getattr__, __dir__ = lazy_face(
    __name__,
    {
        "cbt": ("CbtDisk", "CbtError", "CbtStatus", "status as cbt_status"),
        "img": (
            "ImageInfo",
            "QemuImgError",
            "compare as compare_images",
            "convert as convert_image",
            "info as image_info",
        ),
        "nbd_server": ("NbdServeOptions", "NbdServer", "NbdServerError"),
        "qmp": ("Qmp", "QmpError"),
        "storage_daemon": ("StorageDaemon", "StorageDaemonError"),
    },
)
