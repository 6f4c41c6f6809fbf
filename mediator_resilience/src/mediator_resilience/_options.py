"""`ResilienceMediatorOptions`: the one retry policy of the process's mediator."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Annotated, Any, ClassVar, Final, Self, TypeVar, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from mediator_resilience._primitives.backoff import check_delays, exponential
from mediator_resilience._primitives.config import check_sections, section
from mediator_resilience._primitives.durations import Duration, OptionalDuration
from mediator_resilience._primitives.setting import default
from mediator_resilience._transient import is_transient_failure

__all__ = [
    "DEFAULT_BASE_DELAY",
    "DEFAULT_MAX_DELAY",
    "DEFAULT_MAX_RETRY_ATTEMPTS",
    "ENVIRONMENT_PREFIX",
    "ResilienceMediatorOptions",
    "apply_environment",
]

DEFAULT_MAX_RETRY_ATTEMPTS: Final = 3
DEFAULT_BASE_DELAY: Final = timedelta(milliseconds=200)
DEFAULT_MAX_DELAY: Final = timedelta(seconds=30)
ENVIRONMENT_PREFIX: Final = "RESILIENCE__MEDIATOR__"


def _not_a_bool(value: object) -> object:
    if isinstance(value, bool):
        # pydantic would read True as 1: `max_retry_attempts = true` in a
        # configuration file is a slip, not one retry.
        raise ValueError("give a number, not true or false")
    return value


class ResilienceMediatorOptions(BaseModel):
    """How `RetryBehavior` retries a `@retryable` request.

    The delay before retry n (n = 1, 2, ...) is ``base_delay * 2**(n-1)``, capped
    by `max_delay`, and with `use_jitter` scaled by a random factor in [0.5, 1).

    Attributes:
        max_retry_attempts: Attempts after the first; 0 turns retry off. Default 3.
        base_delay: The delay before the first retry. Default 200 ms.
        max_delay: The cap on any one delay, at least `base_delay`. Default 30 s.
            A failure that asks for a longer wait (its ``retry_after``) is
            raised at once, never waited.
        use_jitter: Spread the delays so that callers do not retry in step.
        should_retry: Whether a failure is worth another attempt. Default
            `is_transient_failure`. Cancellation is never retried, whatever it
            answers.
        should_retry_result: Optional: whether a returned response is a soft
            failure worth another attempt. It shares the attempt budget; when
            the budget is spent, the last response is returned.
        max_retry_duration: Optional: no retry starts, and no wait begins,
            once this long has passed since the first attempt began, or when
            the wait would pass it (then the last failure is raised). Default
            None: the attempts alone bound the retry.

    Durations accept a `timedelta`, a number of seconds, ``"200ms"``, ``"2s"``,
    ``"5m"``, ``"1h"`` or ISO 8601 (``"PT0.2S"``), up to 24 days: the longest
    wait `time.sleep` and thread waits take on every platform.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.
            `max_retry_attempts` refuses True and False; `base_delay` above
            `max_delay` names both.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    SECTION: ClassVar[str] = "resilience.mediator"

    max_retry_attempts: Annotated[int, BeforeValidator(_not_a_bool)] = Field(
        default=DEFAULT_MAX_RETRY_ATTEMPTS, ge=0, strict=False
    )
    base_delay: Duration = default(DEFAULT_BASE_DELAY)
    max_delay: Duration = default(DEFAULT_MAX_DELAY)
    use_jitter: bool = True
    should_retry: Callable[[BaseException], bool] = is_transient_failure
    should_retry_result: Callable[[Any], bool] | None = None
    max_retry_duration: OptionalDuration = default(None)

    @model_validator(mode="after")
    def _check_delays(self) -> Self:
        check_delays(self.base_delay, self.max_delay)
        return self

    def delay_before(self, retry: int, jitter: float = 1.0) -> float:
        """Seconds to wait before retry number `retry` (1-based).

        `jitter` is the random factor in [0.5, 1) when `use_jitter` is set; it
        is ignored otherwise.
        """
        capped = exponential(
            self.base_delay.total_seconds(), retry, cap=self.max_delay.total_seconds()
        )
        return capped * jitter if self.use_jitter else capped

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> Self:
        """Read the options from the configuration section and the environment.

        Args:
            config: The whole configuration, as nested mappings read from TOML,
                JSON or YAML; the section is ``config["resilience"]["mediator"]``.
                Missing sections mean defaults.
            environ: Overrides named ``RESILIENCE__MEDIATOR__<FIELD>`` (any case);
                `os.environ` when not given. They win over the section.

        Raises:
            pydantic.ValidationError: An unknown key or an invalid value, named;
                one read from the environment names its variable in the title.
            TypeError: A section that is not a mapping.
            ValueError: A key under ``resilience`` that is no known section
                (``resilience.mediatr``), with the nearest one.

        Example:
            >>> ResilienceMediatorOptions.from_config(
            ...     {"resilience": {"mediator": {"base_delay": "50ms"}}},
            ...     environ={"RESILIENCE__MEDIATOR__MAX_RETRY_ATTEMPTS": "5"},
            ... ).max_retry_attempts
            5
        """
        check_sections(config)
        values: dict[str, Any] = dict(section(config or {}, cls.SECTION))
        return _validated(cls, values, _from_environment(environ))


def apply_environment(
    options: ResilienceMediatorOptions, *, environ: Mapping[str, str] | None = None
) -> ResilienceMediatorOptions:
    """`options` with the ``RESILIENCE__MEDIATOR__<FIELD>`` variables on top.

    Options given in code stand where the configuration section would; the
    environment, the operator's, wins over both. Without such a variable,
    `options` itself.

    Raises:
        pydantic.ValidationError: A variable names no field or holds an
            invalid value; the title names the variable.
    """
    found = _from_environment(environ)
    if not found:
        return options
    values = {name: getattr(options, name) for name in type(options).model_fields}
    return _validated(type(options), values, found)


def _from_environment(
    environ: Mapping[str, str] | None,
) -> dict[str, tuple[str, str]]:
    """Each field the environment sets: its variable and its value."""
    environment = os.environ if environ is None else environ
    return {
        name[len(ENVIRONMENT_PREFIX) :].lower(): (name, value)
        for name, value in environment.items()
        if name.upper().startswith(ENVIRONMENT_PREFIX)
    }


_O = TypeVar("_O", bound=ResilienceMediatorOptions)


def _validated(
    cls: type[_O], values: dict[str, Any], environment: dict[str, tuple[str, str]]
) -> _O:
    """Validate `values` with the environment on top; its errors name the variables."""
    values.update({field: value for field, (_, value) in environment.items()})
    try:
        return cls.model_validate(values)
    except ValidationError as error:
        blamed = sorted(
            {
                environment[field][0]
                for entry in error.errors()
                if entry["loc"] and (field := str(entry["loc"][0])) in environment
            }
        )
        if not blamed:
            raise
        title = f"{cls.__name__} (from environment variable {', '.join(blamed)})"
        try:
            renamed = ValidationError.from_exception_data(
                title, cast("Any", error.errors())
            )
        except (KeyError, TypeError, ValueError):  # a type pydantic cannot rebuild
            error.add_note(f"read from environment variable {', '.join(blamed)}")
            raise error from None
        raise renamed from None
