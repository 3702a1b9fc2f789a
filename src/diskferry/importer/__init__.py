"""The import engine: brings a disk image from a file, URL or containerDisk into a volume."""
