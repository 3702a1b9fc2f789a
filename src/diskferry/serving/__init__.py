"""HTTPS serving the engines share: certificates, reloading TLS, the listener, the run loop."""
