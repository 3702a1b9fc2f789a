"""The export servers in a cluster (`host.servers`): each on 8443 of its worker Pod (every
address of the Pod, which the worker takes as its Pod's), behind a headless Service named as
KubeVirt names it, `virt-export-<name>`, whose names its certificate is for; the Pod runner
makes that Service with the Pod, named by the first of them, and removes it with the Pod.

Exposing a started server makes the export own its Pod, the Pod's Secret and the Service (so
that they go with it), and makes the Service again when it was deleted while the server runs.
A server answers once it serves its readiness path on its Pod's IP, verified as its Service's
name.
"""

from __future__ import annotations

import contextlib
from typing import Any, TypeVar

from diskferry.control.errors import AlreadyExistsError, NotFoundError
from diskferry.control.host.servers import ServerPlace, answers
from diskferry.control.resources.model import Resource
from diskferry.export import service_name
from diskferry.kube.api import KubeApi
from diskferry.kube.pods import job_service, pod_name, service_names
from diskferry.kube.runner import POD, SECRET, SERVER_PORT, SERVICE
from diskferry.worker.pod import EVERY_ADDRESS

M = TypeVar("M", bound=Resource)
Obj = dict[str, Any]


def owner_reference(obj: Resource) -> Obj:
    """The reference by which `obj` owns (and controls) what is made for it."""
    return {
        "apiVersion": obj.api_version,
        "kind": obj.kind,
        "name": obj.metadata.name,
        "uid": obj.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


class ServiceServers:
    """Places export servers behind their Services through `api`."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def service_name(self, obj: Resource) -> str:
        """`virt-export-<name>` (shortened with a digest where that is no DNS label)."""
        return service_name(obj.metadata.name or "")

    def _place(self, obj: Resource) -> ServerPlace:
        names = service_names(self.service_name(obj), obj.metadata.namespace or "")
        return ServerPlace(
            EVERY_ADDRESS[0], SERVER_PORT, names, f"https://{names[2]}:{SERVER_PORT}"
        )

    def place(self, obj: M, job_id: str) -> tuple[M, ServerPlace]:
        """Every address of its Pod, 8443, and its Service's names."""
        return obj, self._place(obj)

    def placed(self, obj: Resource) -> ServerPlace:
        """Where it was placed: the same, always."""
        return self._place(obj)

    def _adopt(self, kind: tuple[str, str], found: Obj, ref: Obj) -> None:
        """Make `ref` an owner of the object `found` of `kind`, unless it is one."""
        meta = found["metadata"]
        refs = meta.get("ownerReferences") or []
        if any(r.get("uid") == ref["uid"] for r in refs):
            return
        controlled = any(r.get("controller") for r in refs)
        added = {**ref, "controller": not controlled}
        with contextlib.suppress(NotFoundError):  # gone meanwhile
            self.api.patch(
                *kind,
                meta["namespace"],
                meta["name"],
                {"metadata": {"ownerReferences": [*refs, added]}},
            )

    def expose(self, obj: Resource, job_id: str) -> None:
        """Own the server's Pod, its Secret and its Service, and make the Service again when
        it is gone while the Pod is there."""
        namespace, ref = obj.metadata.namespace or "", owner_reference(obj)
        pod = self.api.get(*POD, namespace, pod_name(job_id))
        if pod is None:
            return
        self._adopt(POD, pod, ref)
        secret = self.api.get(*SECRET, namespace, pod_name(job_id))
        if secret is not None:
            self._adopt(SECRET, secret, ref)
        name = self.service_name(obj)
        service = self.api.get(*SERVICE, namespace, name)
        if service is None:
            made = job_service(job_id, namespace, name, SERVER_PORT, ref)
            with contextlib.suppress(AlreadyExistsError):
                self.api.create(*SERVICE, namespace, made)
            return
        self._adopt(SERVICE, service, ref)

    def answers(self, obj: Resource, job_id: str, place: ServerPlace, ca_pem: bytes) -> bool:
        """Whether the server answers on its Pod's IP, as its Service's name."""
        pod = self.api.get(*POD, obj.metadata.namespace, pod_name(job_id))
        status = (pod or {}).get("status") or {}
        address = status.get("podIP")
        if status.get("phase") != "Running" or not address:
            return False
        return answers(place.port, ca_pem, host=address, name=place.sans[2])

    def unexpose(self, obj: Resource) -> None:
        """Remove the Service (the Pod runner removes it with the Pod; one made again after
        goes here)."""
        self.api.delete(*SERVICE, obj.metadata.namespace, self.service_name(obj))
