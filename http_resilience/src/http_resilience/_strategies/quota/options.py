"""The published quota's options: the reserve, the legacy names, the bound.

`QuotaOptions` (in the standard pipeline only), its defaults, the checks of
the legacy triple's names, and the builders of the two drivers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Final, cast

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

from http_resilience._core.fields import FROZEN, PositiveCount
from http_resilience._core.host_registry import DEFAULT_MAXIMUM_HOSTS
from http_resilience._core.quota_headers import LEGACY_HEADERS
from http_resilience._core.raw_headers import is_token
from http_resilience._core.step_defaults import SyncStepDefaults
from http_resilience._strategies.quota.strategy import (
    AsyncQuota,
    QuotaStrategy,
    SyncQuota,
)

__all__ = [
    "DEFAULT_QUOTA_LEGACY_HEADERS",
    "DEFAULT_QUOTA_RESERVE",
    "HeaderNames",
    "QuotaOptions",
    "check_legacy_headers",
    "split_header_names",
]

DEFAULT_QUOTA_RESERVE: Final = 0.1
DEFAULT_QUOTA_LEGACY_HEADERS: Final = LEGACY_HEADERS


def split_header_names(names: object) -> object:
    """The three names as a tuple, from a sequence or one comma-joined string.

    Raises:
        ValueError: Not exactly three strings: one error, on the field.
    """
    if isinstance(names, str):
        names = [name.strip() for name in names.split(",")]
    if not isinstance(names, list | tuple) or not all(
        isinstance(name, str) for name in cast("Sequence[object]", names)
    ):
        raise ValueError(
            "give three header names (limit, remaining, reset), as a list or "
            "joined by commas"
        )
    found = tuple(cast("Sequence[str]", names))
    if len(found) != 3:
        raise ValueError(
            "give exactly three header names (limit, remaining, reset), "
            f"got {len(found)}"
        )
    return found


def check_legacy_headers(names: tuple[str, str, str]) -> tuple[str, str, str]:
    """`names`, if they are three distinct HTTP header names; else `ValueError`."""
    for name in names:
        if not is_token(name):
            raise ValueError(f"{name!r} is not an HTTP header name")
    if len({name.lower() for name in names}) != len(names):
        raise ValueError("the three header names must differ (in any case)")
    return names


HeaderNames = Annotated[
    tuple[str, str, str],
    BeforeValidator(split_header_names),
    AfterValidator(check_legacy_headers),
]
"""The legacy triple's names: three distinct header names, or one string of
them joined by commas."""


class QuotaOptions(SyncStepDefaults, BaseModel):
    """The published-quota reader of the standard pipeline.

    Attributes:
        quota_reserve: The share of a published quota held back, in [0, 1):
            attempts are refused once ``remaining <= quota_reserve x quota``.
        quota_legacy_headers: The legacy triple's names: limit, remaining,
            reset.
        maximum_hosts: The hosts refused at once that are remembered.
    """

    model_config = FROZEN

    quota_reserve: float = Field(
        default=DEFAULT_QUOTA_RESERVE, ge=0.0, lt=1.0, allow_inf_nan=False
    )
    quota_legacy_headers: HeaderNames = DEFAULT_QUOTA_LEGACY_HEADERS
    maximum_hosts: PositiveCount = DEFAULT_MAXIMUM_HOSTS

    _label = "quota"
    _strategy_kind = QuotaStrategy
    _async_driver = AsyncQuota
    _sync_driver = SyncQuota
