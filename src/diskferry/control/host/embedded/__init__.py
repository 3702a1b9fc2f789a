"""The embedded host: the host's services on this machine, over one data directory (claims as
files and loop devices, an OCI image layout store, QEMU processes, the daemon's CA and the
export proxy worker). Only the controllers' wiring imports it; reconcilers never do."""
