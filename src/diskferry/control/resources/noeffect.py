"""Fields taken from an anchor's API (Deckhouse, KubeVirt, Velero) that have no effect here.

Such a field is accepted, so that the anchor's manifests apply unchanged, and never silently
dropped: its schema carries why it has no effect (NO_EFFECT), its description says so, and
the API answers a write that sets it with a `Warning` header naming the field and the reason.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

NO_EFFECT = "x-diskferry-no-effect"
"""The schema key whose value says why a field has no effect here."""


def no_effect(why: str, description: str, **field_args: Any) -> Any:
    """A pydantic Field accepted for the anchor's sake: `description` says what the anchor
    means by it, `why` why diskferry does nothing with it."""
    return Field(
        description=f"{description} Accepted, with no effect here: {why}.",
        json_schema_extra={NO_EFFECT: why},
        **field_args,
    )


def reason_of(extra: Any) -> str | None:
    """Why a field with this `json_schema_extra` has no effect here, None when it has one."""
    return extra.get(NO_EFFECT) if isinstance(extra, dict) else None
