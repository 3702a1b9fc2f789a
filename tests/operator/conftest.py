"""The operator tests take the control tests' helpers (daemon_support, control_support), and the
image built once for the whole run (image_support), which the stand-in's kubelet runs Pods from."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "control"))
sys.path.insert(0, str(Path(__file__).parents[1] / "image"))

from image_support import built as built
from image_support import pinned as pinned
from pods_support import pods_cluster as pods_cluster
