"""The base every layer may use, importing nothing of the project: the typed errors all layers
raise, the process helpers (children tied to their parent, a process known across pid reuse,
the C heap, CPUs, the C library, a quick exit), the pause between retries, and packages' faces.

Its face names what the command line takes; each name is loaded when first used (`faces`).
"""

from diskferry.base.faces import lazy_face

__all__, __getattr__, __dir__ = lazy_face(
    __name__,
    {
        "errors": ("BAD_USAGE", "CancelledError", "DiskferryError"),
        "heap": ("limit_arenas",),
        "quick_exit": ("freeze_at_exit",),
    },
)
