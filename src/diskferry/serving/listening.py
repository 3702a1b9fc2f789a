"""The job fields of a server: where it listens, its certificates, and its server-side limits."""

from __future__ import annotations

from pydantic import Field

from diskferry.serving.accesslog import AccessLogger
from diskferry.serving.defaults import DEFAULT_ADDRESS, EXPORT_PORT
from diskferry.serving.listener import Timeouts
from diskferry.serving.run import ServeOptions
from diskferry.worker.job import JobModel
from diskferry.worker.pod import server_address


class Listening(JobModel):
    """Where a server listens (port 0 picks one) and its server-side limits."""

    cert_dir: str = Field(alias="certDir", description="tls.crt/tls.key, or a CA to issue from")
    sans: list[str] = Field(default_factory=list, description="default: localhost, 127.0.0.1, host")
    listen_address: str = Field(default=DEFAULT_ADDRESS, alias="listenAddress")
    listen_port: int = Field(default=EXPORT_PORT, ge=0, le=65535, alias="listenPort")
    tls_settings: str | None = Field(default=None, alias="tlsSettings")
    header_timeout: float = Field(default=10.0, gt=0, alias="headerTimeout")
    idle_timeout: float = Field(default=60.0, gt=0, alias="idleTimeout")

    @property
    def bind_address(self) -> str:
        """The address the server listens on: `listen_address`, but its Pod's when it asks for
        every address in a Pod (see `worker.pod.server_address`)."""
        return server_address(self.listen_address)

    def serve_options(
        self, ttl: float | None, grace: float, access_log_class: type[AccessLogger]
    ) -> ServeOptions:
        """The options `serving.run.run` takes for this server."""
        return ServeOptions(
            host=self.bind_address,
            port=self.listen_port,
            ttl=ttl,
            grace=grace,
            timeouts=Timeouts(header=self.header_timeout, idle=self.idle_timeout),
            access_log_class=access_log_class,
        )
