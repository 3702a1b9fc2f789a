"""OCI distribution: references, auth, a registry client, and containerDisk images.

Each name of the face is loaded when first used (diskferry.base.faces).
"""

from diskferry.base.faces import lazy_face

__all__, __getattr__, __dir__ = lazy_face(
    __name__,
    {
        "auth": ("Credentials", "parse_creds"),
        "client": ("RegistryClient", "RegistryOptions", "is_loopback"),
        "disk_in_layer": ("DiskInLayer", "disk_in_layout"),
        "errors": ("BadReferenceError", "RegistryError", "UnauthorizedError"),
        "images": ("delete_manifest", "describe", "get_manifest", "list_tags", "resolve"),
        "layout": ("Layout", "parse_layout_reference"),
        "reference": ("Reference", "parse_reference"),
        "serve": ("RegistryServer",),
    },
)
