"""The models a job file is read into: the base every job shares, and the rule on inline secrets.

A job file is read with the validation context `{"jobFile": True}` (see `validate_job`); a
model built in-process (the CLI, from its flags) has no such context. Secrets may come
inline only in-process: a model reads its secret fields through `refuse_inline_secret`,
which refuses them in a job file, where only files and environment variables naming them
are allowed (`headersFile`, `tokenFile`, `passwordFile`, `passwordEnv`).
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo
from pydantic_core import PydanticCustomError

JOB_FILE = "jobFile"
# letters, digits and . _ : - (a UUID, a Kubernetes name or uid), so it fits any label or xattr
JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$"


class JobModel(BaseModel):
    """The settings of every model a job file is read into: no unknown field, no value echoed.

    `hide_input_in_errors` keeps a value given in a wrong field (a secret, perhaps) out of
    the validation message.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, hide_input_in_errors=True)


class WorkerJob(JobModel):
    """Fields every job has: its id, and where /progress and /metrics listen (port 0 picks one).

    Each engine names its worker in `WORKER`, so that a runner knows from the job alone what
    runs it: `python -m WORKER JOB.json`.
    """

    WORKER: ClassVar[str] = ""
    READS: ClassVar[tuple[str, ...]] = ()
    """The job file's fields that name volumes the job only reads, which a runner may give it
    read-only."""
    job_id: str | None = Field(default=None, alias="jobId", pattern=JOB_ID_PATTERN)
    address: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535)


J = TypeVar("J", bound=WorkerJob)


def job_file(job: WorkerJob) -> dict[str, Any]:
    """`job` as its job file holds it: every field by its camelCase name, as JSON values."""
    return job.model_dump(mode="json", by_alias=True)


def validate_job(model: type[J], data: dict[str, Any]) -> J:
    """`data`, read from a job file, as a `model`: inline secrets refused."""
    return model.model_validate(data, context={JOB_FILE: True})


def validation_message(e: ValidationError) -> str:
    """What is wrong with a job, one problem after another, naming each field and no value."""
    problems = []
    for error in e.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(part) for part in error["loc"]) or "the job"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


def refuse_inline_secret(info: ValidationInfo, given: bool, instead: str) -> None:
    """Refuse the secret field being validated when it is `given` and comes from a job file."""
    if given and info.context and info.context.get(JOB_FILE):
        raise PydanticCustomError(
            "inline_secret",
            "a job file may not hold this secret inline: name a file with {instead}",
            {"instead": instead},
        )
