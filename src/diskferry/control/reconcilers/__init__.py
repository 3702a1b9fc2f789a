"""One reconciler per kind, and the pieces they share: claims, imports, phases, progress."""
