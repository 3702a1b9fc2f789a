"""The byte layer: volumes, extents, copying, formats, progress."""
