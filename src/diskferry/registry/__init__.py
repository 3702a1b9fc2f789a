"""OCI distribution: references, auth, a registry client, and containerDisk images."""
