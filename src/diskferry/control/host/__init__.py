"""The host's services, behind the protocols reconcilers take them through: the volumes of the
StorageClasses (`volumes`), the image store (`images`), the machines that run VMs
(`machines`), the certificates of the servers the daemon starts (`certs`), the export
proxy (`proxy`) and where export servers listen (`servers`); and this host as the one Node of
its cluster (`node`). The embedded daemon implements them on this machine (`embedded`); a
cluster implements them with PVCs, a registry, KubeVirt, Secrets, the proxy's Deployment and
headless Services, and the reconcilers do not change."""
