"""Every kind the daemon serves, in one registry."""

from diskferry.control.kinds import Registry
from diskferry.control.resources.core import EVENTS, NAMESPACES, SECRETS
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS
from diskferry.control.resources.vmexport import VIRTUAL_MACHINE_EXPORTS

REGISTRY = Registry([NAMESPACES, SECRETS, EVENTS, VIRTUAL_DISKS, VIRTUAL_MACHINE_EXPORTS])
