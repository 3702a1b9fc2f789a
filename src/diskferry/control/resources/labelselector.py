"""A label selector in Kubernetes' object shape (matchLabels, matchExpressions), and its test."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from diskferry.control.errors import BadRequestError
from diskferry.control.resources.common import invalid
from diskferry.control.resources.labels import LabelSelector as ParsedSelector
from diskferry.control.resources.labels import parse_labels
from diskferry.control.resources.model import ApiModel


class SelectorOperator(StrEnum):
    """How a requirement compares a label's value."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(ApiModel):
    """One requirement: the key, the operator and, for In and NotIn, the values."""

    key: str = Field(min_length=1, description="The label's key.")
    operator: SelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[str] = Field(
        default_factory=list, description="The values, for In and NotIn (and only for them)."
    )

    @model_validator(mode="after")
    def _values_fit(self) -> LabelSelectorRequirement:
        listed = self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)
        if listed and not self.values:
            raise invalid(f"operator {self.operator} needs values")
        if not listed and self.values:
            raise invalid(f"operator {self.operator} takes no values")
        return self

    def text(self) -> str:
        """The requirement as a selector string has it."""
        values = ",".join(self.values)
        return {
            SelectorOperator.IN: f"{self.key} in ({values})",
            SelectorOperator.NOT_IN: f"{self.key} notin ({values})",
            SelectorOperator.EXISTS: self.key,
            SelectorOperator.DOES_NOT_EXIST: f"!{self.key}",
        }[self.operator]


class LabelSelector(ApiModel):
    """Labels that must all match; an empty selector matches every object."""

    match_labels: dict[str, str] = Field(
        default_factory=dict,
        alias="matchLabels",
        description="Labels that must all be present with these values.",
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list,
        alias="matchExpressions",
        description="Requirements that must all hold.",
    )

    @model_validator(mode="after")
    def _well_formed(self) -> LabelSelector:
        try:
            self._parsed()
        except BadRequestError as e:
            raise invalid(e.message) from None
        return self

    def _parsed(self) -> ParsedSelector:
        parts = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        parts += [r.text() for r in self.match_expressions]
        return parse_labels(",".join(parts) or None)

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether `labels` meet every requirement of the selector."""
        return self._parsed().matches(labels)
