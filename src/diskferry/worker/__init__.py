"""The job runtime every engine's worker uses: job file, /progress, /metrics, result, SIGTERM."""
