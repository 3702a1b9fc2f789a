"""`python -m diskferry.export.proxy_process`: one more process of the export proxy, with the
proxy job that it reads from stdin (JSON), listening on the job's port beside the first
process (SO_REUSEPORT), which it tells with a line on stdout; SIGTERM or SIGINT drains and ends
it, as they do the first process."""

from __future__ import annotations

import logging
import signal
import sys
import threading

from diskferry.base.heap import limit_arenas
from diskferry.base.quick_exit import freeze_at_exit
from diskferry.export.job import ProxyJob
from diskferry.export.service import ProxyShare
from diskferry.serving.tcp_socket import bind_tcp

log = logging.getLogger("diskferry.export.proxy")


def main() -> int:
    """Serve the job's port until SIGTERM or SIGINT; the exit code."""
    freeze_at_exit()
    limit_arenas()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        job = ProxyJob.model_validate_json(sys.stdin.read())
        share = ProxyShare.of(job)
        try:
            sock = bind_tcp(job.bind_address, job.listen_port, reuse_port=True)
            with sock:
                share.serve(job, sock, stop, lambda port: print("listening", flush=True))
        finally:
            share.tls.close()
    except Exception as e:
        log.error("export proxy process failed: %s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
