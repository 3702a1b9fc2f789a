"""The stand-in cluster's names: a headless Service's name leads to the running Pods it selects
in its namespace (with publishNotReadyAddresses, to every one with an IP that has not ended),
and to nothing else."""

from __future__ import annotations

from typing import Any

from standin_dns import service_lines


def _pod(name: str, namespace: str, labels: dict[str, str], ip: str, **status: Any) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "status": {"phase": "Running", "podIP": ip, **status},
    }


def _service(
    name: str, namespace: str, selector: dict[str, str], cluster_ip: str = "None", **spec: Any
) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterIP": cluster_ip, "selector": selector, **spec},
    }


def test_a_headless_service_names_the_running_pods_it_selects() -> None:
    pods = [
        _pod("a", "default", {"app": "x"}, "127.1.1.1"),
        _pod("b", "default", {"app": "x", "more": "y"}, "127.1.1.2"),
        _pod("c", "other", {"app": "x"}, "127.1.1.3"),
        _pod("d", "default", {"app": "z"}, "127.1.1.4"),
        _pod("e", "default", {"app": "x"}, "127.1.1.5", phase="Pending"),
    ]
    services = [
        _service("virt-export-x", "default", {"app": "x"}),
        _service("proxy", "default", {"app": "z"}, cluster_ip="10.0.0.1"),
    ]
    assert service_lines(services, pods) == [
        "127.1.1.1\tvirt-export-x.default.svc virt-export-x.default.svc.cluster.local",
        "127.1.1.2\tvirt-export-x.default.svc virt-export-x.default.svc.cluster.local",
    ]


def test_a_pod_being_deleted_is_named_no_more() -> None:
    pod = _pod("a", "default", {"app": "x"}, "127.1.1.1")
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert service_lines([_service("s", "default", {"app": "x"})], [pod]) == []


def test_a_service_that_publishes_pods_not_ready_names_those_with_an_ip_until_they_end() -> None:
    pods = [
        _pod("a", "default", {"app": "x"}, "127.1.1.1", phase="Pending"),
        _pod("b", "default", {"app": "x"}, "127.1.1.2", phase="Failed"),
        _pod("c", "default", {"app": "x"}, "", phase="Pending"),
    ]
    services = [_service("virt-export-x", "default", {"app": "x"}, publishNotReadyAddresses=True)]
    assert service_lines(services, pods) == [
        "127.1.1.1\tvirt-export-x.default.svc virt-export-x.default.svc.cluster.local"
    ]
    assert service_lines([_service("virt-export-x", "default", {"app": "x"})], pods) == []
