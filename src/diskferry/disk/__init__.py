"""The byte layer: volumes, extents, copying, formats, progress.

Its face names what other layers take; each name is loaded when first used (diskferry.base.faces).
"""

from diskferry.base.faces import lazy_face

__all__, __getattr__, __dir__ = lazy_face(
    __name__,
    {
        "blank": ("create_blank",),
        "checksums": ("Checksum", "ChecksumError"),
        "clone": ("CloneError", "CloneResult", "clone_volume", "reflink_volume"),
        "copy": ("CopyResult", "copy as copy_volume"),
        "decompress": ("DecompressError",),
        "errors": ("VolumeError",),
        "extent": ("Extent",),
        "file_volume": ("FileVolume", "is_block_device"),
        "formats": ("FormatError",),
        "grow": ("grow_volume",),
        "http_volume": ("HttpVolume",),
        "prime": ("Target", "TargetError", "recorded_job"),
        "progress": ("Progress",),
        "schemes": ("is_layout_reference", "is_nbd_url", "is_reference"),
        "sizes": ("SizeError", "format_size", "parse_size"),
        "urls": ("http_url_for_message",),
        "volume": ("Volume",),
    },
)
