"""The image tests take the image built once for the whole run (image_support.built)."""

from __future__ import annotations

from image_support import built as built
