"""The proxy's routes in a cluster: each export's Service named from the export's name as a DNS
label the operator and the proxy agree on, names that no export could have refused, and a job
that names one way to route."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from diskferry.export import ProxyJob, service_name
from diskferry.export.service_routes import ServiceRoutes

LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def test_a_short_name_is_kubevirts_service_name() -> None:
    assert service_name("vm1") == "virt-export-vm1"


@pytest.mark.parametrize("name", ["a" * 60, "disk.of.vm1", "x" * 253, "a-" * 40 + "b"])
def test_a_name_that_is_no_label_gets_a_label_of_its_own(name: str) -> None:
    made = service_name(name)
    assert LABEL.match(made), made
    assert made.startswith("virt-export-")
    assert service_name(name) == made
    assert service_name(name + "0") != made


def test_an_export_is_routed_to_its_service_verified_by_the_ca() -> None:
    route = ServiceRoutes("/etc/ca.crt").get("default", "vm1")
    assert route is not None
    assert route.url == "https://virt-export-vm1.default.svc:8443"
    assert route.ca_file == "/etc/ca.crt"
    assert route.ready and route.unix_socket is None


@pytest.mark.parametrize(
    ("namespace", "name"),
    [
        ("default", "vm1.evil.example.com."),
        ("default", "VM1"),
        ("default", "a%2Fb"),
        ("Default", "vm1"),
        ("kube.system", "vm1"),
        ("n" * 64, "vm1"),
        ("default", ""),
    ],
)
def test_a_name_no_export_could_have_is_no_route(namespace: str, name: str) -> None:
    assert ServiceRoutes("/etc/ca.crt").get(namespace, name) is None


def test_a_dotted_name_is_routed_to_the_label_made_of_it() -> None:
    route = ServiceRoutes("/etc/ca.crt").get("default", "disk.of.vm1")
    assert route is not None
    assert route.url == f"https://{service_name('disk.of.vm1')}.default.svc:8443"


@pytest.mark.parametrize(
    "ways", [{}, {"routes": "routes.yaml", "servicesCa": "ca.crt"}], ids=["none", "both"]
)
def test_a_proxy_job_names_one_way_to_route(ways: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="give routes or servicesCa"):
        ProxyJob.model_validate({"certDir": ".", **ways})
    assert ProxyJob.model_validate({"certDir": ".", "servicesCa": "ca.crt"}).routes is None
