"""The cluster shape implements the protocols the reconcilers take their runner and the host's
services through: every member, with its parameters (as the embedded host does, see
tests/control/test_host.py); a cluster with no image store says why, keeps nothing, and names
where an image would be."""

from __future__ import annotations

import pytest
from control_support import assert_implements

from diskferry.control.host.images import ImageNotStoredError, ImageStore
from diskferry.control.host.volumes import Volumes
from diskferry.control.resources.virtualimage import VirtualImage
from diskferry.control.runtime.runner.base import Runner
from diskferry.kube.images import NoImageStore
from diskferry.kube.runner import PodRunner
from diskferry.kube.volumes import ClusterVolumes

IMPLEMENTED = [(Runner, PodRunner), (Volumes, ClusterVolumes), (ImageStore, NoImageStore)]


@pytest.mark.parametrize(("protocol", "cluster"), IMPLEMENTED, ids=lambda c: c.__name__)
def test_the_cluster_shape_has_every_member_of_each_protocol(protocol: type, cluster: type) -> None:
    assert_implements(protocol, cluster)


def test_a_cluster_with_no_image_store_says_why_and_keeps_nothing() -> None:
    store = NoImageStore()
    image = VirtualImage.model_validate(
        {
            "metadata": {"name": "img", "namespace": "default", "uid": "u-1"},
            "spec": {"dataSource": {"type": "HTTP", "http": {"url": "http://x/d.img"}}},
        }
    )
    assert "storage PersistentVolumeClaim" in (store.unavailable() or "")
    assert store.reference(image) == "vi/default/img:u-1"
    assert not store.holds(store.reference(image))
    with pytest.raises(ImageNotStoredError):
        store.disk(image)
