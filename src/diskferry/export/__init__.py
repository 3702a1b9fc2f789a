"""The export engine: an HTTPS export server, the export proxy, and a resuming download client."""
