"""The stand-in cluster the cluster shape is tested against, where no kube-apiserver can run.

    .venv/bin/python tests/standin.py --data-dir D [--address 127.0.0.x] [--port N]
        [--nodes a,b]

It runs the embedded API with Kubernetes' own kinds served too, as objects without controllers
(Pods, Nodes, Services, claims, Deployments, Leases, RBAC, CRDs, Routes, Ingresses, KubeVirt's
kinds: diskferry.control.resources.foreign), the role envtest plays for Go operators, and
beside it the few controllers the operator's work needs (`standins`): storage that provisions
and binds volumes for claims (standin_storage), a scheduler that binds Pods to the nodes their
claims' volumes allow (standin_scheduler), a kubelet that runs them in podman from the image of
`make image` on its nodes, all on this host (standin_kubelet), and KubeVirt's answer to a Pull
VirtualMachineBackup, a backup point served from the VM's claims (standin_kubevirt). It writes
D/kubeconfig once the API answers over HTTPS, takes `kubectl apply` of anything a cluster admin
applies (it stores every object and runs no Deployment: the operator runs on the host,
`diskferry operator --kubeconfig D/kubeconfig`), and stops everything on SIGTERM or SIGINT.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from standin_kubelet import Kubelet
from standin_kubevirt import KubeVirt
from standin_scheduler import DEFAULT_NODE, Scheduler
from standin_storage import Storage

from diskferry.control.apiserver.objects import KEEP_CHANGES
from diskferry.control.daemon import BackgroundFactory, Daemon
from diskferry.control.resources.foreign import with_foreign_kinds
from diskferry.control.resources.registry import REGISTRY

KUBE_PORT = 6443


def standins(nodes: tuple[str, ...]) -> list[BackgroundFactory]:
    """What runs beside the API, started with it and stopped on SIGTERM: the storage (volumes
    provisioned for claims, and bound), the scheduler, which binds Pods to `nodes`, the
    kubelet, which runs the Pods bound to them in podman and writes their status back, and
    KubeVirt's backup controller, which serves the backup points of Pull
    VirtualMachineBackups."""
    return [
        lambda daemon: Storage(daemon.service, daemon.data_dir),
        lambda daemon: Scheduler(daemon.service, nodes),
        lambda daemon: Kubelet(daemon.service, daemon.data_dir, nodes),
        lambda daemon: KubeVirt(daemon.service, daemon.data_dir),
    ]


def standin(
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="State, certificates, token and kubeconfig.")
    ],
    address: Annotated[
        str, typer.Option("--address", help="A loopback address to listen on.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", help="HTTPS port of the API (0: any free one).")
    ] = KUBE_PORT,
    keep_changes: Annotated[
        int,
        typer.Option(
            "--keep-changes",
            help="Changes kept for watches to resume from; fewer make a watch that fell behind "
            "get 410 Gone sooner, as an etcd compacted often does.",
        ),
    ] = KEEP_CHANGES,
    nodes: Annotated[
        str,
        typer.Option(
            "--nodes",
            help="The nodes' names, comma-separated: Pods are bound to the one their claims' "
            "volumes allow, and all run on this host.",
        ),
    ] = DEFAULT_NODE,
) -> None:
    """Serve the stand-in cluster's API until SIGTERM or SIGINT."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    daemon = Daemon(
        data_dir,
        address=address,
        port=port,
        registry=with_foreign_kinds(REGISTRY),
        background=standins(tuple(n for n in nodes.split(",") if n)),
        keep_changes=keep_changes,
    )
    daemon.kubeconfig_path.unlink(missing_ok=True)  # written again once this one answers
    daemon.run()


if __name__ == "__main__":
    typer.run(standin)
