"""Adapters to QEMU: qemu-img, QMP, qemu-storage-daemon, changed-block tracking."""
