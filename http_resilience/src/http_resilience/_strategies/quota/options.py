"""The published quota's options: the reserve, the legacy names, the bound.

`QuotaOptions` (in the standard pipeline only), its defaults, the checks of
the legacy triple's names, and the builders of the two drivers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, ClassVar, Final, cast

import httpx
from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.fields import FROZEN, Count
from http_resilience._core.host_registry import DEFAULT_MAXIMUM_HOSTS
from http_resilience._core.pipeline import AsyncHandler, SyncHandler
from http_resilience._core.quota_headers import LEGACY_HEADERS
from http_resilience._core.raw_headers import is_token
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


class QuotaOptions(BaseModel):
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
    maximum_hosts: Count = Field(default=DEFAULT_MAXIMUM_HOSTS, ge=1)

    is_deadline: ClassVar[bool] = False
    repeats: ClassVar[bool] = False

    @property
    def label(self) -> str:
        """``"quota"``."""
        return "quota"

    @property
    def waits_outside_attempts(self) -> bool:
        """The quota never waits: the retry around it does."""
        return False

    def will_repeat(self, request: httpx.Request) -> bool:
        """Never: the quota sends nothing twice."""
        return False

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> AsyncQuota:
        """The quota reader, around `next`."""
        return AsyncQuota(
            next,
            QuotaStrategy(
                options=self, clock=context.clock, telemetry=context.telemetry
            ),
        )

    def build_sync(
        self, next: SyncHandler, context: BuildContext, place: Placement
    ) -> SyncQuota:
        """The quota reader, around `next`."""
        return SyncQuota(
            next,
            QuotaStrategy(
                options=self, clock=context.clock, telemetry=context.telemetry
            ),
        )
