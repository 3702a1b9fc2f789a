"""The upload job and its result: one upload server, the CLI's and the worker's alike."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from diskferry.serving.listening import Listening
from diskferry.worker.job import WorkerJob


class UploadPhase(StrEnum):
    """What an upload server is doing."""

    STARTING = "Starting"
    WAITING = "WaitingForUpload"
    RECEIVING = "ReceivingUpload"  # a resumable upload's part coming into its partial file
    DONE = "Done"


class UploadJob(WorkerJob, Listening):
    """What `diskferry upload serve` and the worker run: wait for one upload into `target`.

    The token is read from `tokenFile` for each upload: its first line is the token, an
    optional second line the RFC 3339 time it expires. It authorizes CDI's paths as a bearer
    token and is the secret of Deckhouse's path `/upload/<token>`.
    """

    # where Deckhouse's upload URL puts its secret: `/upload/<token>`
    UPLOAD_PREFIX: ClassVar[str] = "/upload/"
    WORKER = "diskferry.importer.worker"
    kind: Literal["upload"] = "upload"
    target: str
    format: Literal["raw", "qcow2"] = "raw"
    size: int | None = Field(default=None, ge=0)
    checksum: str | None = None
    token_file: str = Field(alias="tokenFile")
    keep_serving: bool = Field(
        default=False,
        alias="keepServing",
        description="after the upload, answer 409 until stopped instead of ending",
    )
    grace: float = Field(default=10.0, ge=0, description="seconds for responses to finish")


class UploadResult(BaseModel):
    """What an upload server did: where it listened and what the upload imported."""

    model_config = ConfigDict(populate_by_name=True)

    listen_port: int = Field(alias="listenPort")
    uploaded: dict | None = Field(description="the import result, or None when stopped first")

    def to_json(self) -> dict:
        """The result as JSON-ready values, camelCase keys."""
        return self.model_dump(by_alias=True)
