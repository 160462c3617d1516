"""metav1.ObjectMeta of a manifest, validated as kube-apiserver validates it.

The API server decodes ``metadata`` strictly (an unknown key, or a label that
is not a string, is refused before anything else) and then validates names,
labels and annotations by the rules of k8s.io/apimachinery
(``pkg/util/validation``: qualified names, label values, the 256 KiB limit on
annotations). ``railtrain validate`` applies the same rules so the two agree.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ConfigDict, Field, field_validator

from railtrain.crds.base import Model

DNS_1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
MAX_NAME_LENGTH = 52
"""Job names leave room for ``-<rank>`` pod suffixes inside the 63-character DNS label limit."""
_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
MAX_ANNOTATIONS_BYTES = 256 * 1024


def qualified_name_error(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes qualified name (``[prefix/]name``), None when it is.

    Rule: k8s.io/apimachinery/pkg/util/validation.IsQualifiedName: an optional
    DNS-1123 subdomain prefix of at most 253 characters, then a name of at
    most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric.
    """
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_1123_SUBDOMAIN.match(prefix)):
        return f"key {key!r}: the prefix must be a DNS subdomain (lower-case alphanumerics, '-' and '.') of at most 253 characters"
    if not name or len(name) > 63 or not _NAME_PART.match(name):
        return f"key {key!r}: the name must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
    return None


class ObjectMeta(Model):
    """The metav1.ObjectMeta of a TrainingJob manifest (the keys the API server accepts; read-only ones are allowed as kubectl prints them)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(description="Job name: a DNS-1035 label of at most 52 characters.", max_length=MAX_NAME_LENGTH, pattern=DNS_1035)
    namespace: str | None = Field(None, max_length=63, pattern=_DNS_1123_LABEL.pattern)
    generate_name: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    owner_references: list[dict[str, Any]] | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    managed_fields: list[dict[str, Any]] | None = None
    self_link: str | None = None

    @field_validator("generation", "deletion_grace_period_seconds", mode="before")
    @classmethod
    def _whole_number(cls, value: Any) -> Any:
        """A whole JSON number written with a fraction (``1.0``) is the integer: the API server converts it when it
        decodes ObjectMeta (k8s.io/apimachinery's unstructured converter), so ``railtrain validate`` accepts it too;
        ``1.5`` stays refused by both."""
        return int(value) if isinstance(value, float) and value.is_integer() else value

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        for key, value in (labels or {}).items():
            why = qualified_name_error(key)
            if why:
                raise ValueError(f"metadata.labels: {why}")
            if len(value) > 63 or not _LABEL_VALUE.match(value):
                raise ValueError(f"metadata.labels: value {value!r} of {key!r}: at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric, or empty")
        return labels

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, annotations: dict[str, str] | None) -> dict[str, str] | None:
        for key in annotations or {}:
            why = qualified_name_error(key)
            if why:
                raise ValueError(f"metadata.annotations: {why}")
        if sum(len(k) + len(v) for k, v in (annotations or {}).items()) > MAX_ANNOTATIONS_BYTES:
            raise ValueError("metadata.annotations: must be at most 256 KiB in total")
        return annotations
