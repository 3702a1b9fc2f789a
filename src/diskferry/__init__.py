"""diskferry: moves virtual-machine disks — import, export, backup and restore."""

__version__ = "0.1.0"
