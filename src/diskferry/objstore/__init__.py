"""Object storage: one small API over a directory or an S3 bucket and prefix."""
