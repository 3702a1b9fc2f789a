"""A synchronous QMP (and guest agent) client over qemu.qmp, run on a private event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from qemu.qmp import ConnectError, EventListener, ExecuteError, QMPClient, QMPError

from diskferry.base.errors import DiskferryError

T = TypeVar("T")
# qemu.qmp logs each failure it also raises; keep those lines off an unconfigured stderr.
logging.getLogger("qemu.qmp").addHandler(logging.NullHandler())


class QmpError(DiskferryError):
    """A QMP command failed, or the monitor could not be reached."""

    reason = "QmpError"

    def __init__(
        self,
        message: str,
        *,
        error_class: str | None = None,
        desc: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message, reason=reason)
        self.error_class = error_class
        self.desc = desc


class Qmp:
    """A connection to a QMP monitor (or, with `guest_agent`, a QEMU guest agent).

    Its asyncio client runs on an event loop in a private thread, so it can be used
    from any thread, including one that runs an event loop of its own.
    """

    def __init__(
        self, socket_path: str, *, timeout: float = 30.0, guest_agent: bool = False
    ) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="qmp", daemon=True)
        self._thread.start()
        self._client = QMPClient(socket_path)
        if guest_agent:
            self._client.await_greeting = False
            self._client.negotiate = False
        self._events = EventListener()
        self._client.register_listener(self._events)
        self._peer = "the guest agent" if guest_agent else "QEMU"
        try:
            self._run(self._client.connect(socket_path), timeout)
        except (ConnectError, QMPError, OSError, TimeoutError) as e:
            self._stop_loop()
            raise QmpError(
                f"cannot connect to {self._peer} at {socket_path}: {e}",
                reason="QmpConnectFailed",
            ) from e

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout), self._loop)
        return future.result()

    def command(self, name: str, arguments: Mapping[str, Any] | None = None, /, **args: Any) -> Any:
        """Run command `name` and return its result; keyword names have `_` read as `-`."""
        merged = dict(arguments or {})
        merged.update({key.replace("_", "-"): value for key, value in args.items()})
        try:
            return self._run(self._client.execute(name, merged or None), self.timeout)
        except ExecuteError as e:
            raise QmpError(
                f"{self._peer} refused {name}: {e}", error_class=e.error_class, desc=str(e)
            ) from e
        except (QMPError, OSError, TimeoutError) as e:
            raise QmpError(
                f"{self._peer} at {self.socket_path} did not answer {name}: "
                f"{e or type(e).__name__}",
                reason="QmpDisconnected",
            ) from e

    def wait_event(self, name: str, timeout: float, /, **data: Any) -> dict[str, Any]:
        """Wait for event `name` whose data has the given fields (`_` read as `-`)."""
        wanted = {key.replace("_", "-"): value for key, value in data.items()}

        async def wait() -> dict[str, Any]:
            async for event in self._events:
                fields = event.get("data", {})
                if event["event"] == name and all(fields.get(k) == v for k, v in wanted.items()):
                    return dict(event)
            raise QmpError(f"QEMU monitor at {self.socket_path} closed", reason="QmpDisconnected")

        try:
            return self._run(wait(), timeout)
        except TimeoutError as e:
            raise QmpError(
                f"QEMU sent no {name} event within {timeout:g} s", reason="QmpTimeout"
            ) from e

    def clear_events(self) -> None:
        """Forget the events received so far."""
        self._loop.call_soon_threadsafe(self._events.clear)

    def close(self) -> None:
        """Disconnect and stop the private event loop."""
        if self._loop.is_closed():
            return
        # disconnect() re-raises whatever ended the connection; it is gone either way.
        with contextlib.suppress(Exception):
            self._run(self._client.disconnect(), self.timeout)
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Qmp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
