"""Images: VirtualImage and ClusterVirtualImage, and the keeping of an image in the image store
(`registryimage`)."""
