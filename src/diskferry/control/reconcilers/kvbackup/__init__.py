"""KubeVirt's VirtualMachineBackup: the shared state and tracker (`vmbackupstate`), a Push backup
through a DataUpload, a Pull backup served by a backup-point worker, and the export it serves
its point through."""
