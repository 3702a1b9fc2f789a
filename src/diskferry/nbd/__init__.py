"""The project's NBD client and NbdVolume, and opening a volume from a path or NBD URL."""

from diskferry.nbd.open import open_volume

__all__ = ["open_volume"]
