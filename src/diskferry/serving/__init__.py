"""HTTPS serving the engines share: certificates, reloading TLS, the listener, the run loop.

Each name of the face is loaded when first used (diskferry.base.faces).
"""

from diskferry.base.faces import lazy_face

__all__, __getattr__, __dir__ = lazy_face(
    __name__,
    {
        "certs": (
            "CA_CERT",
            "CA_KEY",
            "PairedCerts",
            "create_ca",
            "default_sans",
            "issue_pair",
            "issue_server_cert",
        ),
        "defaults": (
            "DEFAULT_ADDRESS",
            "DEFAULT_PORT",
            "EXPORT_PORT",
            "OPERATOR_HEALTH_PORT",
            "PROXY_PORT",
            "WORKER_STATUS_PORT",
            "default_data_dir",
        ),
        "errors": ("ServeError", "TlsSetupError"),
        "listening": ("Listening",),
        "tls": ("TLS_CERT", "TLS_KEY"),
    },
)
