"""The probe job: what the worker's `probe` kind runs, reading only the head of a source (as an
import reaches it) to tell its format and virtual size, writing nothing. A control plane whose
claims are made with their size (PVCs) asks it when neither the object nor its source gives
one."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from diskferry.base.errors import DiskferryError
from diskferry.importer.job import ImportJob


class SizeUnknownError(DiskferryError):
    """The head of an image does not tell its virtual size (a compressed raw image, a format
    whose header is not read)."""

    reason = "SizeUnknown"


class ProbeJob(ImportJob):
    """Read the head of `source` and tell its format and virtual size; `target` is unused."""

    kind: Literal["probe"] = "probe"  # type: ignore[assignment]
    target: str = ""


class ProbeResult(BaseModel):
    """What the head of a source tells."""

    model_config = ConfigDict(populate_by_name=True)

    format: str
    compression: str | None
    virtual_size: int = Field(alias="virtualSize")

    def to_json(self) -> dict:
        """The result as JSON-ready values, camelCase keys."""
        return self.model_dump(by_alias=True)
