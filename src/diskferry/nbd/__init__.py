"""The project's NBD client and NbdVolume, and opening a volume from a path or NBD URL.

Each name of the face is loaded when first used (diskferry.base.faces).
"""

from diskferry.base.faces import lazy_face

__all__, __getattr__, __dir__ = lazy_face(
    __name__,
    {
        "client": ("NbdClient",),
        "errors": ("NbdConnectionError", "NbdError", "NbdUrlError"),
        "open": ("open_volume",),
        "protocol": ("DEFAULT_PORT",),
        "url": ("NbdUrl", "parse_url as parse_nbd_url"),
        "volume": ("NbdVolume",),
    },
)
