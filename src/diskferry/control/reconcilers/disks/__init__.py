"""Disks: VirtualDisk and VirtualDiskSnapshot, and what a claim filled by an import needs: its
life (`claimlife`), the import job (`importjob`), its data sources, a clone's source served
beside its claim (`clonesources`), upload servers, volume jobs, StorageClasses and their claims'
modes, teardown, and the protection of a disk a VirtualMachine uses (`inuse`)."""
