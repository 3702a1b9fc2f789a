"""The operator's probes: /healthz and /readyz answer what their checks say, and uvicorn, run in
a thread of its own, leaves the process's signal handlers as they were (it has no switch for
that; a uvicorn that took signals from a thread would fail here)."""

from __future__ import annotations

import http.client
import signal
import threading
import time
from types import FrameType

from diskferry.kube.health import Health


def _get(port: int, path: str) -> tuple[int, str] | None:
    """The status and body of GET `path`, or None while nothing answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    except OSError:
        return None
    finally:
        conn.close()


def _answered(port: int, path: str) -> tuple[int, str]:
    """GET `path` once the probes answer (bounded)."""
    for _ in range(200):
        if (answer := _get(port, path)) is not None:
            return answer
        time.sleep(0.05)
    raise AssertionError(f"nothing answered {path}")


def test_probes_answer_and_leave_the_signals_to_the_process() -> None:
    assert threading.current_thread() is threading.main_thread()
    taken: list[int] = []

    def mine(signum: int, frame: FrameType | None) -> None:
        taken.append(signum)

    before = {sig: signal.signal(sig, mine) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        health = Health("127.0.0.1", 0, lambda: None, lambda: "not the leader")
        health.start()
        try:
            assert _answered(health.port, "/healthz") == (200, "ok")
            assert _answered(health.port, "/readyz") == (503, "not the leader")
            assert signal.getsignal(signal.SIGTERM) is mine
            assert signal.getsignal(signal.SIGINT) is mine
            signal.raise_signal(signal.SIGTERM)
            assert taken == [signal.SIGTERM]
            assert _answered(health.port, "/healthz") == (200, "ok")
        finally:
            health.stop()
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
