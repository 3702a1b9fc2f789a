"""The KubeVirt VM the backup tests start from, as kubectl applies it: a StorageClass `fast`,
a claim `root` of it in `default`, and the kubevirt.io/v1 VirtualMachine `vm1` (running) whose
one disk is that claim."""

from __future__ import annotations

DEFAULT_CLASS = '{storageclass.kubernetes.io/is-default-class: "true"}'


def vm_manifests(size: str, *, default_class: bool = False) -> str:
    """The class, the claim of `size` (a quantity) and the VM, as one YAML stream; the class is
    the cluster's default one with `default_class`."""
    annotations = f", annotations: {DEFAULT_CLASS}" if default_class else ""
    return f"""\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: fast{annotations}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: root, namespace: default}}
spec:
  storageClassName: fast
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: {size}}}}}
---
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {{name: vm1, namespace: default}}
spec:
  runStrategy: Always
  template:
    spec:
      domain: {{devices: {{disks: [{{name: rootdisk, disk: {{bus: virtio}}}}]}}}}
      volumes: [{{name: rootdisk, persistentVolumeClaim: {{claimName: root}}}}]
"""
