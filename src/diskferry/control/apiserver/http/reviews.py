"""The reviews a client asks who it is and what it may do (`kubectl auth can-i`, `kubectl auth
whoami`): answered at once, as kube-apiserver does, and never stored.

The daemon has one user, whose bearer token may do everything: `diskferry-admin` in the group
`system:masters`, as kube-apiserver's cluster administrator.
"""

from __future__ import annotations

import secrets
from typing import Any, Literal

from pydantic import Field, model_validator

from diskferry.control.apiserver.objects import typed_body
from diskferry.control.apiserver.validation import validate
from diskferry.control.resources.common import invalid
from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.model import ApiModel, Resource

AUTHORIZATION = "authorization.k8s.io"
AUTHENTICATION = "authentication.k8s.io"
ADMIN = {"username": "diskferry-admin", "groups": ["system:masters", "system:authenticated"]}
EVERYTHING = "the daemon's token may do everything"


class ResourceAttributes(ApiModel):
    """A request on a resource, as an authorizer sees it."""

    namespace: str | None = Field(default=None, description="The namespace; unset: all.")
    verb: str | None = Field(default=None, description="The verb: get, list, create, ..., or *.")
    group: str | None = Field(default=None, description="The API group; unset: the core group.")
    version: str | None = Field(default=None, description="The API version; unset: any.")
    resource: str | None = Field(default=None, description="The resource's plural, or *.")
    subresource: str | None = Field(default=None, description="The subresource, such as status.")
    name: str | None = Field(default=None, description="The object's name; unset: any.")
    field_selector: dict[str, Any] | None = Field(
        default=None, alias="fieldSelector", description="The list's field selector, if any."
    )
    label_selector: dict[str, Any] | None = Field(
        default=None, alias="labelSelector", description="The list's label selector, if any."
    )


class NonResourceAttributes(ApiModel):
    """A request on a path that is no resource, such as `/healthz`."""

    path: str | None = Field(default=None, description="The URL path.")
    verb: str | None = Field(default=None, description="The verb: get, post, ..., or *.")


class AccessReviewSpec(ApiModel):
    """The request asked about: on a resource, or on another path (exactly one of them)."""

    resource_attributes: ResourceAttributes | None = Field(
        default=None, alias="resourceAttributes", description="A request on a resource."
    )
    non_resource_attributes: NonResourceAttributes | None = Field(
        default=None, alias="nonResourceAttributes", description="A request on another path."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> AccessReviewSpec:
        if (self.resource_attributes is None) == (self.non_resource_attributes is None):
            raise invalid(
                "exactly one of nonResourceAttributes or resourceAttributes must be specified"
            )
        return self


class SelfSubjectAccessReview(Resource):
    """May I make this request? (`kubectl auth can-i VERB RESOURCE`)."""

    api_version: Literal["authorization.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["SelfSubjectAccessReview"]
    spec: AccessReviewSpec = Field(description="The request asked about.")
    status: dict[str, Any] | None = Field(default=None, description="The answer; set by the API.")


class RulesReviewSpec(ApiModel):
    """The namespace whose rules are asked for."""

    namespace: str | None = Field(default=None, description="The namespace; unset: all.")


class SelfSubjectRulesReview(Resource):
    """What may I do in this namespace? (`kubectl auth can-i --list`)."""

    api_version: Literal["authorization.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["SelfSubjectRulesReview"]
    spec: RulesReviewSpec = Field(description="The namespace asked about.")
    status: dict[str, Any] | None = Field(default=None, description="The answer; set by the API.")


class SelfSubjectReview(Resource):
    """Who am I? (`kubectl auth whoami`)."""

    api_version: Literal["authentication.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["SelfSubjectReview"]
    status: dict[str, Any] | None = Field(default=None, description="The answer; set by the API.")


class TokenReviewSpec(ApiModel):
    """The token asked about."""

    token: str | None = Field(default=None, description="The bearer token to authenticate.")
    audiences: list[str] | None = Field(default=None, description="The audiences it is for.")


class TokenReview(Resource):
    """Whose is this token? (kr8s's `whoami`)."""

    api_version: Literal["authentication.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["TokenReview"]
    spec: TokenReviewSpec = Field(description="The token asked about.")
    status: dict[str, Any] | None = Field(default=None, description="The answer; set by the API.")


def _kind(group: str, kind: str, plural: str, model: type[Resource]) -> KindInfo:
    return KindInfo(
        group=group,
        version="v1",
        kind=kind,
        plural=plural,
        model=model,
        namespaced=False,
        has_status=False,
        columns=(),
        field_selectors=(),
        verbs=("create",),
    )


KINDS = (
    _kind(
        AUTHORIZATION,
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        SelfSubjectAccessReview,
    ),
    _kind(
        AUTHORIZATION, "SelfSubjectRulesReview", "selfsubjectrulesreviews", SelfSubjectRulesReview
    ),
    _kind(AUTHENTICATION, "SelfSubjectReview", "selfsubjectreviews", SelfSubjectReview),
    _kind(AUTHENTICATION, "TokenReview", "tokenreviews", TokenReview),
)


def find(group: str, version: str, path: str) -> KindInfo | None:
    """The review kind served at `path` of `/apis/<group>/<version>`, None for any other path."""
    for info in KINDS:
        if (info.group, info.version, info.plural) == (group, version, path.strip("/")):
            return info
    return None


def _status(review: Resource, token: str) -> dict[str, Any]:
    """The answer to `review` for the holder of the daemon's token."""
    if isinstance(review, SelfSubjectAccessReview):
        return {"allowed": True, "reason": EVERYTHING}
    if isinstance(review, SelfSubjectRulesReview):
        return {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }
    if isinstance(review, TokenReview):
        given = (review.spec.token or "").encode()
        if secrets.compare_digest(given, token.encode()):
            return {"authenticated": True, "user": ADMIN}
        return {"authenticated": False, "error": "the token is not the daemon's"}
    return {"userInfo": ADMIN}


def answer(info: KindInfo, body: Any, token: str) -> dict[str, Any]:
    """The review `body` of `info`'s kind answered for the holder of the daemon's `token`;
    BadRequestError for a body of another kind, InvalidError naming each bad field."""
    body = typed_body(info, body)
    review, _ = validate(info, body)
    out = review.to_json()
    out["metadata"] = body["metadata"]
    out["status"] = _status(review, token)
    return out
