"""VirtualMachines: the VM reconciler, what a VM is launched with, its sizing, status and class,
its changed-block tracking, its guest agent (`quiesce`) and the room its backup overlays need
(`overlayspace`)."""
