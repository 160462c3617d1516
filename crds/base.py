"""The base of every API model: camelCase JSON names, unknown keys refused (Kubernetes API conventions)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Model(BaseModel):
    """A pydantic model with the API's conventions: camelCase aliases, ``extra="forbid"``, enums stored as values."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
    )

    def to_api(self) -> dict[str, Any]:
        """Return the camelCase JSON form the API server stores, without unset optionals."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
