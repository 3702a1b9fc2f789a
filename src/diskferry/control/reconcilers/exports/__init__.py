"""Exports: VirtualMachineExport and what its source serves (a disk, a snapshot, a VM's manifest,
a pulled backup's point), its token, and VirtualDataExport."""
