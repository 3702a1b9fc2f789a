"""The import engine: brings a disk image from a file or URL into a volume."""
