"""The reconcilers, one folder per family of kinds, each kind's reconciler with its helpers beside
it: disks, images, vms, exports, velero, datamover, kvbackup."""
