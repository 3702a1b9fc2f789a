"""Every kind the daemon serves, in one registry."""

from diskferry.control.kinds import Registry
from diskferry.control.resources.core import EVENTS, NAMESPACES, SECRETS

REGISTRY = Registry([NAMESPACES, SECRETS, EVENTS])
