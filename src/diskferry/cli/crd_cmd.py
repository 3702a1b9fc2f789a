"""`diskferry crds`: the CustomResourceDefinitions of the diskferry.io kinds, as YAML."""

from __future__ import annotations

from typing import Annotated

import typer

Kinds = Annotated[
    list[str] | None,
    typer.Argument(help="Only these kinds (kind, plural or short name); all when none given."),
]


def crds_command(kinds: Kinds = None) -> None:
    """Print the CRDs (apiextensions.k8s.io/v1) for `kubectl apply -f -` on a cluster."""
    from diskferry.control.apiserver.crd import crd, crds, crds_yaml
    from diskferry.control.errors import NotFoundError
    from diskferry.control.resources.model import GROUP
    from diskferry.control.resources.registry import REGISTRY

    if not kinds:
        documents = crds(REGISTRY)
    else:
        try:
            infos = [REGISTRY.lookup(name) for name in kinds]
        except NotFoundError as e:
            raise typer.BadParameter(e.message) from None
        outside = [info.kind for info in infos if info.group != GROUP]
        if outside:
            raise typer.BadParameter(f"{', '.join(outside)} is built in, not a custom resource")
        documents = [crd(info) for info in infos]
    print(crds_yaml(documents), end="")


def register(app: typer.Typer) -> None:
    """Add `crds`."""
    app.command("crds")(crds_command)
