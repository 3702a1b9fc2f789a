"""Where the daemon, the export servers, the export proxy, the operator and workers in Pods
listen, and where the daemon keeps its state, unless told otherwise; light enough for the CLI to
show them in its help. deploy/ names the same ports, and tests/deploy checks that it does."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_PORT = 7443
DEFAULT_ADDRESS = "127.0.0.1"
PROXY_PORT = 7444
EXPORT_PORT = 8443
"""Where an export server, an upload server and the export proxy listen when given no port, as
KubeVirt's do in their Pods: the proxy's Service in deploy/ takes 443 to this port."""
OPERATOR_HEALTH_PORT = 8081
"""Where `diskferry operator` answers its probes, GET /healthz and /readyz over plain HTTP (as
controller-runtime's health probe address): the operator Deployment's probes name this port."""
WORKER_STATUS_PORT = 8082
"""Where a worker in a Pod answers GET /progress and /metrics, on its Pod's IP: the port its
Pod declares, which the operator reads progress from (a worker on the daemon's host picks one)."""
ROOT_DATA_DIR = Path("/var/lib/diskferry")
USER_DATA_DIR = Path("diskferry-data")


def default_data_dir() -> Path:
    """/var/lib/diskferry for root, ./diskferry-data for anyone else."""
    return ROOT_DATA_DIR if os.geteuid() == 0 else USER_DATA_DIR
