"""The export engine: an HTTPS export server, the export proxy, and a resuming download client.

Its face: the jobs (export, backup point, proxy), their result and phases, the proxy's routes
(and the names of the Services it finds servers by in a cluster), the functions that serve
them, the download client, and the errors; each loaded when first used (diskferry.base.faces).
"""

from diskferry.base.faces import lazy_face

__all__, __getattr__, __dir__ = lazy_face(
    __name__,
    {
        "backuppoint": ("BackupPointJob", "serve_backup_point"),
        "cluster_api": ("ClusterApi",),
        "download": ("DownloadRequest", "DownloadResult", "download as download_volume"),
        "errors": ("DownloadError", "ExportError", "RoutesError"),
        "job": (
            "ExportJob",
            "ExportPhase",
            "ExportVolumeSpec",
            "LinkSettings",
            "ProxyJob",
            "ServeResult",
        ),
        "routes": ("Route", "RoutesDocument"),
        "service": ("serve_export", "serve_proxy"),
        "service_routes": ("service_host", "service_name", "service_url"),
        "token": ("TokenFile",),
        "volumes": ("parse_spec as parse_volume_spec",),
    },
)
